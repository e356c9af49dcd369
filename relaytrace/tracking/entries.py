"""Entries as compiled, read from the last Relax module of a recorded build: each
parameter with its kind (``model.entry.Param``), and the KV cache the entries share
(``model.entry.KVCache``: the PrimFuncs handed to its create builtin)."""

from __future__ import annotations

import tvm
from tvm import relax

from ..model.entry import KVCache, Param, ParamKind, Tensor
from . import ir, reader
from .params import weight_params

CACHE_CREATE = "_kv_cache_create"  # the suffix of the builtins that make a KV cache (paged, rnn state)


def entry_params(functions: dict) -> dict[str, tuple[Param, ...]]:
    """entry function -> its parameters as that module takes them, those after its
    ``num_input`` marked as weights."""
    out = {}
    for name in ir.entry_functions(functions):
        func = functions[name]
        params = ir.items(func.params)
        first = len(params) - len(weight_params(func))
        out[name] = tuple(_param(p.name, ir.expr_type(p), i >= first) for i, p in enumerate(params))
    return out


def _param(name: str, ty, weight: bool) -> Param:
    if isinstance(ty, relax.TensorType):
        ((shape, dtype),) = ir.tensor_types(ty)
        return Param(name, ParamKind.TENSOR, (Tensor(name, shape, dtype),), weight=weight)
    if isinstance(ty, relax.TupleType):
        return Param(
            name,
            ParamKind.TUPLE,
            tuple(Tensor(f"{name}[{i}]", shape, dtype) for i, (shape, dtype) in enumerate(ir.tensor_types(ty))),
            weight=weight,
        )
    if isinstance(ty, relax.ShapeType):
        return Param(name, ParamKind.SHAPE)
    if isinstance(ty, tvm.ir.PrimType):
        return Param(name, ParamKind.PRIM, dtype=str(ty.dtype))
    return Param(name, ParamKind.OBJECT)


def kv_cache(functions: dict, read=reader.read) -> KVCache | None:
    """The first entry that calls a ``*_kv_cache_create`` builtin, with the PrimFuncs
    its arguments name (inside tuples too), in order; None for a build without one.
    ``read`` reads a function's view (the build's shared reads, where the call sites'
    reading of the same functions found each callee): only the call found is read
    from TVM again."""
    for name in ir.entry_functions(functions):
        d = read(functions[name])
        for position in range(len(d.vars)):
            called = d.callee(position)
            if called is None or not called.endswith(CACHE_CREATE):
                continue
            value = d.value_object(position)
            packed = isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.call_pure_packed" and value.args
            callee, args = (value.args[0], value.args[1:]) if packed else (value.op, value.args)
            if ir.callee_category(callee)[0] == "extern":
                heads = [_prim(a) for a in args[2:5]] if called == PAGED else [0, 0, 0]
                return KVCache(name, called, tuple(_globals(args)), *heads)
    return None


PAGED = "vm.builtin.paged_attention_kv_cache_create"  # its arguments 2-4: query heads, kv heads, head size


def _prim(arg) -> int:
    try:
        return int(arg.value)
    except (AttributeError, TypeError, ValueError):
        return 0


def _globals(args) -> list[str]:
    out: list[str] = []
    for arg in args:
        if isinstance(arg, relax.GlobalVar):
            out.append(arg.name_hint)
        elif isinstance(arg, relax.Tuple):
            out.extend(_globals(arg.fields))
    return out
