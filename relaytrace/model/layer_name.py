"""A layer's name: the module path the user wrote, and which call of that module it is.

A module called more than once in one run has one layer per call: ``relu``, then
``relu@1`` (its second call), ``relu@2``. Module names are the user's and may hold any
character, ``@`` and digits too (torch forbids only ``.``); so the call suffix is the
*last* ``@`` followed by digits alone, and a first call whose own name already ends so
(a module named ``c@1``) is written with its call, ``c@1@0``, rather than read as the
second call of ``c``. Every other name is shown as written: a module ``a@b`` is the
layer ``a@b``. ``layer_name`` and ``split_layer`` are inverses; the frontends name
layers with the first, and what groups layers by module reads them with the second.
Pure: no TVM, no torch.
"""

from __future__ import annotations

import re

_CALL = re.compile(r"(.*)@([0-9]+)", re.DOTALL)


def layer_name(path: str, call: int = 0) -> str:
    """The layer of the ``call``-th call (from 0) of the module at ``path``."""
    if call or _CALL.fullmatch(path):
        return f"{path}@{call}"
    return path


def split_layer(layer: str) -> tuple[str, int]:
    """``(module path, call)`` of a layer ``layer_name`` made: ``relu@1`` ->
    ``("relu", 1)``, ``a@b`` -> ``("a@b", 0)``, ``c@1@0`` -> ``("c@1", 0)``."""
    match = _CALL.fullmatch(layer)
    return (match.group(1), int(match.group(2))) if match else (layer, 0)


def module_path(layer: str) -> str:
    """The module path of ``layer``, its call suffix dropped."""
    return split_layer(layer)[0]
