"""What every frontend returns, and how given input names meet the model's."""

from __future__ import annotations

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
    layers: dict[int, tuple[str, ...]] = field(repr=False)
    keep: tuple = field(default=(), repr=False)
    program: Program | None = field(default=None, repr=False)  # what the frontend translated: the layers' evidence

    def layer_of(self, fname: str, var_handle: int, index: int):
        """The layer of the op bound to ``var_handle`` in the imported module, or None."""
        return self.layers.get(var_handle)


def match_input_names(given, names, what: str) -> dict:
    """``given`` (input name -> value) keyed by the model's own ``names``: a name given
    as the frontend spells it (ONNX's ``input.1``) or as TVM renamed it (``input_1``:
    every character that is no letter, digit or ``_`` made ``_``) both find it. A name
    matching none is a UsageError listing ``names`` (``what`` is the model); so is one
    input given under both spellings."""
    import re

    from ..errors import UsageError

    def plain(text):
        return re.sub(r"\W", "_", text)

    by_plain = {plain(n): n for n in names}
    out, unknown, spelled = {}, [], {}
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

