"""Errors a user can act on: each names what is wrong and what to do."""

from __future__ import annotations

import difflib
import importlib


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
        close = difflib.get_close_matches(name, list(known), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else f" The lineage has {len(known)} {what}s."
        super().__init__(f"unknown {what} {name!r}.{hint}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class LineageFormatError(RelaytraceError, ValueError):
    """A lineage file that is not one, or of a schema this version cannot read."""


class UsageError(RelaytraceError):
    """Bad command-line input (the CLI exits with 2)."""


def require(module: str, extra: str):
    """Import an optional dependency, or say exactly how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RelaytraceError(
            f"this needs the '{module}' package, which is not installed: "
            f"pip install 'relaytrace[{extra}]'  ({exc})"
        ) from None
