"""Pure: the inside of each fused kernel as measured (``Profile.inside``, from
``profile --inside``) beside the modelled split: one row per op (or ops a part runs
together) of each call site, its parts added run by run (a conv's padding nest and its
compute nest are one conv).

A row's measured share is its median time over the medians of the site's rows that
compute an op added; a row of no op (the call's time outside its loop nests, blocks of
no op) shows its share of the whole call, and is left out of the ops' shares; its
modelled share is what ``--policy split`` gives its ops (their members' roofline
bounds). Where the two differ by more than the measurement's own scatter (the row's
slowest run less its fastest, as a share of the kernel) and by more than ``MARGIN``
points, the row says so: the model misjudges that kernel. Each site also states its
instrumented time (the parts added) against the plain build's time of the same call:
the stamps' cost, within the scatter between two builds' runs.
"""

from __future__ import annotations

from attrs import frozen

from ..model.profile import KERNEL
from . import attribution

TOGETHER = "ops one loop nest runs together: its time shared by their modelled weights"
OUTSIDE = "the call's time outside its loop nests (its buffers allocated and freed): a share of the whole call"
NO_OP = "blocks of no op: a share of the whole call, left out of the ops' shares"
MARGIN = 5.0  # percentage points a measured share must differ from the modelled one by to be said to


@frozen
class InsideRow:
    """The parts of one call site that compute the same op(s) (``parts``: their indices
    in the kernel; ``origins``, ``ops``, ``layers`` empty: blocks of no op): their blocks, their time
    (median, fastest, slowest run), its measured share of the kernel beside the
    modelled one, whether the two differ beyond the scatter (``differs``), and the
    site's instrumented time against its plain time (``overhead_percent``; None: the
    plain build did not time the call)."""

    site: str
    kernel: str
    parts: tuple[int, ...]
    blocks: tuple[str, ...]
    origins: tuple[str, ...]
    ops: tuple[str, ...]
    layers: tuple[str, ...]
    us: float
    min_us: float
    max_us: float
    measured_percent: float
    modelled_percent: float
    differs: bool
    overhead_percent: float | None
    plain_us: float  # the plain build's time of the call (median; 0: not timed)
    note: str = ""  # why the site's ops are not timed apart, or ops one nest runs together: how they are billed


def _untimed(lineage, site, inside, plain_us: float) -> InsideRow:
    """The row of a site whose ops run in one loop nest: all of them, billed as modelled."""
    origins = [lineage.origins[o] for o in site.origin_ids]
    return InsideRow(
        site.label,
        site.kernel,
        (),
        (),
        tuple(o.id for o in origins),
        tuple(o.short_op for o in origins),
        tuple(dict.fromkeys(o.layer for o in origins)),
        0.0,
        0.0,
        0.0,
        100.0,
        100.0,
        False,
        None,
        plain_us,
        inside.note,
    )


def _note(op, inside, ops: int) -> str:
    """How a row's time is billed, when it is not simply its op's."""
    if op.origins:
        return TOGETHER if ops > 1 else ""
    blocks = [b for i in op.parts for b in inside.parts[i].blocks]
    return NO_OP if blocks else OUTSIDE


def inside_rows(lineage, profile) -> tuple[InsideRow, ...]:
    """The rows of every site the profile timed inside, in run order (``lineage``: the
    profiled entry's)."""
    times = profile.by_site(KERNEL)
    rows = []
    for site in lineage.call_sites:
        inside = profile.inside_of(site.key)
        if inside is None:
            continue
        if not inside.parts:  # not timed apart: one row for the kernel, saying why
            rows.append(_untimed(lineage, site, inside, times.get(site.key, 0.0)))
            continue
        work = {o.id: w for o, w in attribution.work_weights_of(lineage, site, profile)}
        total_work = sum(work.values()) or 1.0
        total = sum(op.median_us for op in inside.ops if op.origins) or 1.0  # shares among ops (as ``measured`` bills)
        plain = times.get(site.key)
        overhead = None if not plain else 100.0 * (inside.median_us / plain - 1.0)
        whole = inside.median_us or 1.0
        for op in inside.ops:
            origins = [lineage.origins[o] for o in op.origins if o in lineage.origins]
            runs = op.us
            measured = 100.0 * op.median_us / (total if op.origins else whole)
            modelled = 100.0 * sum(work.get(o.id, 0.0) for o in origins) / total_work if origins else 0.0
            scatter = 100.0 * (max(runs) - min(runs)) / total if runs else 0.0
            rows.append(
                InsideRow(
                    site.label,
                    site.kernel,
                    op.parts,
                    tuple(b for i in op.parts for b in inside.parts[i].blocks),
                    tuple(o.id for o in origins),
                    tuple(o.short_op for o in origins),
                    tuple(dict.fromkeys(o.layer for o in origins)),
                    op.median_us,
                    min(runs, default=0.0),
                    max(runs, default=0.0),
                    measured,
                    modelled,
                    bool(origins) and abs(measured - modelled) > max(MARGIN, scatter),
                    overhead,
                    plain or 0.0,
                    _note(op, inside, len(origins)),
                )
            )
    return tuple(rows)
