"""What the names of ops say: which only move data, which manage memory, how heavy
each is. Plain tables, no TVM: the tracker, verification and attribution share them.

Names come in two forms: a Relax op (``relax.permute_dims``) and, after legalization,
a PrimFunc named after its compute with a number (``transpose16``). Both are looked up
exactly: the op by name, the PrimFunc by its name without the number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache, lru_cache

# Ops that only move, reshape or recast data. A pass may insert them (ConvertLayout,
# AlterOpImpl, mixed precision); they are "inserted", not "unresolved".
DATA_MOVEMENT_OPS = frozenset(
    {
        "relax.permute_dims",
        "relax.layout_transform",
        "relax.reshape",
        "relax.astype",
        "relax.squeeze",
        "relax.expand_dims",
        "relax.flatten",
        "relax.broadcast_to",
        "relax.wrap_param",
        "relax.builtin.copy",
        "vm.builtin.reshape",
        "vm.builtin.copy",
    }
)
# the PrimFuncs LegalizeOps makes of them, by compute name (``transpose16`` -> transpose)
DATA_MOVEMENT_PRIMFUNCS = frozenset(
    {
        "transpose",
        "layout_transform",
        "te_layout_transform",
        "reshape",
        "cast",
        "squeeze",
        "expand_dims",
        "flatten",
        "broadcast_to",
        "copy",
    }
)

# PrimFuncs VMShapeLower makes to compute symbolic shapes (sizes of allocations, shapes
# of outputs) on the host, by name without the number: "inserted", serving the op
# whose shapes they compute.
SHAPE_PRIMFUNCS = frozenset({"shape_func"})

# PrimFuncs ComputePrimValue makes to compute a prim value an entry passes on (an
# ``R.prim_value(T.float64(0.25))`` given to a packed call) on the host, by name
# without the number: what they compute is their name.
PRIM_VALUE_PRIMFUNCS = frozenset({"compute_symbolic_expr"})

# Calls that manage memory, shapes and checks: the VM's bookkeeping, not model ops.
BOOKKEEPING_PREFIXES = (
    "relax.builtin.alloc",
    "relax.memory.",
    "relax.vm.alloc",
    "relax.vm.kill",
    "relax.null_value",
    "relax.shape_of",
    "relax.builtin.stop_lift_params",
    "vm.builtin.check_",
    "vm.builtin.match_",
    "vm.builtin.make_",
    "vm.builtin.alloc",
    "vm.builtin.null_value",
    "vm.builtin.shape_of",
)

# Higher ranks win the anchor of a fused kernel: the op people would name it by.
_RANKS = (
    (4, ("conv", "matmul", "dense", "linear", "batch_matmul", "einsum", "attention")),
    (3, ("pool", "adaptive")),
    (2, ("softmax", "norm", "mean", "sum", "max", "min", "reduce", "cumsum", "topk", "argmax")),
)


def short_op(callee: str) -> str:
    """``relax.nn.conv2d`` -> ``conv2d``: the op name people read in kernel names."""
    return callee.rsplit(".", 1)[-1]


@lru_cache(maxsize=65536)  # asked per binding per pass, about a few dozen names
def is_bookkeeping(callee: str) -> bool:
    """A callee that moves no data of the model (VM memory and shape builtins)."""
    return callee.startswith(BOOKKEEPING_PREFIXES)


def is_external_call(callee: str) -> bool:
    """The callee of a call not made through a GlobalVar (not a kernel) names a packed
    function that is neither a VM builtin nor a Relax op: a registered function
    (``my.double``, a ``tvm.contrib`` one) or an external module's symbol (what
    ``RunCodegen`` compiled). A call of one that computes model ops is a call site of
    its own, a library call."""
    return not callee.startswith(("vm.builtin.", "relax."))


def is_prim_func(callee: str) -> bool:
    """A callee named as a PrimFunc or Relax function (``conv2d4``), not an op or a
    packed function (``relax.nn.conv2d``, ``vm.builtin.reshape``)."""
    return "." not in callee


@lru_cache(maxsize=65536)
def is_data_movement(callee: str) -> bool:
    """An op or a legalized PrimFunc that only moves data (``conv2d_transpose`` does not)."""
    if callee in DATA_MOVEMENT_OPS:
        return True
    return is_prim_func(callee) and re.sub(r"\d+$", "", callee) in DATA_MOVEMENT_PRIMFUNCS


def is_dequantize(op: str) -> bool:
    """An op that unpacks quantized weights into floats (``dequantize``, as MLC-LLM's
    quantizations and the zoo's ``group_quant`` name their TE kernels; numbered or
    namespaced): work the float model it stands for does not ask."""
    return re.sub(r"\d+$", "", short_op(op)).startswith("dequantize")


@lru_cache(maxsize=65536)
def is_shape_computation(callee: str) -> bool:
    """A PrimFunc VMShapeLower made to compute shapes (``shape_func``, ``shape_func1``)."""
    return is_prim_func(callee) and re.sub(r"\d+$", "", callee) in SHAPE_PRIMFUNCS


@lru_cache(maxsize=65536)
def is_prim_value_computation(callee: str) -> bool:
    """A PrimFunc ComputePrimValue made (``compute_symbolic_expr``, ``compute_symbolic_expr1``)."""
    return is_prim_func(callee) and re.sub(r"\d+$", "", callee) in PRIM_VALUE_PRIMFUNCS


@cache
def op_rank(op: str) -> int:
    """How much an op is the point of its kernel (data movement 0, up to conv/matmul):
    picks anchors."""
    if is_data_movement(op):
        return 0
    name = short_op(op)
    for rank, words in _RANKS:
        if any(word in name for word in words):
            return rank
    return 1  # elementwise and the rest


def _prod(shape, dims: Mapping[str, int]) -> int:
    out = 1
    for d in shape:
        out *= d if isinstance(d, int) else dims.get(str(d), 1)
    return out


def estimated_flops(origin, dims: Mapping[str, int] | None = None) -> float:
    """A rough operation count, only used to split a fused kernel's time or work by weight.

    Shapes are those of the input model (NCHW/OIHW for convolutions), so the estimate
    does not depend on the layout a build chose; a symbolic dim is its integer value in
    ``dims`` (the call's, as its kernel's arguments bind them), 1 when not bound there.
    """
    dims = dims or {}
    out = sum(_prod(s, dims) for s in origin.output_shapes) or 1
    name = short_op(origin.op)
    ins = origin.input_shapes
    if "conv" in name and len(ins) > 1 and len(ins[1]) >= 3:
        return 2.0 * out * _prod(ins[1][1:], dims)
    if any(w in name for w in ("matmul", "dense", "linear")) and ins and ins[0]:
        return 2.0 * out * _prod(ins[0][-1:], dims)
    if "pool" in name and ins and ins[0]:
        return float(_prod(ins[0], dims))
    if is_dequantize(origin.op):  # (q - zero) * scale per weight
        return 2.0 * out
    if op_rank(origin.op) == 0:
        return 0.5 * out
    return float(out)
