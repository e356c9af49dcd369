"""Which op inside a fused kernel diverges first, found without being told where to look.

``compare`` reads a layer's value where a kernel writes it, so the first layer beyond
the tolerance is named with the kernel that writes it; but that kernel may run a
conv, its bias add, a scaling, a residual add and a ReLU, each of other layers or of
the same one, and their values never leave it. This rebuilds the model with some of
those ops' values written out (``analysis.observe``: an opaque copy after each, so
the kernel ends there and the values are the build's own, rounded as it rounds
them), compares each against the source program's value of the node it computes,
and narrows down, until two neighbouring ops of the kernel are one within the
tolerance and the next beyond it.

Each rebuild writes out at most ``per_rebuild`` of the ops still in question, spread
evenly between the last op known within and the first known beyond, so a kernel of
up to ``per_rebuild`` + 1 such ops takes one rebuild and a larger one about
log(n) / log(per_rebuild + 1): every op written out splits the kernel, and a rebuild
that splits it less stays closer to the build that diverged. The search assumes, as
any bisection does, that an op after a diverging one diverges too; it names the
first op it saw beyond, with the op before it it saw within.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from attrs import define

from ..errors import RelaytraceError
from ..model.lineage import Lineage
from ..model.numerics import BEYOND, WITHIN, Comparison, Divergence, LayerError, Probe
from ..model.origin import OP, Origin
from .layer_outputs import layer_outputs, node_ops

# ops -> the comparison, op by op, of a rebuild that writes those ops' values out
Recompare = Callable[[tuple[str, ...]], Comparison]


def candidates(lineage: Lineage, comparison: Comparison) -> tuple[str, tuple[Origin, ...]]:
    """``(site label, ops)`` for the search: the kernel call site that writes (or, for a
    layer compared through a rebuild, holds) the first layer of ``comparison`` beyond
    its tolerance, and the ops of ``comparison.entry`` up to that layer's last op, in
    run order, that run in that kernel or are that layer's own (in whatever kernel: an
    unfused build runs each op alone; a ``Linear`` on a 3-D input ends in a reshape run
    apart), each the last op of its source node (whose value the source program holds;
    the layer's last op always), none eliminated by a pass. ``("", ())`` when no layer
    is beyond or the layer's op runs in no kernel."""
    first = comparison.first_beyond
    if first is None:
        return "", ()
    entry = comparison.entry
    plan = {p.layer: p for p in layer_outputs(lineage, entry)}
    step = plan.get(first.layer)
    if step is None or not step.site:
        return "", ()
    in_site = set(lineage.site_by_label(step.site).origin_ids)
    last = lineage.origins[step.origin]
    mine = sorted((o for o in lineage.origins.values() if o.kind == OP and o.function == entry), key=lambda o: o.index)
    last_of_node = {node: made[-1].id for node, made in node_ops(mine).items()}
    eliminated = lineage.journal.eliminated_by
    ops = [
        o
        for o in mine
        if o.index <= last.index
        and (o.id in in_site or o.layer == first.layer)
        and o.id not in eliminated
        and (last_of_node.get(o.node) == o.id or o is last)
    ]
    return step.site, tuple(ops)


def spread(between: list[str], most: int) -> tuple[str, ...]:
    """At most ``most`` of ``between`` (ops in run order), evenly spaced: all of them
    when they are that few, else ones that cut it into ``most`` + 1 runs as equal as
    can be."""
    if len(between) <= most:
        return tuple(between)
    return tuple(between[(i + 1) * len(between) // (most + 1)] for i in range(most))


def narrow(  # noqa: PLR0913 - public API: the search's inputs and its two ways of comparing ops
    lineage: Lineage,
    comparison: Comparison,
    recompare: Recompare,
    per_rebuild: int = 8,
    progress=None,
    here: Recompare | None = None,
) -> Divergence | None:
    """The first op beyond the tolerance among the ``candidates`` of ``comparison``'s
    first layer beyond it, or None when no layer is beyond. ``here(ops)``, when given,
    compares the ops on the build that was compared (those its kernels write, as an
    unfused build's, need no rebuild); ``recompare(ops)`` rebuilds the model with those
    ops' values written out and compares them (``compare(..., ops=ops)`` of the
    rebuild, at the same tolerance), called once per rebuild with at most
    ``per_rebuild`` (at least 1) ops still in question, spread between the last op
    known within and the first known beyond. The layer's own op is known beyond
    (``comparison`` says so); an op a rebuild cannot compare is left out, said in the
    note."""
    if per_rebuild < 1:
        raise RelaytraceError(f"a search inside a kernel writes out at least 1 op per rebuild, not {per_rebuild}")
    say = progress or (lambda message: None)
    _, ops = candidates(lineage, comparison)
    if not ops:
        return None
    first = comparison.first_beyond
    assert first is not None  # candidates found some
    order = [o.id for o in ops]
    known: dict[str, LayerError] = {}  # op -> its comparison
    if here is not None and len(order) > 1:
        rows = {e.layer: e for e in here(tuple(order[:-1])).layers}
        known.update({oid: rows[oid] for oid in order[:-1] if oid in rows and rows[oid].compared})
    read_here = tuple(known)
    probes: list[Probe] = []
    skipped: list[str] = []
    while True:
        high = next((i for i, oid in enumerate(order) if oid in known and known[oid].status == BEYOND), len(order) - 1)
        low = max((i for i, oid in enumerate(order[:high]) if oid in known and known[oid].status == WITHIN), default=-1)
        between = [oid for oid in order[low + 1 : high] if oid not in known]
        if not between:
            break
        asked = spread(between, per_rebuild)
        say(f"rebuild {len(probes) + 1}: writing out {len(asked)} of {len(order)} ops' values to compare them")
        rows = {e.layer: e for e in recompare(asked).layers}
        found = {oid: rows[oid] for oid in asked if oid in rows and rows[oid].compared}
        known.update(found)
        probes.append(
            Probe(
                ops=asked,
                beyond=tuple(oid for oid in asked if oid in found and found[oid].status == BEYOND),
                within=tuple(oid for oid in asked if oid in found and found[oid].status == WITHIN),
            )
        )
        lost = [oid for oid in asked if oid not in found]  # no rebuild can compare them: out of the search
        skipped += lost
        order = [oid for oid in order if oid not in lost]
    searched = _Searched(order[high], order[low] if low >= 0 else "", known, tuple(probes), tuple(skipped), read_here)
    return _divergence(lineage, comparison, ops, searched)


def _first_searched(lineage, comparison, culprit, node, searched: int) -> str:
    """What the note says of a culprit that is the first op the search compared: where
    the divergence may come from, its own ops or its inputs, with what the comparison
    says of the layers its inputs come from (within: its own ops, then)."""
    ids = {o.id for o in node}
    feeding = sorted({lineage.origins[a].layer for a, b in lineage.edges if b in ids and a not in ids})
    said = {e.layer: e for e in comparison.layers}
    ops = ", ".join(o.short_op for o in node)
    if feeding and all(layer in said and said[layer].status == WITHIN for layer in feeding):
        return (
            f"its inputs come from layers compared within ({', '.join(feeding)}): the divergence is in its own ({ops})"
        )
    return (
        f"it is the first of the {searched} ops searched: the divergence is in its own ({ops}) or comes in "
        "with its inputs"
    )


@define(frozen=True)
class _Searched:
    """What a search found: the first op beyond (``op``), the op before it within
    (``after``, "" none), every op's comparison it made, its rebuilds, the ops no
    rebuild could compare, and those compared on the build itself."""

    op: str
    after: str
    known: dict
    probes: tuple[Probe, ...]
    skipped: tuple[str, ...]
    read_here: tuple[str, ...]


def _divergence(lineage, comparison, ops, searched: _Searched) -> Divergence:
    """The ``Divergence`` a search found among ``ops``: its culprit, where it runs in the
    build compared, its source node's ops, and what the search took."""
    first = comparison.first_beyond
    op, after, known, read_here = searched.op, searched.after, searched.known, searched.read_here
    culprit = lineage.origins[op]
    same_function = (o for o in lineage.origins.values() if o.function == culprit.function)
    node = node_ops(same_function).get(culprit.node) or [culprit]
    ids = {o.id for o in node}
    runs = ", ".join(s.label for s in lineage.call_sites if ids & set(s.origin_ids))  # the node's kernels
    error = known.get(op) or attrs.evolve(first, layer=op)
    if op in known and op not in read_here:
        error = attrs.evolve(error, site=runs, note=f"read from a rebuild that writes it out of {runs}")
    short_ops = tuple(o.short_op for o in node)
    notes = []
    if not after and len(ops) > 1:
        notes.append(_first_searched(lineage, comparison, culprit, node, len(ops)))
    if searched.skipped:
        notes.append(f"not comparable, left out of the search: {', '.join(searched.skipped)}")
    return Divergence(
        layer=first.layer,
        site=runs,
        op=op,
        op_layer=culprit.layer,
        short_op=culprit.short_op,
        source=culprit.source,
        error=error,
        after=after,
        candidates=tuple(o.id for o in ops),
        rebuilds=searched.probes,
        note="; ".join(notes),
        node_ops=short_ops,
        read_here=read_here,
    )


def rebuilding(  # noqa: PLR0913 - public API: what compare() takes, and the build to make again
    imported, lineage: Lineage, reference, inputs, comparison: Comparison, dynamic_shapes=None, progress=None
) -> Recompare:
    """The ``recompare`` of ``narrow`` for a build made by ``relaytrace.build``:
    ``imported`` (the ``ImportedModel`` the build of ``lineage`` was made from) built
    again as it was (``lineage.build``) with the given ops' values written out
    (``observe.build_observed``), run and compared against ``reference`` on ``inputs``
    at ``comparison``'s tolerance (``compare(..., ops=...)``)."""
    from .comparison import compare
    from .observe import build_observed

    say = progress or (lambda message: None)

    def recompare(ops: tuple[str, ...]) -> Comparison:
        at = [lineage.origins[oid].index for oid in ops]
        executable, kept = build_observed(
            imported, lineage.build.options, lineage.build.target, at=at, progress=getattr(say, "passes", None)
        )
        return compare(
            executable,
            kept,
            reference,
            list(inputs),
            atol=comparison.atol,
            rtol=comparison.rtol,
            entry=comparison.entry,
            dynamic_shapes=dynamic_shapes,
            ops=ops,
        )

    return recompare
