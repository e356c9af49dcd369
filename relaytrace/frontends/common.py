"""What every frontend returns, and the optional-dependency guard they share."""

from __future__ import annotations

import importlib

from attrs import define, field

from ..errors import RelaytraceError


@define(frozen=True)
class ImportedModel:
    """An IRModule whose bindings carry frontend layer names.

    ``layers`` maps a binding's var handle to ``(layer, source op)``, in any function
    of ``mod``; ``mod`` (and ``keep``, vars the frontend noted) keep those handles valid.
    """

    mod: object
    name: str
    layers: dict[int, tuple[str, str]] = field(repr=False)
    keep: tuple = field(default=(), repr=False)

    def layer_of(self, fname: str, var_handle: int, index: int):
        return self.layers.get(var_handle)


def require(module: str, extra: str):
    """Import an optional dependency, or say exactly how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RelaytraceError(
            f"this needs the '{module}' package, which is not installed: "
            f"pip install 'relaytrace[{extra}]'  ({exc})"
        ) from None
