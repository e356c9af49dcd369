"""An origin's part in a kernel call site: the site's anchor (its heaviest model op),
another model op fused with it, or the kind of an op passes made. The tracker gives
each site its roles by ``roles_for``, and a lineage read back is checked to hold the
roles its origins give (``sense.check_lineage``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .names import Name
from .ops import op_rank
from .origin import OP, Origin


class Part(Name):
    """An origin's part in a call site: the heaviest model op (``anchor``), another
    model op fused with it, or an op of the other kinds (``Kind``) by its kind."""

    ANCHOR = "anchor"
    FUSED = "fused"
    INSERTED = "inserted"
    UNRESOLVED = "unresolved"


ANCHOR, FUSED = Part.ANCHOR, Part.FUSED


class Role(NamedTuple):
    """An origin's part in a call site. A NamedTuple: made for every origin of every
    site of a lineage, compared by value."""

    origin: str
    role: Part


def roles_for(origin_ids: Iterable[str], origins: dict[str, Origin]) -> tuple[Role, ...]:
    """Anchor = heaviest model op (ties: earliest); other model ops fused; the rest by kind."""
    found = sorted(map(origins.__getitem__, set(origin_ids)), key=_site_order)
    anchor = max((o for o in found if o.kind == OP), key=_op_rank, default=None)
    return tuple(Role(o.id, ANCHOR if o is anchor else FUSED if o.kind == OP else Part(o.kind)) for o in found)


def _op_rank(origin: Origin) -> int:
    return op_rank(origin.op)


def _site_order(origin: Origin) -> tuple:
    return (origin.kind != OP, origin.function, origin.index, origin.id)
