"""How heavy an op is, so a fused kernel's time can be billed to its main op."""

from __future__ import annotations

from . import ir

# Higher ranks win the anchor of a fused kernel: the op people would name it by.
_RANKS = (
    (4, ("conv", "matmul", "dense", "linear", "batch_matmul", "einsum", "attention")),
    (3, ("pool", "adaptive")),
    (2, ("softmax", "norm", "mean", "sum", "max", "min", "reduce", "cumsum", "topk", "argmax")),
    (0, ir.DATA_MOVEMENT_WORDS),
)


def op_rank(op: str) -> int:
    name = ir.short_op(op)
    for rank, words in _RANKS:
        if any(word in name for word in words):
            return rank
    return 1  # elementwise and the rest
