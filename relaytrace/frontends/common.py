"""What every frontend returns."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import define, field

from ..model.frontend import Program


@define(frozen=True)
class ImportedModel:
    """An IRModule whose bindings carry frontend layer names.

    ``layers`` maps a binding's var handle to ``(layer, source op[, source, node])``
    (``Origin``'s fields), in any function
    of ``mod``; ``mod`` (and ``keep``, vars the frontend noted) keep those handles valid.
    ``program``: the frontend's nodes, which verification holds the layers against
    (``model.frontend``); None for a plain IRModule.
    """

    mod: object
    name: str
    layers: Mapping[int, tuple[str, ...]] = field(repr=False)
    keep: tuple = field(default=(), repr=False)
    program: Program | None = field(default=None, repr=False)  # what the frontend translated: the layers' evidence

    def layer_of(self, fname: str, var_handle: int, index: int):
        """The layer of the op bound to ``var_handle`` in the imported module, or None."""
        return self.layers.get(var_handle)
