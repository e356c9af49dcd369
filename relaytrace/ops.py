"""How heavy an op is, so a fused kernel's time can be billed to its main op."""

from __future__ import annotations

from functools import lru_cache

from . import ir

# Higher ranks win the anchor of a fused kernel: the op people would name it by.
_RANKS = (
    (4, ("conv", "matmul", "dense", "linear", "batch_matmul", "einsum", "attention")),
    (3, ("pool", "adaptive")),
    (2, ("softmax", "norm", "mean", "sum", "max", "min", "reduce", "cumsum", "topk", "argmax")),
    (0, ir.DATA_MOVEMENT_WORDS),
)


@lru_cache(maxsize=None)
def op_rank(op: str) -> int:
    name = ir.short_op(op)
    for rank, words in _RANKS:
        if any(word in name for word in words):
            return rank
    return 1  # elementwise and the rest


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d if isinstance(d, int) else 1
    return out


def estimated_flops(origin) -> float:
    """A rough operation count, only used to split a fused kernel's time by weight.

    Shapes are those of the input model (NCHW/OIHW for convolutions), so the estimate
    does not depend on the layout a build chose.
    """
    out = sum(_prod(s) for s in origin.output_shapes) or 1
    name = ir.short_op(origin.op)
    ins = origin.input_shapes
    if "conv" in name and len(ins) > 1 and len(ins[1]) >= 3:
        return 2.0 * out * _prod(ins[1][1:])
    if any(w in name for w in ("matmul", "dense", "linear")) and ins and ins[0]:
        k = ins[0][-1] if isinstance(ins[0][-1], int) else 1
        return 2.0 * out * k
    if "pool" in name and ins and ins[0]:
        return float(_prod(ins[0]))
    if op_rank(origin.op) == 0:
        return 0.5 * out
    return float(out)
