"""Errors a user can act on: each names what is wrong and what to do."""

from __future__ import annotations

import difflib
import importlib
import numbers


def describe(exc: BaseException, limit: int = 300) -> str:
    """``Type: line`` for any exception: its first non-empty line, or for an error
    relayed over TVM RPC (whose first lines are wrappers) its last; TVM's ``Check
    failed: (...) is false:`` prefix dropped (a check with no message of its own keeps
    its condition). The one way relaytrace quotes an error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[-1] if "RPC" in type(exc).__name__ else lines[0]
    return f"{type(exc).__name__}: {text.removesuffix(' is false:').split(' is false: ', 1)[-1][:limit]}"


class RelaytraceError(Exception):
    """Base of every error relaytrace raises on purpose."""


class UnknownNameError(RelaytraceError, KeyError):
    """A kernel, layer or origin name that the lineage does not hold."""

    def __init__(self, what: str, name: str, known):
        known = list(known)
        # an op named by itself: ``gelu`` is the origin ``add_1/gelu`` (the ops of one line
        # of a forward make one layer, named after its last op)
        ops = [k for k in known if "/" in k and k.rsplit("/", 1)[1].split("#")[0] == name]
        close = list(dict.fromkeys(ops[:3] + difflib.get_close_matches(name, known, n=3)))[:3]
        hint = f" Did you mean: {', '.join(close)}?" if close else f" The lineage has {len(known)} {what}s."
        super().__init__(f"unknown {what} {name!r}.{hint}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class FileFormatError(RelaytraceError, ValueError):
    """A saved file relaytrace reads (lineage, profile, comparison, run.json, a peaks
    cache, a reference table) that is not one, contradicts itself, or is of a schema
    this version cannot read; the message names the file and the field."""


LineageFormatError = FileFormatError  # its name from when only lineage files were checked


class UsageError(RelaytraceError):
    """Bad input: a command line's, or an argument an API caller gave (``errors.expect``); the CLI
    exits with 2."""


def expect(what: str, value, kinds, give: str) -> None:
    """An API argument of the type it must be, else a ``UsageError`` naming it and what
    to give: ``build(opt_level='3')`` says "build(opt_level=) must be a whole number from
    0 to 4, not str '3'", not a TypeError from deep inside TVM. ``kinds``: a type or a tuple
    (None in it: the argument may be None); a bool is no number unless ``kinds`` says so."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    types = tuple(type(None) if k is None else k for k in kinds)
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return
    shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
    raise UsageError(f"{what} must be {give}, not {type(value).__name__} {shown}")


def expect_number(
    what: str, value, low: float, high: float = float("inf"), whole: bool = True, above: bool = False
) -> None:
    """An API argument that is a number from ``low`` (above it when ``above``) to
    ``high``, a whole one when ``whole``, finite: else a ``UsageError`` naming it, its
    range and what it was."""
    kind = "a whole number" if whole else "a number"
    span = f"above {low:g}" if above else f"from {low:g}"
    span += "" if high == float("inf") else f" and at most {high:g}" if above else f" to {high:g}"
    expect(what, value, numbers.Integral if whole else numbers.Real, f"{kind} {span}")  # numpy's ints too
    if not ((value > low if above else value >= low) and value <= high and value < float("inf")):
        raise UsageError(f"{what} must be {kind} {span}, not {value!r}")


def require(module: str, extra: str):
    """Import an optional dependency, or say exactly how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RelaytraceError(
            f"this needs the '{module}' package, which is not installed: pip install 'relaytrace[{extra}]'  ({exc})"
        ) from None
