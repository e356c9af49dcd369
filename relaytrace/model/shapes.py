"""Concrete inputs against a signature with symbolic dims (``("n", 64)``), no TVM.

A dim of a signature is an int, a symbol (``n``), an expression of symbols as TVM
prints it (``n * T.int64(2)``) or ``?`` (any size); a shape ``("...",)`` is any rank. Concrete
inputs fit when each has the rank and dtype of its parameter, equal ints where the
signature has ints, one value per symbol across all inputs, and expressions that
evaluate to the dims given.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Mapping

from ..errors import RelaytraceError, UsageError

UNKNOWN_DIM, ANY_RANK = "?", "..."  # a dim of any size; a shape of any rank
Signature = tuple[tuple[str, tuple, str], ...]  # (name, shape, dtype) per input

MAX_DIM_TEXT = 1000  # a dim's expression longer than this is not one TVM wrote
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def bind(signature: Signature, given: list[tuple[tuple[int, ...], str]], what: str) -> dict[str, int]:
    """The value of each symbol, given (shape, dtype) of each input; raises a
    ``RelaytraceError`` naming the input and the dim or symbol that does not fit.
    ``what`` names the function for messages (``model.decode``)."""
    if len(given) != len(signature):
        names = ", ".join(f"{n}{list(s)}:{d}" for n, s, d in signature)
        raise RelaytraceError(f"{what} takes {len(signature)} input(s) ({names}), got {len(given)}")
    values: dict[str, int] = {}
    where: dict[str, str] = {}
    later = []  # expressions, once every plain symbol is bound
    for i, ((name, shape, dtype), (got, got_dtype)) in enumerate(zip(signature, given)):
        wanted = f"input {i} ({name}) of {what} must be {dtype}{list(shape)}, got {got_dtype}{list(got)}"
        if tuple(shape) == (ANY_RANK,):
            shape = (UNKNOWN_DIM,) * len(got)
        if len(got) != len(shape) or got_dtype != dtype:
            raise RelaytraceError(wanted)
        for axis, (dim, value) in enumerate(zip(shape, got)):
            if isinstance(dim, int):
                if dim != value:
                    raise RelaytraceError(wanted)
            elif dim == UNKNOWN_DIM:
                continue
            elif str(dim).isidentifier():
                if dim in values and values[dim] != value:
                    raise RelaytraceError(
                        f"symbol {dim} is {values[dim]} in {where[dim]} but {value} in "
                        f"input {i} ({name}) dim {axis} of {what}: one value per symbol"
                    )
                values.setdefault(dim, value)
                where.setdefault(dim, f"input {i} ({name}) dim {axis}")
            else:
                later.append((i, name, axis, dim, value))
    for i, name, axis, dim, value in later:
        expected = evaluate_dim(dim, values)
        if expected is not None and expected != value:
            raise RelaytraceError(
                f"input {i} ({name}) dim {axis} of {what} must be {dim} = {expected} "
                f"(with {', '.join(f'{k}={v}' for k, v in sorted(values.items()))}), got {value}"
            )
    return values


def check_rank(name: str, declared: tuple, given: tuple, what: str) -> None:
    """A shape ``given`` for input ``name`` (one that replaces its declared shape, as
    an ONNX model's ``shape_dict`` does) has the rank of the ``declared`` shape (dims
    as ints or symbol names; ``("...",)`` is any rank): a ``UsageError`` naming the
    input, its rank and the shape given otherwise."""
    if tuple(declared) == (ANY_RANK,) or len(given) == len(declared):
        return
    dims = "x".join(str(d) for d in declared)
    example = "x".join(str(d) if isinstance(d, int) else "1" for d in declared)
    raise UsageError(
        f"the shape {'x'.join(str(d) for d in given) or '(none)'} given for input {name} of {what} has "
        f"rank {len(given)}, but {name} has rank {len(declared)} ({dims}): give {len(declared)} dims, "
        f"e.g. --input-shape {name}:{example}"
    )


def evaluate_dim(text: str, values: Mapping[str, int]) -> int | None:
    """An expression of symbols, ints, + - * // %, ``min`` and ``max`` (a dim, a work
    formula's atom: ``model.work``); None when it is not one of those or names an
    unbound symbol (then the VM's own check decides)."""
    if len(text) > MAX_DIM_TEXT:
        return None
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None

    try:
        return _dim_value(tree, values)
    except (ZeroDivisionError, RecursionError, OverflowError, MemoryError):
        return None


def _dim_value(node, values: Mapping[str, int]) -> int | None:
    """``evaluate_dim`` of one node of the parsed expression (it raises what arithmetic
    raises). A function of the module, not a closure that calls itself: that is a
    reference cycle per call, left for the collector."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if (
        isinstance(node, ast.Call)
        and len(node.args) == 1
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("int64", "int32")
    ):  # TVM prints constants as T.int64(2)
        return _dim_value(node.args[0], values)
    if isinstance(node, ast.Name) and node.id in values:
        return values[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _dim_value(node.left, values), _dim_value(node.right, values)
        return None if left is None or right is None else _OPS[type(node.op)](left, right)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("min", "max")
        and node.args
        and not node.keywords
    ):
        args = [_dim_value(a, values) for a in node.args]
        known = [a for a in args if a is not None]
        return None if len(known) < len(args) else (min if node.func.id == "min" else max)(known)
    return None


def match_input_names(given: Mapping[str, object], names: list[str], what: str) -> dict:
    """``given`` (input name -> value) keyed by the model's own ``names``: a name given
    as the frontend spells it (ONNX's ``input.1``) or as TVM renamed it (``input_1``:
    every character that is no letter, digit or ``_`` made ``_``) both find it. A name
    matching none is a UsageError listing ``names`` (``what`` is the model); so is one
    input given under both spellings."""

    def plain(text: str) -> str:
        return re.sub(r"\W", "_", text)

    by_plain = {plain(n): n for n in names}
    out: dict[str, object] = {}
    unknown: list[str] = []
    spelled: dict[str, str] = {}
    for key, value in given.items():
        name = key if key in names else by_plain.get(plain(key))
        if name is None:
            unknown.append(key)
        elif name in out:
            raise UsageError(f"{what}'s input {name} is given twice (as {spelled[name]} and as {key}): give it once")
        else:
            out[name], spelled[name] = value, key
    if unknown:
        listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        raise UsageError(f"{what} has no input named {', '.join(sorted(unknown))}; its inputs are {listed or 'none'}")
    return out
