"""Weights a pass moved between parameters and functions, as MLC-LLM's pipeline moves them.

``BundleModelParams`` replaces a function's weight parameters (those after its
``num_input``) by one tuple parameter whose fields they are. ``PartitionTransformParams``
(the first pass of ``LiftTransformParams``) moves every binding computed from weights
alone (a ``permute_dims`` of a Linear's weight) out of function ``X`` into a new
function ``X_transform_params``, whose one parameter is the tuple of ``X``'s weights and
whose result is the tuple of what ``X`` now takes in their place, after its inputs. Both
rebuild every binding with new Vars, so identity explains nothing; what these functions
tell is which new parameter holds which earlier value, so that the value-key rule can
follow the rest (the tracker seeds those parameters' tokens before it walks the
functions). The functions are read only; nothing here changes the tracker.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import relax

from ..model.verification import TRANSFORM_SUFFIX
from . import ir


def weight_params(func) -> list:
    """The parameters of ``func`` after its ``num_input`` (the weights, as
    ``tvm.relax.frontend.nn`` exports them); none when it declares no ``num_input``."""
    attrs = func.attrs
    if attrs is None or "num_input" not in attrs:
        return []
    return ir.items(func.params)[int(attrs["num_input"]) :]


def transform_sources(before: dict, changed: list[str]) -> dict[str, str]:
    """Among the functions a pass ``changed`` (names), each ``X_transform_params`` new in
    this pass (not in ``before``, the model functions as the pass before left them) -> the
    function ``X`` whose weights it transforms."""
    out = {}
    for name in changed:
        source = name[: -len(TRANSFORM_SUFFIX)] if name.endswith(TRANSFORM_SUFFIX) else ""
        if source and name not in before and source in before:
            out[name] = source
    return out


def _same_types(ty, params) -> bool:
    """Whether tuple type ``ty``'s fields are the types of ``params``, a symbolic dim of
    one function (MLC-LLM's ``vocab_size``) matching the same dim of the other: each
    function has its own variable for it."""
    return tvm_ffi.structural_equal(ty, relax.TupleType([ir.expr_type(p) for p in params]), map_free_vars=True)


def bundled_fields(func, old_func) -> tuple[Any, list] | None:
    """``(tuple parameter, the earlier parameters that are its fields)`` when ``func``
    takes, in place of ``old_func``'s weight parameters, one tuple parameter with a field
    of the same type for each (``BundleModelParams``; the parameter of
    ``X_transform_params`` too, given ``X`` as it was); None otherwise."""
    old = weight_params(old_func)
    new = weight_params(func)
    if not old or len(new) != 1 or any(p.same_as(new[0]) for p in old):
        return None
    ty = ir.expr_type(new[0])
    if not isinstance(ty, relax.TupleType) or len(ty.fields) != len(old):
        return None
    if not _same_types(ty, old):
        return None
    return new[0], old


def lifted_fields(func, transform) -> list[tuple[Any, Any, int]] | None:
    """``(parameter, output, field)`` for each weight parameter of ``func`` that is field
    ``field`` of ``transform``'s result (``output``: a var bound to the result tuple, or a
    field's own var with ``field`` -1), in order (``PartitionTransformParams``: the
    transformed weights follow the inputs); None when their number or types differ."""
    params, result = weight_params(func), ir.function_output(transform)
    ty = ir.expr_type(result) if result is not None else None
    if not params or not isinstance(ty, relax.TupleType) or len(ty.fields) != len(params):
        return None
    if not _same_types(ty, params):
        return None
    if ir.is_tuple(result):
        return [(p, f, -1) if ir.is_var(f) else (p, None, -1) for p, f in zip(params, ir.items(result.fields))]
    if ir.is_var(result):
        return [(p, result, i) for i, p in enumerate(params)]
    return None
