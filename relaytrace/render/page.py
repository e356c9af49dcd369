"""The report page's data: what its scripts read, as records made once from a ``Report``
(``page_data``) and written into the page through the codec (``encode``), so that the
page's contract has a JSON Schema like every saved file (docs/schemas/page.schema.json).

Every call site the page shows has an ``id``, its index in ``PageData.sites`` (run
order); whatever names a site — a layer's sites, a memory step, the code view's sites —
holds that id, and the scripts join by it; a site's label is only ever shown. Names
(layers, kernels, call sites, ops) are only ever values: a table keyed by name is a
tuple of ``(name, value)`` pairs, which the script makes a ``Map``.
"""

from __future__ import annotations

import attrs
from attrs import frozen

from ..analysis import attribution
from ..analysis.memory import NO_SITE, ValueKind
from ..model.lineage import ANCHOR
from ..model.lineage_index import billed_layers
from ..model.numerics import BEYOND, Route
from ..model.origin import INSERTED, OP
from ..model.profile import CACHE, ESTIMATE, KERNEL, TIMELINE
from ..model.provenance import BlockProvenance, BuiltBlockProvenance, Owner
from ..model.sitekey import SiteKey
from ..model.verification import VERIFIED
from .provenance import provenance
from .table import figure, times


@frozen
class PageLayer:
    """One layer's row: its time, the ops and call sites (labels, shown) billed to it."""

    layer: str
    ms: float
    percent: float
    inserted_ms: float
    ops: tuple[str, ...]
    sites: tuple[str, ...]
    status: str


@frozen
class PageKernel:
    """One kernel's row: its time over its calls, where it ran, the layers it runs."""

    name: str
    us: float
    min_us: float
    max_us: float
    percent: float
    count: int
    device: str
    shapes: str
    layers: tuple[str, ...]
    status: str
    library: str


@frozen
class PageCheck:
    """A call site or layer not verified: what it is (shown), its verdict and why."""

    site: str
    status: str
    reasons: str


@frozen
class PageOpType:
    """One op type's row, and the layers whose ops are of it (``layer_list``)."""

    op: str
    ms: float
    percent: float
    count: int
    layers: int
    layer_list: tuple[str, ...]


@frozen
class PageCategory:
    name: str
    ms: float
    percent: float


@frozen
class PageSite:
    """One call site in run order (``id``: its index in ``PageData.sites``): its time
    over runs, what it runs (``roles``: layer -> its role there), its verdict, its
    category, arguments and work in words (empty when not counted)."""

    id: int
    label: str
    kernel: str
    start_us: float
    us: float
    min_us: float
    max_us: float
    layers: tuple[str, ...]
    roles: tuple[tuple[str, str], ...]
    status: str
    reasons: str
    category: str
    shapes: str
    work: str


@frozen
class PageMemory:
    """The entry's memory for its chart and tables (only ``why`` and the notes when its
    sizes are not known): bytes ``live`` at each step (``steps``: the labels of its
    kernel calls, ``step_sites`` their site ids, None for a call the page has no site
    of), the peak, each block's span (``[block, bytes, start, end, returned]``) and each
    activation placed in one (``[block, first, last, shape and dtype, site label, site
    id, layer, own bytes]``, in program order), so the page says what is live at any
    step as ``analysis.memory.live_at`` does."""

    entry: str
    known: bool
    why: str
    checks: tuple[str, ...]
    notes: tuple[str, ...]
    nobody: str = NO_SITE
    dims: tuple[tuple[str, int], ...] = ()
    steps: tuple[str, ...] = ()
    step_sites: tuple[int | None, ...] = ()
    live: tuple[float, ...] = ()
    peak: float = 0.0
    peak_step: int = -1
    blocks: int = 0
    planned: float = 0.0
    weights: float = 0.0
    inputs: float = 0.0
    spans: tuple[tuple[str, float, int, int, bool], ...] = ()
    values: tuple[tuple[str, int, int, str, str, int | None, str, float], ...] = ()
    layer_weights: tuple[tuple[str, float], ...] = ()


@frozen
class LayerPrecision:
    """A layer's precision: ``kind`` (a CSS class) is ``half`` (computes in a half
    dtype), ``reads-half`` (reads one, computes wider), ``kept`` (left in float32 by a
    float16 build, ``why`` says why), ``float32`` or ``cast``."""

    label: str
    dtype: str
    kind: str
    why: str
    cast_ms: float


@frozen
class PagePrecision:
    """The build's precision in words, time by compute dtype (``[dtype, ms, percent]``),
    the casts' time and share, each layer's precision."""

    build: str
    mixed: bool
    by_dtype: tuple[tuple[str, float, float], ...]
    cast_ms: float
    cast_percent: float
    casts: int
    layers: tuple[tuple[str, LayerPrecision], ...]


@frozen
class PagePeaks:
    gflops: tuple[tuple[str, float], ...]  # (dtype, GFLOP/s)
    gbps: float
    line: str


@frozen
class RoofLayer:
    """A layer's roofline figures (None: not known): executed GFLOP (the TIR's) beside
    useful GFLOP (what its own ops ask), the rates of each, why the executed exceed the
    useful (``excess``)."""

    layer: str
    ms: float
    wasted_ms: float | None
    bound_ms: float | None
    efficiency: float | None
    bound_by: str
    gflop: float | None
    gflops_s: float | None
    useful_gflop: float | None
    model_gflops_s: float | None
    excess: str
    gbytes_s: float | None
    intensity: float | None
    notes: str
    dtype: str


@frozen
class PageRoofline:
    peaks: PagePeaks | None
    layers: tuple[RoofLayer, ...]


@frozen
class GraphNode:
    """A layer with ops: its own time, and whether the VM runs all its ops as builtins
    that run no kernel (drawn dotted)."""

    layer: str
    ms: float
    builtin: bool


@frozen
class PageGraph:
    nodes: tuple[GraphNode, ...]
    edges: tuple[tuple[str, str], ...]


@frozen
class OpDetail:
    """One op of a layer: its shapes and dtypes, the passes that rewrote it, or the one
    that eliminated it."""

    op: str
    inputs: str
    output: str
    history: tuple[str, ...]
    eliminated: str


@frozen
class LayerDetail:
    ops: tuple[OpDetail, ...]
    source: tuple[str, ...]  # where the layer was made in the user's code


@frozen
class PageAdvice:
    rule: str
    title: str
    layers: tuple[str, ...]
    evidence: tuple[str, ...]
    saving_ms: float
    what: str
    how: str
    measured: bool


@frozen
class LayerError:
    """A layer's numerical comparison in words; ``status`` is a CSS class."""

    status: str
    text: str


@frozen
class KernelCode:
    """A kernel's TIR as fusion left it and as built (empty: no schedule changed it),
    with the blocks of each (``model.provenance``)."""

    text: str
    blocks: tuple[BlockProvenance, ...]
    built: str
    built_blocks: tuple[BuiltBlockProvenance, ...]


@frozen
class CodeSite:
    """A call site of the code view, in run order: its label, the page's site id (None:
    not a site of the entry the page shows), its kernel, the Relax function and line that
    call it, and block index -> the origin it computes there."""

    label: str
    site: int | None
    kernel: str
    function: str
    relax_line: int
    ambiguous: bool
    blocks: dict[str, Owner]


@frozen
class PageCode:
    """The code viewer's data (``assets/code.js``): each Relax function's text, each
    kernel's TIR and blocks, each call site."""

    entry: str
    functions: tuple[tuple[str, str], ...]
    kernels: tuple[tuple[str, KernelCode], ...]
    sites: tuple[CodeSite, ...]


@frozen
class PageInside:
    """An op of a fused kernel's call site as timed inside (``profile --inside``): its
    blocks, time, measured share beside the modelled one (``analysis.inside.InsideRow``)."""

    key: str  # the row's key in its table: the site and its parts
    site: str
    site_id: int  # the site's id in ``sites``: the timeline draws the row under its kernel's slice
    ops: str
    layers: str
    blocks: str
    us: float
    min_us: float
    max_us: float
    measured_percent: float
    modelled_percent: float
    differs: str


@frozen
class PageData:
    """Everything the page's scripts read (``layer_sites``: layer -> the ids of the
    sites running or serving it; ``estimate``: its times are bounds, nothing was
    achieved)."""

    model: str
    layers: tuple[PageLayer, ...]
    kernels: tuple[PageKernel, ...]
    checks: tuple[PageCheck, ...]
    op_types: tuple[PageOpType, ...]
    categories: tuple[PageCategory, ...]
    sites: tuple[PageSite, ...]
    layer_sites: tuple[tuple[str, tuple[int, ...]], ...]
    layer_detail: tuple[tuple[str, LayerDetail], ...]
    graph: PageGraph
    timeline_note: str
    roofline: PageRoofline
    estimate: bool
    precision: PagePrecision
    memory: PageMemory | None
    advice: tuple[PageAdvice, ...]
    errors: tuple[tuple[str, LayerError], ...] = ()
    code: PageCode | None = None
    inside: tuple[PageInside, ...] = ()


def _inside_rows(report) -> tuple:
    """The rows the page's table shows: a site's when it has two or more ops timed apart,
    or a note saying why not (a kernel of one op has nothing to tell apart)."""
    ops: dict[str, int] = {}
    for r in report.inside:
        ops[r.site] = ops.get(r.site, 0) + bool(r.ops)
    return tuple(r for r in report.inside if ops[r.site] > 1 or (r.note and not r.parts))


def page_data(report, comparison=None) -> PageData:
    """The page's data of a ``Report`` (with a ``Comparison`` of the same model: each
    layer's error in words)."""
    lineage = report.lineage
    sites, ids = _sites(report)
    by_label = {key.label: i for key, i in ids.items()}  # memory steps and code sites name sites by label
    return PageData(
        model=lineage.build.model,
        layers=tuple(
            PageLayer(r.layer, r.us / 1e3, r.percent, r.inserted_us / 1e3, r.ops, r.kernels, r.status)
            for r in report.layers
        ),
        kernels=tuple(
            PageKernel(
                r.name, r.us, r.min_us, r.max_us, r.percent, r.count, r.device, r.shapes, r.layers, r.status, r.library
            )
            for r in report.kernels
        ),
        checks=_checks(lineage),
        op_types=_op_types(report),
        categories=tuple(PageCategory(n, us / 1e3, p) for n, us, p in report.categories.rows()),
        sites=sites,
        layer_sites=_layer_sites(lineage, ids),
        layer_detail=_layer_detail(lineage),
        graph=_layer_graph(report),
        timeline_note=(
            "run 1 of the timeline" if report.profile.mode == TIMELINE else "sites timed alone, laid end to end"
        ),
        roofline=_roofline(report.roofline),
        estimate=report.profile.mode == ESTIMATE,
        precision=_precision(report.precision),
        memory=_memory(report.memory, by_label),
        advice=tuple(
            PageAdvice(
                f.rule,
                f.title,
                f.layers,
                f.evidence,
                f.saving_us / 1e3,
                f.change.what,
                f.change.how,
                f.change.rebuild is not None,
            )
            for f in report.advice
        ),
        errors=_errors(comparison),
        code=_code(report, by_label),
        inside=tuple(
            PageInside(
                f"{r.site} {' '.join(map(str, r.parts))}",
                r.site,
                by_label[r.site],
                " ".join(r.ops) or ("(outside its loop nests)" if not r.blocks else "(no op)"),
                " ".join(r.layers),
                " ".join(r.blocks),
                r.us,
                r.min_us,
                r.max_us,
                r.measured_percent,
                r.modelled_percent,
                "yes" if r.differs else "",
            )
            for r in _inside_rows(report)
        ),
    )


def _layer_sites(lineage, ids: dict[SiteKey, int]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """layer -> the ids of the call sites that run its ops or serve them, in run order."""
    out: dict[str, dict[int, None]] = {}
    for s in lineage.call_sites:
        for o in s.origin_ids:
            origin = lineage.origins[o]
            for layer in (origin.layer,) if origin.kind == OP else billed_layers(origin, lineage.origins):
                out.setdefault(layer, {})[ids[s.key]] = None
    return tuple((layer, tuple(found)) for layer, found in out.items())


def _checks(lineage) -> tuple[PageCheck, ...]:
    """Each call site and layer whose verdict is not ``verified``."""
    checks = lineage.site_checks()
    layers = lineage.verification.layers if lineage.verification is not None else ()
    return tuple(
        PageCheck(s.label, checks[s.position].status, "; ".join(checks[s.position].reasons))
        for s in lineage.call_sites
        if checks[s.position].status != VERIFIED
    ) + tuple(PageCheck(f"layer {c.layer}", c.status, "; ".join(c.reasons)) for c in layers if c.status != VERIFIED)


def _op_types(report) -> tuple[PageOpType, ...]:
    op_layers = attribution.op_type_layers(report.lineage)
    return tuple(
        PageOpType(r.op, r.us / 1e3, r.percent, r.count, r.layers, tuple(op_layers.get(r.op, ())))
        for r in report.op_types
    )


def _sites(report) -> tuple[tuple[PageSite, ...], dict[SiteKey, int]]:
    """Every call site in run order — each kernel call, and a served step's KV-cache
    kernel calls among them by their start — numbered in that order, and each site's
    key -> its number."""
    lineage, profile, roofs = report.lineage, report.profile, report.roofline.sites
    times = profile.site_times(KERNEL)
    starts = {profile.key(r): r.start_us for r in profile.records if r.run == 0 and r.kind == KERNEL}
    checks = lineage.site_checks()
    found = []
    for s in lineage.call_sites:
        t = times.get(s.key)
        roles: dict[str, str] = {}
        for r in s.roles:
            roles.setdefault(lineage.origins[r.origin].layer, r.role)
        kinds = {lineage.origins[o].kind for o in s.origin_ids}
        arg = profile.arg(s.key)
        found.append(
            (
                s.key,
                PageSite(
                    id=0,
                    label=s.label,
                    kernel=s.kernel,
                    start_us=starts.get(s.key, 0.0),
                    us=t.median_us if t else 0.0,
                    min_us=t.min_us if t else 0.0,
                    max_us=t.max_us if t else 0.0,
                    layers=tuple(roles),
                    roles=tuple(roles.items()),
                    status=checks[s.position].status,
                    reasons="; ".join(checks[s.position].reasons),
                    category="compute" if OP in kinds else "inserted" if INSERTED in kinds else "unresolved",
                    shapes=", ".join(f"{d}{list(sh)}" for sh, d in zip(arg.shapes, arg.dtypes)) if arg else "",
                    work=_site_work(roofs.get(s.key)),
                ),
            )
        )
    cache = _cache_sites(report)
    ordered = sorted(found + cache, key=lambda pair: pair[1].start_us) if cache else found
    return tuple(attrs.evolve(site, id=i) for i, (_, site) in enumerate(ordered)), {
        key: i for i, (key, _) in enumerate(ordered)
    }


def _site_work(roof) -> str:
    """A site's executed and useful FLOPs in words (empty when its FLOPs are not counted)."""
    if roof is None or roof.flops is None or roof.useful is None:
        return ""
    return f"{roof.flops:,.0f} FLOPs executed, {roof.useful:,.0f} useful" + (
        f" ({times(roof.executed_ratio)}: {'; '.join(roof.excess)})" if roof.excess else ""
    )


def _cache_sites(report) -> list[tuple[SiteKey, PageSite]]:
    """A served step's KV-cache kernel calls as sites of the page: each with the
    layer its share went to, and the builtin call it ran inside as its reason."""
    profile = report.profile
    times = profile.site_times(CACHE)
    starts = {profile.key(r): r.start_us for r in profile.records if r.run == 0 and r.kind == CACHE}
    within = profile.within()
    return [
        (
            share.key,
            PageSite(
                id=0,
                label=share.key.label,
                kernel=share.key.kernel,
                start_us=starts.get(share.key, 0.0),
                us=times[share.key].median_us,
                min_us=times[share.key].min_us,
                max_us=times[share.key].max_us,
                layers=(share.layer,),
                roles=((share.layer, ANCHOR),),
                status=share.status,
                reasons=f"a KV-cache kernel, run inside {within[share.key].label}" if share.key in within else "",
                category=share.category,
                shapes="",
                work="",
            ),
        )
        for share in report.shares
        if share.key in times
    ]


def _memory(memory, site_of: dict[str, int]) -> PageMemory | None:
    """The entry's memory (None without a plan)."""
    if memory is None:
        return None
    known = PageMemory(memory.entry, memory.known, memory.why, tuple(c.text for c in memory.checks), memory.notes)
    if not memory.known:
        return known
    values = tuple(
        (
            v.name,
            v.first,
            v.last,
            " ".join(("x".join(map(str, v.shape)), v.dtype)).strip(),
            v.site,
            site_of.get(v.site),
            v.layer,
            v.own,
        )
        for v in memory.lifetimes
        if v.kind == ValueKind.ACTIVATION
    )
    return PageMemory(
        memory.entry,
        memory.known,
        memory.why,
        known.checks,
        known.notes,
        dims=tuple(sorted(memory.dims.items())),
        steps=tuple(memory.steps),
        step_sites=tuple(site_of.get(label) for label in memory.steps),
        live=tuple(memory.live),
        peak=memory.peak,
        peak_step=memory.peak_step,
        blocks=memory.blocks,
        planned=memory.planned,
        weights=memory.weights,
        inputs=memory.inputs,
        spans=tuple((s.block, s.bytes, s.start, s.end, s.returned) for s in memory.spans),
        values=values,
        layer_weights=tuple((r.layer, r.weights) for r in memory.layers if r.weights),
    )


def _precision(precision) -> PagePrecision:
    from ..analysis.precision import is_half

    def kind(r) -> str:
        if r.float32:
            return "kept"
        if not r.compute:
            return "cast"
        if any(is_half(d) for d in r.compute):
            return "half"
        return "reads-half" if any(is_half(d) for d in r.inputs) else "float32"

    return PagePrecision(
        precision.build,
        precision.mixed,
        tuple((d, us / 1e3, p) for d, us, p in precision.by_dtype),
        precision.cast_us / 1e3,
        precision.cast_percent,
        len(precision.casts),
        tuple((r.layer, LayerPrecision(r.label, r.dtype, kind(r), r.why, r.cast_us / 1e3)) for r in precision.layers),
    )


def _roofline(roofline) -> PageRoofline:
    peaks = roofline.peaks

    def ms(us):
        return None if us is None else us / 1e3

    def per(value, unit):
        return None if value is None else value / unit

    def percent(value):
        return None if value is None else 100 * value

    return PageRoofline(
        None if peaks is None else PagePeaks(tuple(sorted(peaks.gflops.items())), peaks.gbps, peaks.line()),
        tuple(
            RoofLayer(
                layer=r.name,
                ms=r.us / 1e3,
                wasted_ms=ms(r.wasted_us),
                bound_ms=ms(r.bound_us),
                efficiency=percent(r.efficiency),
                bound_by=r.bound_by or "",
                gflop=per(r.flops, 1e9),
                gflops_s=r.gflops_s,
                useful_gflop=per(r.useful, 1e9),
                model_gflops_s=r.model_gflops_s,
                excess="; ".join(r.excess),
                gbytes_s=r.gbytes_s,
                intensity=r.intensity,
                notes="; ".join(r.notes),
                dtype=r.dtype,
            )
            for r in roofline.layers
        ),
    )


def _read_from(route) -> str:
    """Where a compared layer's value was read, in words (its ``Route``)."""
    if route == Route.OBSERVED:
        return "a rebuild that writes it out"
    return "the compared build" + (", through data movement" if route == Route.MOVED else "")


def _errors(comparison) -> tuple[tuple[str, LayerError], ...]:
    """layer -> its numerical comparison in words, for the detail pane."""
    if comparison is None:
        return ()
    out = []
    for e in comparison.layers:
        if e.compared:
            figures = (
                f"max abs error {figure(e.max_abs)}, max rel {figure(e.max_rel)}, cosine {figure(e.cosine, '.6f')}"
                if e.max_abs is not None
                else f"{e.nan} NaN, {e.inf} Inf (the reference has {e.reference_nan})"
            )
            text = (
                f"{'BEYOND' if e.status == BEYOND else 'within'} atol {comparison.atol:g} / rtol "
                f"{comparison.rtol:g} ({comparison.precision}): {figures}, read from {e.site} of "
                f"{_read_from(e.route)}{' (' + e.note + ')' if e.note else ''}"
            )
        else:
            text = f"{e.status}: {e.note}"
        out.append((e.layer, LayerError(e.status.replace(" ", "-"), text)))
    return tuple(out)


def _layer_graph(report) -> PageGraph:
    """Every layer with ops (its own time; whether only builtins that run no kernel run
    it: a builtin that ran a KV cache's kernels did) and the dataflow edges between
    layers, for the page to group and lay out."""
    lineage = report.lineage
    ms = {r.layer: r.us / 1e3 for r in report.layers}
    ran_kernels = {s.origin for s in report.shares}
    layer_of = attribution.layer_of_ops(lineage)
    ops: dict[str, set[str]] = {}
    for oid, layer in layer_of.items():
        ops.setdefault(layer, set()).add(oid)
    in_kernels = {o for s in lineage.call_sites for o in s.origin_ids} | ran_kernels
    builtin = {o for b in lineage.builtins for o in b.origins}
    only_builtin = {layer for layer, ids in ops.items() if not ids & in_kernels and ids & builtin}
    edges = attribution.edges_between(lineage, layer_of)
    return PageGraph(
        tuple(GraphNode(layer, ms.get(layer, 0.0), layer in only_builtin) for layer in ops),
        tuple((a, b) for a, b in edges),
    )


def _layer_detail(lineage) -> tuple[tuple[str, LayerDetail], ...]:
    """layer -> its ops and where they came from in the user's code."""
    sources = lineage.sources()
    ops: dict[str, list[OpDetail]] = {}
    for o in sorted(lineage.origins.values(), key=lambda o: (o.function, o.index)):
        if o.kind != OP:
            continue
        ops.setdefault(o.layer, []).append(
            OpDetail(
                o.short_op,
                ", ".join(f"{d}{list(sh)}" for sh, d in zip(o.input_shapes, o.input_dtypes)),
                ", ".join(f"{d}{list(sh)}" for sh, d in zip(o.output_shapes, o.output_dtypes)),
                tuple(dict.fromkeys(c.pass_name for c in lineage.journal.history_by_origin.get(o.id, ()))),
                lineage.journal.eliminated_by.get(o.id, ""),
            )
        )
    return tuple((layer, LayerDetail(tuple(found), tuple(sources.get(layer, ())))) for layer, found in ops.items())


def _code(report, site_of: dict[str, int]) -> PageCode | None:
    """The code view's data, None for a build without its code; its sites in run order
    (a layer's first call first, so the layers pane lists them in the order they run)."""
    lineage = report.build_lineage
    if lineage.code is None:
        return None
    found = provenance(lineage)
    order = {s.label: i for i, s in enumerate(lineage.call_sites)}
    sites = (
        CodeSite(s.label, site_of.get(s.label), name, s.function, s.relax_line, s.ambiguous, s.blocks)
        for name, k in found.kernels.items()
        for s in k.sites
    )
    return PageCode(
        report.lineage.entry(),
        tuple((name, f.text) for name, f in lineage.code.functions.items()),
        tuple(
            (
                name,
                KernelCode(
                    lineage.code.kernels[name].fused, k.blocks, lineage.code.kernels[name].built, k.built_blocks
                ),
            )
            for name, k in found.kernels.items()
        ),
        tuple(sorted(sites, key=lambda s: order.get(s.label, len(order)))),
    )
