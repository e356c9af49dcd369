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

from ..errors import RelaytraceError
from ..model.lineage import Lineage
from ..model.numerics import BEYOND, WITHIN, Comparison, Divergence, LayerError, Probe
from ..model.origin import OP, Origin
from .layer_outputs import layer_outputs

# ops -> the comparison, op by op, of a rebuild that writes those ops' values out
Recompare = Callable[[tuple[str, ...]], Comparison]


def candidates(lineage: Lineage, comparison: Comparison) -> tuple[str, tuple[Origin, ...]]:
    """``(site label, ops)`` for the search: the kernel call site that writes (or, for a
    layer compared through a rebuild, holds) the first layer of ``comparison`` beyond
    its tolerance, and the ops of ``comparison.entry`` it runs up to that layer's
    last op, in run order, each with a value of its own in the source program (the
    last op of its source node; the layer's own op always). ``("", ())`` when no layer
    is beyond or the layer's op runs in no kernel."""
    first = comparison.first_beyond
    if first is None:
        return "", ()
    entry = comparison.entry
    plan = {p.layer: p for p in layer_outputs(lineage, entry)}
    step = plan.get(first.layer)
    if step is None or not step.site:
        return "", ()
    site = lineage.site_by_label(step.site)
    last = lineage.origins[step.origin]
    last_of_node: dict[str, str] = {}
    for o in sorted(lineage.origins.values(), key=lambda o: o.index):
        if o.kind == OP and o.function == entry and o.node:
            last_of_node[o.node] = o.id
    ops = [
        o
        for o in (lineage.origins[oid] for oid in site.origin_ids)
        if o.kind == OP
        and o.function == entry
        and o.index <= last.index
        and (last_of_node.get(o.node) == o.id or o is last)
    ]
    return step.site, tuple(sorted(ops, key=lambda o: o.index))


def spread(between: list[str], most: int) -> tuple[str, ...]:
    """At most ``most`` of ``between`` (ops in run order), evenly spaced: all of them
    when they are that few, else ones that cut it into ``most`` + 1 runs as equal as
    can be."""
    if len(between) <= most:
        return tuple(between)
    return tuple(between[(i + 1) * len(between) // (most + 1)] for i in range(most))


def narrow(
    lineage: Lineage,
    comparison: Comparison,
    recompare: Recompare,
    per_rebuild: int = 8,
    progress=None,
) -> Divergence | None:
    """The first op beyond the tolerance inside the kernel that writes ``comparison``'s
    first layer beyond it (``candidates``), or None when no layer is beyond.
    ``recompare(ops)`` rebuilds the model with those ops' values written out and
    compares them (``compare(..., ops=ops)`` of the rebuild, at the same tolerance);
    it is called once per rebuild, with at most ``per_rebuild`` (at least 1) ops. The
    layer's own op is known beyond (``comparison`` says so); an op a rebuild cannot
    compare is left out of the search, said in the note."""
    if per_rebuild < 1:
        raise RelaytraceError(f"a search inside a kernel writes out at least 1 op per rebuild, not {per_rebuild}")
    say = progress or (lambda message: None)
    site, ops = candidates(lineage, comparison)
    if not ops:
        return None
    first = comparison.first_beyond
    assert first is not None  # candidates found some
    order = [o.id for o in ops]
    known: dict[str, LayerError] = {}  # op -> its comparison in a rebuild
    probes: list[Probe] = []
    skipped: list[str] = []
    low, high = -1, len(order) - 1  # order[low] within (none yet), order[high] beyond: the layer's op
    while high - low > 1:
        asked = spread(order[low + 1 : high], per_rebuild)
        say(f"rebuild {len(probes) + 1}: writing out {len(asked)} of {site}'s ops to compare them")
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
        lost = [oid for oid in asked if oid not in found]
        skipped += lost
        beyond = next((oid for oid in asked if oid in found and found[oid].status == BEYOND), None)
        if beyond is not None:
            high = order.index(beyond)
        within = [oid for oid in asked if oid in found and found[oid].status == WITHIN and order.index(oid) < high]
        if within:
            low = max(low, order.index(within[-1]))
        for oid in lost:  # an op no rebuild can compare is out of the search
            at = order.index(oid)
            if low < at < high:
                del order[at]
                high -= 1
    culprit = lineage.origins[order[high]]
    error = known.get(culprit.id) or attrs.evolve(first, layer=culprit.id)
    notes = []
    if low < 0:
        notes.append(
            f"it is the first of {site}'s ops compared: the divergence may come in with the kernel's inputs"
            if len(ops) > 1
            else f"it is {site}'s only op with a value in the source program"
        )
    if skipped:
        notes.append(f"not comparable, left out of the search: {', '.join(skipped)}")
    return Divergence(
        layer=first.layer,
        site=site,
        op=culprit.id,
        op_layer=culprit.layer,
        short_op=culprit.short_op,
        source=culprit.source,
        error=error,
        after=order[low] if low >= 0 else "",
        candidates=tuple(o.id for o in ops),
        rebuilds=tuple(probes),
        note="; ".join(notes),
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
