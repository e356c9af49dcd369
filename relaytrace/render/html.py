"""One self-contained HTML file: a header in words; where the time goes as an icicle
over the module hierarchy (click to zoom); one run's call sites as a timeline; the
roofline chart of the layers and its table (sorted by time above the bound); the
memory chart (live bytes at each kernel call, the peak; what is live at the call
clicked, and whose); a
detail pane for any layer, module or call site (ops with shapes, sites with roles,
pass history, source lines, median/min/max, verdicts); coverage, eliminated, inserted
and unresolved ops; the sortable, searchable tables; the layer graph, laid out in the
page by dagre, with pan, zoom, search and grouping by module depth.

No network: the data is inline JSON; the script, styles and the vendored d3-hierarchy
and dagre (``assets/``, refreshed by ``tools/refresh_assets.sh``) are inlined at render
time.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..analysis import attribution
from ..analysis.memory import NO_SITE, ValueKind
from ..model.lineage import ANCHOR
from ..model.lineage_index import billed_layers
from ..model.numerics import BEYOND, Route
from ..model.origin import INSERTED, OP, Kind
from ..model.profile import CACHE, ESTIMATE, KERNEL, TIMELINE
from ..model.verification import VERIFIED, Status
from .provenance import provenance
from .table import figure, times

ASSETS = Path(__file__).parent / "assets"


def report_data(report) -> dict:
    """What the page's script reads, as JSON-ready data. Names (layers, kernels, call
    sites, ops) are only ever values: a table keyed by name is a list of ``[name,
    value]`` pairs (``layer_sites``, ``layer_detail``, ``errors``, a site's ``roles``),
    which the script makes a ``Map``."""
    lineage = report.lineage
    checks = lineage.site_checks()
    layer_sites: dict[str, list[str]] = {}
    op_layers = attribution.op_type_layers(lineage)
    for s in lineage.call_sites:
        for o in s.origin_ids:
            origin = lineage.origins[o]
            for layer in (origin.layer,) if origin.kind == OP else billed_layers(origin, lineage.origins):
                layer_sites.setdefault(layer, [])
                if s.label not in layer_sites[layer]:
                    layer_sites[layer].append(s.label)
    return {
        "layers": [
            {
                "layer": r.layer,
                "ms": r.us / 1e3,
                "percent": r.percent,
                "inserted_ms": r.inserted_us / 1e3,
                "ops": list(r.ops),
                "sites": list(r.kernels),
                "status": r.status,
            }
            for r in report.layers
        ],
        "kernels": [
            {
                "name": r.name,
                "us": r.us,
                "min_us": r.min_us,
                "max_us": r.max_us,
                "percent": r.percent,
                "count": r.count,
                "device": r.device,
                "shapes": r.shapes,
                "layers": list(r.layers),
                "status": r.status,
                "library": r.library,
            }
            for r in report.kernels
        ],
        "checks": [
            {"site": s.label, "status": checks[s.position].status, "reasons": "; ".join(checks[s.position].reasons)}
            for s in lineage.call_sites
            if checks[s.position].status != VERIFIED
        ]
        + [
            {"site": f"layer {c.layer}", "status": c.status, "reasons": "; ".join(c.reasons)}
            for c in (lineage.verification.layers if lineage.verification is not None else ())
            if c.status != VERIFIED
        ],
        "op_types": [
            {
                "op": r.op,
                "ms": r.us / 1e3,
                "percent": r.percent,
                "count": r.count,
                "layers": r.layers,
                "layer_list": list(op_layers.get(r.op, ())),
            }
            for r in report.op_types
        ],
        "categories": [{"name": n, "ms": us / 1e3, "percent": p} for n, us, p in report.categories.rows()],
        "layer_sites": list(layer_sites.items()),
        "model": lineage.build.model,
        "sites": _sites(report),
        "layer_detail": list(_layer_detail(lineage).items()),
        "graph": _layer_graph(report),
        "timeline_note": (
            "run 1 of the timeline" if report.profile.mode == TIMELINE else "sites timed alone, laid end to end"
        ),
        "roofline": _roofline(report.roofline),
        "estimate": report.profile.mode == ESTIMATE,  # its times are bounds: nothing was achieved
        "precision": _precision(report.precision),
        "memory": _memory(report.memory),
        "advice": [
            {
                "rule": f.rule,
                "title": f.title,
                "layers": list(f.layers),
                "evidence": list(f.evidence),
                "saving_ms": f.saving_us / 1e3,
                "what": f.change.what,
                "how": f.change.how,
                "measured": f.change.rebuild is not None,
            }
            for f in report.advice
        ],
    }


def _memory(memory) -> dict | None:
    """The entry's memory for the memory chart and its tables (null without a plan; only
    ``why`` and the notes when its sizes are not known): bytes live at each step, the
    peak, and what the page needs to say what is live at any step as ``live_at`` does:
    each block's span (``[block, bytes, start, end, returned]``) and each value placed in
    one (``[block, first, last, shape and dtype, site, layer, own bytes]``, in program
    order)."""
    if memory is None:
        return None
    out = {
        "entry": memory.entry,
        "known": memory.known,
        "why": memory.why,
        "checks": [c.text for c in memory.checks],
        "notes": list(memory.notes),
    }
    if not memory.known:
        return out
    return out | {
        "dims": sorted(memory.dims.items()),
        "steps": list(memory.steps),
        "live": list(memory.live),
        "peak": memory.peak,
        "peak_step": memory.peak_step,
        "blocks": memory.blocks,
        "planned": memory.planned,
        "weights": memory.weights,
        "inputs": memory.inputs,
        "nobody": NO_SITE,
        "spans": [[s.block, s.bytes, s.start, s.end, s.returned] for s in memory.spans],
        "values": [
            [v.name, v.first, v.last, " ".join(("x".join(map(str, v.shape)), v.dtype)).strip(), v.site, v.layer, v.own]
            for v in memory.lifetimes
            if v.kind == ValueKind.ACTIVATION
        ],
        "layer_weights": [[r.layer, r.weights] for r in memory.layers if r.weights],
    }


def _precision(precision) -> dict:
    """The build's precision in words, time by compute dtype (``[dtype, ms, percent]``),
    the casts' time and share, and each layer's precision as ``[layer, {label, dtype,
    kind, why}]`` pairs: ``kind`` (a CSS class) is ``half`` (computes in a half dtype),
    ``reads-half`` (reads one, computes wider: a float16 conv accumulating in float32),
    ``kept`` (left in float32 by a float16 build, ``why`` says why), ``float32`` or ``cast``."""
    from ..analysis.precision import is_half

    def kind(r) -> str:
        if r.float32:
            return "kept"
        if not r.compute:
            return "cast"
        if any(is_half(d) for d in r.compute):
            return "half"
        return "reads-half" if any(is_half(d) for d in r.inputs) else "float32"

    return {
        "build": precision.build,
        "mixed": precision.mixed,
        "by_dtype": [[d, us / 1e3, p] for d, us, p in precision.by_dtype],
        "cast_ms": precision.cast_us / 1e3,
        "cast_percent": precision.cast_percent,
        "casts": len(precision.casts),
        "layers": [
            [r.layer, {"label": r.label, "dtype": r.dtype, "kind": kind(r), "why": r.why, "cast_ms": r.cast_us / 1e3}]
            for r in precision.layers
        ],
    }


def _roofline(roofline) -> dict:
    """The peaks (None without; ``gflops`` as ``[dtype, GFLOP/s]`` pairs) and each
    layer's roofline figures, for the chart, its table and the layer pane (a figure not
    known is null): executed GFLOP (the TIR's) beside useful GFLOP (what its own ops
    ask), the rates of each, why the executed exceed the useful (``excess``)."""
    peaks = roofline.peaks

    def ms(us):
        return None if us is None else us / 1e3

    return {
        "peaks": None
        if peaks is None
        else {"gflops": sorted(peaks.gflops.items()), "gbps": peaks.gbps, "line": peaks.line()},
        "layers": [
            {
                "layer": r.name,
                "ms": r.us / 1e3,
                "wasted_ms": ms(r.wasted_us),
                "bound_ms": ms(r.bound_us),
                "efficiency": None if r.efficiency is None else 100 * r.efficiency,
                "bound_by": r.bound_by or "",
                "gflop": None if r.flops is None else r.flops / 1e9,
                "gflops_s": r.gflops_s,
                "useful_gflop": None if r.useful is None else r.useful / 1e9,
                "model_gflops_s": r.model_gflops_s,
                "excess": "; ".join(r.excess),
                "gbytes_s": r.gbytes_s,
                "intensity": r.intensity,
                "notes": "; ".join(r.notes),
                "dtype": r.dtype,
            }
            for r in roofline.layers
        ],
    }


def _sites(report) -> list[dict]:
    """Every kernel call site in run order, with its time over runs, what it runs and its
    work (``work``: executed and useful FLOPs and why the one exceeds the other, empty
    when not counted)."""
    lineage, profile, roofs = report.lineage, report.profile, report.roofline.sites
    times = profile.site_times(KERNEL)
    starts = {profile.key(r): r.start_us for r in profile.records if r.run == 0 and r.kind == KERNEL}
    checks = lineage.site_checks()
    out = []
    for s in lineage.call_sites:
        t = times.get(s.key)
        roles: dict[str, str] = {}
        for r in s.roles:
            roles.setdefault(lineage.origins[r.origin].layer, r.role)
        kinds = {lineage.origins[o].kind for o in s.origin_ids}
        arg = profile.arg(s.key)
        out.append(
            {
                "label": s.label,
                "kernel": s.kernel,
                "start_us": starts.get(s.key, 0.0),
                "us": t.median_us if t else 0.0,
                "min_us": t.min_us if t else 0.0,
                "max_us": t.max_us if t else 0.0,
                "layers": list(roles),
                "roles": list(roles.items()),
                "status": checks[s.position].status,
                "reasons": "; ".join(checks[s.position].reasons),
                "category": "compute" if OP in kinds else "inserted" if INSERTED in kinds else "unresolved",
                "shapes": ", ".join(f"{d}{list(sh)}" for sh, d in zip(arg.shapes, arg.dtypes)) if arg else "",
                "work": _site_work(roofs.get(s.key)),
            }
        )
    cache = _cache_sites(report)
    return sorted(out + cache, key=lambda site: site["start_us"]) if cache else out


def _site_work(roof) -> str:
    """A site's executed and useful FLOPs in words (empty when its FLOPs are not counted)."""
    if roof is None or roof.flops is None or roof.useful is None:
        return ""
    return f"{roof.flops:,.0f} FLOPs executed, {roof.useful:,.0f} useful" + (
        f" ({times(roof.executed_ratio)}: {'; '.join(roof.excess)})" if roof.excess else ""
    )


def _cache_sites(report) -> list[dict]:
    """A served step's KV-cache kernel calls as sites of the page: each with the
    layer its share went to, and the builtin call it ran inside as its reason."""
    profile = report.profile
    times = profile.site_times(CACHE)
    starts = {profile.key(r): r.start_us for r in profile.records if r.run == 0 and r.kind == CACHE}
    within = profile.within()
    return [
        {
            "label": share.key.label,
            "kernel": share.key.kernel,
            "start_us": starts.get(share.key, 0.0),
            "us": times[share.key].median_us,
            "min_us": times[share.key].min_us,
            "max_us": times[share.key].max_us,
            "layers": [share.layer],
            "roles": [(share.layer, ANCHOR)],
            "status": share.status,
            "reasons": f"a KV-cache kernel, run inside {within[share.key].label}" if share.key in within else "",
            "category": share.category,
            "shapes": "",
        }
        for share in report.shares
        if share.key in times
    ]


def _numerics_line(comparison) -> str:
    """What the detail pane's numerics come from: a comparison of a build of its own."""
    if comparison is None:
        return ""
    first = html.escape(comparison.summary().splitlines()[0])
    return (
        f'<p class="summary">numerics (in each layer\'s pane): {first}; '
        "from `relaytrace compare` of a build of its own, whose kernel calls are named there</p>"
    )


def _read_from(route) -> str:
    """Where a compared layer's value was read, in words (its ``Route``)."""
    if route == Route.OBSERVED:
        return "a rebuild that writes it out"
    return "the compared build" + (", through data movement" if route == Route.MOVED else "")


def _errors(comparison) -> dict:
    """layer -> its numerical comparison in words, for the detail pane."""
    if comparison is None:
        return {}
    out = {}
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
        out[e.layer] = {"status": e.status.replace(" ", "-"), "text": text}  # a CSS class
    return out


def _layer_graph(report) -> dict:
    """Every layer with ops (its own time, whether the VM runs all its ops as builtins
    that run no kernel: a builtin that ran a KV cache's kernels did) and the dataflow
    edges between layers, for the page to group and lay out."""
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
    return {
        "nodes": [{"layer": layer, "ms": ms.get(layer, 0.0), "builtin": layer in only_builtin} for layer in ops],
        "edges": [list(e) for e in edges],
    }


def _layer_detail(lineage) -> dict[str, dict]:
    """layer -> its ops (shapes, dtypes, the passes that rewrote each, or the one that
    eliminated it) and where they came from in the user's code."""
    sources = lineage.sources()
    out: dict[str, dict] = {}
    for o in sorted(lineage.origins.values(), key=lambda o: (o.function, o.index)):
        if o.kind != OP:
            continue
        entry = out.setdefault(o.layer, {"ops": [], "source": list(sources.get(o.layer, ()))})
        entry["ops"].append(
            {
                "op": o.short_op,
                "inputs": ", ".join(f"{d}{list(sh)}" for sh, d in zip(o.input_shapes, o.input_dtypes)),
                "output": ", ".join(f"{d}{list(sh)}" for sh, d in zip(o.output_shapes, o.output_dtypes)),
                "history": list(dict.fromkeys(c.pass_name for c in lineage.journal.history_by_origin.get(o.id, ()))),
                "eliminated": lineage.journal.eliminated_by.get(o.id, ""),
            }
        )
    return out


_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_json(data) -> str:
    """``data`` as JSON to put inside a ``<script>`` element: ``<``, ``>`` and ``&`` are
    written as ``\\u`` escapes (so no ``</script>``, ``<!--`` or ``<script`` can end or
    derail the element, whatever a name holds), and so is every non-ASCII character
    (``ensure_ascii``: U+2028 and U+2029 too). ``JSON.parse`` of the element's text
    gives ``data`` back unchanged."""
    return json.dumps(data, ensure_ascii=True).translate(_SCRIPT_ESCAPES)


def _asset(name: str) -> str:
    return (ASSETS / name).read_text()


# The closed sets the page's scripts compare values with, mirrored into the page from
# the enums themselves (``NAMES.Kind.INSERTED``), never spelled in the scripts: a member
# renamed in Python cannot leave a comparison in JavaScript silently false.
PAGE_NAMES = (Kind, Status, attribution.Category)


def names_script() -> str:
    """``const NAMES = {...};``: each of ``PAGE_NAMES`` as ``{MEMBER: value}``."""
    return f"const NAMES = {script_json({e.__name__: {m.name: m.value for m in e} for e in PAGE_NAMES})};"


def _target_words(target: str) -> str:
    """``llvm, x86_64, 2 cores`` from a target's JSON (the raw text when it is not JSON)."""
    try:
        config = json.loads(target)
    except ValueError:
        return target
    if not isinstance(config, dict):
        return target
    words = [str(config.get("kind", "?"))]
    triple = str(config.get("mtriple", ""))
    words += [triple.split("-")[0]] if triple else []
    words += [str(config[k]) for k in ("mcpu", "arch", "model") if config.get(k)]
    words += [f"{config['num-cores']} cores"] if config.get("num-cores") else []
    return ", ".join(words)


def code_data(report) -> dict | None:
    """The code viewer's data (``assets/code.js``), None for a build without its code:
    each Relax function's text, each kernel's TIR and blocks, and each call site's
    Relax line and the layer of each of its kernel's blocks (``provenance``)."""
    lineage = report.build_lineage
    if lineage.code is None:
        return None
    found = provenance(lineage).to_json()
    order = {s.label: i for i, s in enumerate(lineage.call_sites)}
    return {
        "entry": report.lineage.entry(),
        "functions": [[name, f.text] for name, f in lineage.code.functions.items()],
        "kernels": [
            [
                name,
                {
                    "text": lineage.code.kernels[name].fused,
                    "blocks": k["blocks"],
                    "built": lineage.code.kernels[name].built,
                    "built_blocks": k["built_blocks"],
                },
            ]
            for name, k in found["kernels"].items()
        ],
        # in run order: a layer's first call first, the layers pane in the order they run
        "sites": sorted(
            ([s["label"], {**s, "kernel": name}] for name, k in found["kernels"].items() for s in k["sites"]),
            key=lambda pair: order.get(pair[0], len(order)),
        ),
    }


def _code_section(code) -> str:
    if code is None:
        return ""
    return """<h2>Code</h2>
<p>What the compiler made of each layer: click a layer for the Relax line that calls its kernel and the kernel's
TIR, the blocks that compute it highlighted (orange: blocks of ops a pass inserted; red text: a block the
verifier finds suspect); click a TIR block for its op and layer, a Relax call for its kernel.</p>
<div class="graphbar"><input id="code-search" type="search" placeholder="search the code: layers, Relax, TIR">
<label><input id="code-built" type="checkbox" disabled> TIR as built (where a schedule changed it)</label></div>
<div id="code-info"></div>
<div id="code"><div><b>layers</b><ul id="code-layers"></ul></div>
<div><b>Relax program</b><pre id="code-relax"></pre></div>
<div><b id="code-kernel">kernel TIR</b><pre id="code-tir"></pre></div></div>"""


def _header(report) -> str:
    """The run in words: model, target, pipeline, entry and inputs, tuning, where and how
    it was measured, coverage and verification."""
    lineage, profile, cov = report.lineage, report.profile, report.coverage
    where = profile.remote or f"this machine ({profile.device})"
    build = lineage.build
    tuned = f"{len(build.tuned)} of {len(lineage.kernels)} kernels tuned" if build.tuned else "not tuned"
    status = (
        "complete and verified"
        if cov.complete
        else f"{cov.verified_sites} of {cov.call_sites} call sites verified, {len(cov.suspect)} suspect, "
        f"{len(cov.unverified)} unverified, {len(cov.unaccounted)} ops unaccounted"
        + (", degraded" if cov.degraded else "")
    )
    rows = [
        ("model", build.model),
        ("target", _target_words(build.target)),
        ("pipeline", build.pipeline),
        ("entry", profile.entry + _inputs(profile)),
        ("tuning", tuned),
        (
            "measured",
            f"on {where}, {profile.mode}, {profile.runs} run(s); figures are medians over runs"
            if profile.mode != ESTIMATE
            else f"NOT MEASURED: an estimate, each kernel's roofline lower bound on {profile.device}",
        ),
        ("lineage", f"{cov.attributed_sites} of {cov.call_sites} kernel call sites attributed; {status}"),
    ]
    return '<dl class="header">' + "".join(f"<dt>{k}</dt><dd>{html.escape(v)}</dd>" for k, v in rows) + "</dl>"


def _op_sections(report) -> str:
    """Coverage, eliminated ops (with the pass), inserted ops (with what they serve),
    unresolved ops, as tables."""
    lineage, cov = report.lineage, report.coverage

    def rows(head, body):
        return (
            "<table><thead><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in body)
            + "</tbody></table>"
        )

    eliminated = [
        (o, lineage.origins[o].layer, lineage.origins[o].short_op, p) for o, p in lineage.eliminated().items()
    ]
    inserted = [
        (o.id, o.short_op, o.pass_name, ", ".join(dict.fromkeys(lineage.origins[x].layer for x in o.serves)))
        for o in lineage.inserted()
    ]
    unresolved = [(o.id, o.short_op, o.pass_name) for o in lineage.unresolved()]
    return (
        f'<h2 id="coverage">Coverage</h2><p>{cov.origins} model ops: {cov.in_kernels} in kernels, '
        f"{cov.in_builtins} in VM builtins only, {cov.eliminated} eliminated by passes, "
        f"{len(cov.unaccounted)} unaccounted</p>"
        + f"<h2>Eliminated ops ({len(eliminated)})</h2>"
        + rows(["origin", "layer", "op", "eliminated by"], eliminated)
        + f"<h2>Inserted ops ({len(inserted)})</h2>"
        + rows(["origin", "op", "inserted by", "serves"], inserted)
        + (
            f"<h2>Unresolved ops ({len(unresolved)})</h2>" + rows(["origin", "op", "pass"], unresolved)
            if unresolved
            else ""
        )
    )


def html_report(report, comparison=None) -> str:
    """The report page of a ``Report``: one self-contained HTML file. With a
    ``Comparison`` of the same model (``relaytrace compare``), each layer's pane also
    shows its output's error against the reference."""
    lineage, profile, policy, cats = report.lineage, report.profile, report.policy, report.categories
    data = report_data(report)
    data["errors"] = list(_errors(comparison).items())
    data["code"] = code_data(report)
    caused = ", ".join(f"{html.escape(layer)} ({us / 1e3:.3f} ms)" for layer, us in cats.inserted_by_layer[:6])
    cov = report.coverage
    layers = (
        f"; {cov.layers - len(cov.suspect_layers) - len(cov.unverified_layers)} of {cov.layers} layers "
        f"verified against the frontend's program"
        if cov.layers
        else ""
    )
    verdict = (
        f"{cov.verified_sites} of {cov.call_sites} call sites verified against the compiled IR; "
        f"{len(cov.suspect)} suspect, {len(cov.unverified)} unverified{layers}"
        + (
            ""
            if not (cov.suspect or cov.unverified)
            else f": {(cats.suspect_us + cats.unverified_us) / 1e3:.3f} ms ran there, and may be billed "
            f"to the wrong layers below"
        )
    )
    verdict_class = (
        "bad"
        if cov.suspect or cov.problems or cov.suspect_layers
        else "warn"
        if cov.unverified or cov.unverified_layers
        else "good"
    )
    problems = "".join(f'<p class="bad">{html.escape(p)}</p>' for p in cov.problems)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>relaytrace: {html.escape(lineage.build.model)}</title><style>{_asset("report.css")}</style></head>
<body>
<h1>relaytrace: {html.escape(lineage.build.model)}</h1>
{_header(report)}
<div class="summary">{"<br>".join(map(html.escape, profile.summary().splitlines()))}<br>
{len(lineage.call_sites)} kernel call sites of {len(lineage.kernels)} kernels &middot; attribution policy {policy}
{"<br>ops inserted by passes (layout transforms, casts, shape functions) serve: " + caused if caused else ""}</div>
{"".join(f'<p class="warn">{html.escape(w)}</p>' for w in profile.warnings())}
{_numerics_line(comparison)}
<div id="layout"><div id="main">
<h2>Advice</h2><div id="advice"></div>
<h2>Where the time goes</h2><div id="legend" class="legend"></div>
<p>Kernel time by module (width: time; click a module to zoom in and see it in the pane).</p>
<div id="crumbs" class="crumbs"></div><svg id="icicle" class="icicle"></svg>
<h2>Timeline</h2><svg id="timeline" class="timeline"></svg>
<h2>Layer graph</h2>
<div class="graphbar"><input id="search" type="search" placeholder="search layers, kernels, ops">
<label>group by module depth <select id="depth"></select></label> <button id="fit">fit</button>
<span id="found"></span></div>
<p>Colour: a node's own kernel time (share of the hottest node); dotted: run by VM builtins only.
Drag to pan, wheel to zoom, click a node for its details. The search also filters the tables.</p>
<svg id="graph" class="graph"></svg>
<h2>Roofline</h2><p id="peaks"></p>
<p>Time, bytes and bound as the {policy} policy bills them; GFLOP: executed, as the kernels' TIR counts them;
useful GFLOP: what each layer's own ops ask; model GFLOP/s: useful over time.</p>
<p>Each layer at its arithmetic intensity (FLOPs per byte of its kernels' arguments) and achieved GFLOP/s,
both axes logarithmic; the lines are the ceilings: memory bandwidth (sloped) and peak compute (flat).
Area: the layer's time; blue: compute-bound, orange: memory-bound (by its bound), grey: no bound. Far below a
ceiling: time above the bound. Click a point for the layer.</p>
<svg id="roofline" class="roofline chart"></svg>
<table id="roof"></table>
<h2>Memory</h2>
<p>Bytes of activations live at each kernel call of the entry, in run order, as its compiled memory plan
allocates them (weights and inputs apart). Hover a point for its call; click one for the values live there and
the layers that wrote them (it opens at the peak); click a layer for it.</p>
<div id="memory"></div>
<h2>Categories</h2><table id="categories"></table>
<h2>Verification</h2><p class="{verdict_class}">{html.escape(verdict)}</p>{problems}
{'<table id="checks"></table>' if data["checks"] else ""}
<h2>Precision</h2><p id="precision"></p>
<h2>Layers</h2><p>Click a layer for its details; its kernels are highlighted (table and graph).</p>
<table id="layers"></table>
<h2>Kernels</h2><p>Click a kernel for its call sites and the layers it runs (highlighted in the table and
graph).</p><table id="kernels"></table>
<h2>Op types</h2><p>Click an op type for the layers whose ops are of it.</p>
<table id="optypes"></table>
{_code_section(data["code"])}
{_op_sections(report)}
</div><aside id="detail"><h3>details</h3><p>Click a module, layer, kernel, op type or call site.</p></aside></div>
<script type="application/json" id="relaytrace-data">{script_json(data)}</script>
<script>{_asset("d3-hierarchy.min.js")}</script>
<script>{_asset("dagre.min.js")}</script>
<script>{names_script()}
{_asset("pure.js")}</script>
<script>{_asset("report.js")}</script>
<script>{_asset("code.js")}</script>
</body></html>
"""


def _inputs(profile) -> str:
    """The concrete input shapes a profile ran, for the header (plain text: the header
    escapes it)."""
    if not profile.inputs:
        return ""
    shown = ", ".join(f"{n} {d}{list(sh)}" for n, sh, d in profile.inputs[:2])
    more = f", +{len(profile.inputs) - 2} more inputs" if len(profile.inputs) > 2 else ""
    return f" ({shown}{more})"
