"""The pass journal: what each pass did to each function, each origin's history, the
ops the passes eliminated, and whether the build could be followed to its end."""

from __future__ import annotations

from typing import NamedTuple

from attrs import define, field

from ..errors import FileFormatError
from .codec import Codec, codec_field
from .jsonio import check, items_of, make_record, record_fields


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
    binding per pass, and a tuple is cheaper to make and to hold."""

    index: int  # type: ignore[assignment]  # the field saved files name; tuple.index is not used
    pass_name: str
    function: str
    callee: str
    rule: str


def _history_json(history: dict[str, tuple[Change, ...]]) -> dict:
    """``{"changes": [[index, pass, function, callee, rule], ...], "by_origin": {origin:
    [change index, ...]}}``: each distinct change once (a build records one per
    rewritten binding per pass, and most are alike)."""
    table: dict[Change, int] = {}
    by_origin = {oid: [table.setdefault(c, len(table)) for c in changes] for oid, changes in history.items()}
    return {"changes": [list(c) for c in table], "by_origin": by_origin}


def _history(data, where: str) -> dict[str, tuple[Change, ...]]:
    """The history ``_history_json`` wrote, every row and index checked."""
    check(data, dict, where)
    rows = items_of(data, "changes", list, where)
    changes = []
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(Change._fields):
            raise FileFormatError(
                f"{where}.changes[{i}] must be a list of {len(Change._fields)} items ({', '.join(Change._fields)})"
            )
        changes.append(make_record(Change, dict(zip(Change._fields, row)), f"{where}.changes[{i}]"))
    out = {}
    for oid, indices in items_of(data, "by_origin", dict, where).items():
        if not isinstance(indices, list) or not all(type(i) is int and 0 <= i < len(changes) for i in indices):
            raise FileFormatError(f"{where}.by_origin[{oid!r}] must list indices of changes (0 to {len(changes) - 1})")
        out[oid] = tuple(changes[i] for i in indices)
    return out


def _row(items: list[dict]) -> dict:
    """The JSON Schema of a list of exactly ``items``, in order."""
    return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}


HISTORY = Codec(
    _history_json,
    _history,
    lambda of: {  # each distinct change once, as a row of Change's fields; each origin's by index
        "type": "object",
        "properties": {
            "changes": {"type": "array", "items": _row([of(kind) for kind, _ in record_fields(Change).values()])},
            "by_origin": {"type": "object", "additionalProperties": {"type": "array", "items": of(int)}},
        },
        "required": ["changes", "by_origin"],
        "additionalProperties": False,
    },
)


# How the IR bears an elimination out (``Journal.explained``): the op's binding was
# computed from constants alone (FoldConstant computes it at build time), or nothing the
# function kept or returned read its value (dead code).
FOLDED, DEAD = "folded", "dead"


@define(frozen=True)
class Journal:
    """What the passes of a build did, as the tracker followed them: ``events`` (one per
    pass and function, in order), ``history_by_origin`` (origin id -> each pass that
    rewrote its op, with the rule that followed it), ``eliminated_by`` (origin id -> the
    pass that removed its op: folded, dead code, fused away), ``explained`` (origin id
    -> ``FOLDED`` or ``DEAD``: the eliminations the function before the pass bears out;
    an eliminated op not here was removed while its value was used, from more than
    constants) and ``degraded`` (why the build could not be followed to its end; empty
    when it was). Saved as the lineage's ``journal``; the history as one table of
    distinct changes (``HISTORY``)."""

    events: tuple[PassEvent, ...] = ()
    history_by_origin: dict[str, tuple[Change, ...]] = codec_field(HISTORY, factory=dict)
    eliminated_by: dict[str, str] = field(factory=dict)
    degraded: tuple[str, ...] = ()
    explained: dict[str, str] = field(factory=dict)
