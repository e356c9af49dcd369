"""The look-ups a lineage answers queries with, built once per lineage.

A lineage of an LLM holds thousands of call sites and origins; a query that scans
them all costs milliseconds, and reports ask thousands of queries. ``LineageIndex``
maps each name a query starts from (a layer, an origin, a call-site label, a
position) to what it asks for, so that each query is a few dictionary look-ups.
Pure data, made by ``index_of`` from the lineage's own fields; never saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from attrs import define

from .ops import is_shape_computation
from .origin import OP, Origin
from .verification import UNVERIFIED, SiteCheck, Verification

if TYPE_CHECKING:
    from .lineage import CallSite


@define(frozen=True)
class LineageIndex:
    """Every lookup a query needs, built once from a lineage (``Lineage.index``): the
    sites in run order, by label and position, the sites of each origin, the ops of
    each layer, the inserted ops serving each origin, the verdict of each site."""

    call_sites: tuple[CallSite, ...]  # every kernel call site, in run order
    by_label: dict[str, CallSite]
    sites_of_origin: dict[str, tuple[int, ...]]  # origin id -> positions of the sites running it, in order
    at_position: dict[int, CallSite]
    ops_of_layer: dict[str, frozenset[str]]  # layer -> the ids of its input ops
    serving: dict[str, frozenset[str]]  # origin id -> the inserted / unresolved origins serving it
    checks: dict[int, SiteCheck]  # position -> the verdict of the site there


def index_of(
    kernels: Mapping[str, tuple[CallSite, ...]], origins: Mapping[str, Origin], verification: Verification | None
) -> LineageIndex:
    """The index of a lineage's ``kernels``, ``origins`` and ``verification``. A lineage
    without a verification counts every site as unverified."""
    sites = tuple(sorted((s for listed in kernels.values() for s in listed), key=lambda s: s.position))
    of_origin: dict[str, list[int]] = {}
    for s in sites:
        for oid in dict.fromkeys(s.origin_ids):
            of_origin.setdefault(oid, []).append(s.position)
    layers: dict[str, set[str]] = {}
    serving: dict[str, set[str]] = {}
    for o in origins.values():
        if o.kind == OP:
            layers.setdefault(o.layer, set()).add(o.id)
        for served in o.serves if not entry_bookkeeping(o, origins) else ():
            serving.setdefault(served, set()).add(o.id)
    if verification is None:
        checks = {s.position: SiteCheck(s.position, UNVERIFIED, ("this lineage was never verified",)) for s in sites}
    else:
        checks = verification.by_position()
    return LineageIndex(
        call_sites=sites,
        by_label={s.label: s for s in sites},
        sites_of_origin={oid: tuple(positions) for oid, positions in of_origin.items()},
        at_position={s.position: s for s in sites},
        ops_of_layer={layer: frozenset(ids) for layer, ids in layers.items()},
        serving={oid: frozenset(ids) for oid, ids in serving.items()},
        checks=checks,
    )


def entry_bookkeeping(origin: Origin, origins: Mapping[str, Origin]) -> bool:
    """Whether ``origin`` is a shape function sizing the allocations of ops of more than
    one layer (VMShapeLower makes one per entry that sizes nearly all of them): it
    serves the entry, not a layer, so no layer lists it among its kernel calls."""
    return (
        origin.kind != OP
        and is_shape_computation(origin.op)
        and len({origins[s].layer for s in origin.serves if s in origins}) > 1
    )


def billed_layers(origin: Origin, origins: Mapping[str, Origin]) -> tuple[str, ...]:
    """The layers an inserted or unresolved op's time is billed to: those of the ops it
    serves (its own layer when it serves none); a shape function of the entry
    (``entry_bookkeeping``) to a row of its own, ``ENTRY.shape_func``."""
    if entry_bookkeeping(origin, origins):
        return (f"{origin.function}.{origin.short_op}",)
    return tuple(dict.fromkeys(origins[s].layer for s in origin.serves if s in origins)) or (origin.layer,)
