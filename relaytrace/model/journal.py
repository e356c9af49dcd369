"""The pass journal: what each pass did to each function, and each origin's history."""

from __future__ import annotations

from typing import NamedTuple

from attrs import define


@define(frozen=True)
class PassEvent:
    """What one pass did to one Relax function, in origins."""

    index: int
    pass_name: str
    function: str
    rules: tuple[tuple[str, int], ...]
    inserted: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    eliminated: tuple[str, ...] = ()
    merged: tuple[tuple[str, ...], ...] = ()


class Change(NamedTuple):
    """One step of an origin's history: after pass N its op was carried by ``callee``.

    A NamedTuple rather than an attrs class: a build records one per rewritten
    binding per pass, and a tuple of str and int is cheaper to make and is not
    tracked by the garbage collector."""

    index: int  # type: ignore[assignment]  # the field saved files name; tuple.index is not used
    pass_name: str
    function: str
    callee: str
    rule: str
