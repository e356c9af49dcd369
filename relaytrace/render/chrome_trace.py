"""Chrome / Perfetto trace (Trace Event format): one complete event per call, one
process per run, tracks named after the entry function, and a flow arrow from each
inserted op's kernel (a layout transform, a cast) to the kernel of the layer it serves."""

from __future__ import annotations

from itertools import islice

from ..analysis.attribution import module_prefix
from ..model.layer_name import module_path
from ..model.origin import INSERTED
from ..model.profile import BUILTIN, CACHE, KERNEL
from ..model.sitekey import SiteKey

_LANES = {KERNEL: 1, BUILTIN: 2, CACHE: 3}  # the track (tid) of each kind of call


def chrome_trace(report) -> dict:
    """The trace of a ``Report``'s profile: kernels on track 1 (``ENTRY kernels``), VM
    builtins on track 2, a served step's KV-cache kernels on track 3 (each with the
    builtin call it ran inside and the layer billed), one process per run. Each kernel event's args carry its layers,
    the anchor's layer and module path (``layer1`` / ``layer1.0`` / ``layer1.0.conv1``),
    origins with roles, source lines and argument shapes; a flow goes from every call of
    a site holding inserted ops to the next call, in the same run, of a site running an
    op they serve. A kernel call timed inside holds a slice per op (``_inside``)."""
    lineage, profile = report.lineage, report.profile
    sites = {s.key: s for s in lineage.call_sites}
    billed = {share.key: share.layer for share in report.shares if share.key not in sites}
    lanes = ((1, "kernels"), (2, "VM builtins")) + (((3, "KV-cache kernels"),) if billed else ())
    events = []
    for run in range(profile.runs):
        events.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": run + 1,
                "tid": 0,
                "args": {"name": f"{lineage.build.model}.{profile.entry} run {run} ({profile.mode})"},
            }
        )
        for tid, label in lanes:
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": run + 1,
                    "tid": tid,
                    "args": {"name": f"{profile.entry} {label}"},
                }
            )
    for r in profile.records:
        key = profile.key(r)
        arg = profile.arg(key)
        args = {"call": r.call, "shapes": [list(s) for s in arg.shapes] if arg else []}
        site = sites.get(key)
        if site is not None:
            args.update(_site_args(lineage, site))
        if r.within:  # a KV-cache kernel: the builtin call it ran inside (whose slice leaves its time out)
            args.update(within=r.within, layer=billed.get(key, ""))
        events.append(
            {
                "name": r.name,
                "cat": "library" if r.name in lineage.library_calls else r.kind,
                "ph": "X",
                "ts": r.start_us,
                "dur": r.duration_us,
                "pid": r.run + 1,
                "tid": _LANES[r.kind],
                "args": args,
            }
        )
    events.extend(_flows(lineage, profile, sites))
    events.extend(_inside(report))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "model": lineage.build.model,
            "entry": profile.entry,
            "target": lineage.build.target,
            "device": profile.device,
            "policy": report.policy,
        },
    }


def _inside(report) -> list[dict]:
    """Each kernel call timed inside (``profile --inside``) as nested slices under its
    own: one per op, in the order the kernel runs them, each the op's measured share of
    the call's time (its time in the instrumented copy, scaled to this call); category
    ``inside``."""
    profile, out = report.profile, []
    rows: dict[str, list] = {}
    for row in report.inside:
        rows.setdefault(row.site, []).append(row)
    for r in profile.records:
        if r.kind != KERNEL:
            continue
        found = rows.get(profile.key(r).label)
        if not found:
            continue
        start, total = r.start_us, sum(x.us for x in found) or 1.0
        for row in sorted(found, key=lambda x: x.parts):
            dur = r.duration_us * row.us / total
            out.append(
                {
                    "name": " ".join(row.ops) or "(no op)",
                    "cat": "inside",
                    "ph": "X",
                    "ts": start,
                    "dur": dur,
                    "pid": r.run + 1,
                    "tid": _LANES[KERNEL],
                    "args": {
                        "layers": list(row.layers),
                        "blocks": list(row.blocks),
                        "measured_us": row.us,
                        "measured_percent": row.measured_percent,
                        "modelled_percent": row.modelled_percent,
                        "from": "an instrumented copy of the build (profile --inside), scaled to this call",
                    },
                }
            )
            start += dur
    return out


def _site_args(lineage, site) -> dict:
    anchor = lineage.origins[site.anchor].layer if site.anchor else ""
    depth = len(module_path(anchor).split(".")) if anchor else 0
    return {
        "layers": list(dict.fromkeys(lineage.origins[o].layer for o in site.origin_ids)),
        "layer": anchor,
        "module": " / ".join(module_prefix(anchor, d) for d in range(1, depth + 1)),
        "origins": {role.origin: role.role for role in site.roles},
        "source": list(dict.fromkeys(lineage.origins[o].source for o in site.origin_ids if lineage.origins[o].source)),
    }


def _flows(lineage, profile, sites) -> list[dict]:
    """Flow start/end pairs from a call of an inserted op's site to the first later call,
    in the same run, of a site that runs an op it serves (bound to the enclosing slices)."""
    runs_op: dict[str, set[SiteKey]] = {}
    for s in lineage.call_sites:
        for o in s.origin_ids:
            runs_op.setdefault(o, set()).add(s.key)
    kernel_calls = sorted((r for r in profile.records if r.kind == KERNEL), key=lambda r: (r.run, r.start_us))
    out, flow = [], 0
    for i, r in enumerate(kernel_calls):
        site = sites.get(profile.key(r))
        if site is None:
            continue
        served = {x for o in site.origin_ids if lineage.origins[o].kind == INSERTED for x in lineage.origins[o].serves}
        targets = set().union(*(runs_op.get(x, set()) for x in served)) - {site.key}
        later = next(
            (t for t in islice(kernel_calls, i + 1, None) if t.run == r.run and profile.key(t) in targets), None
        )
        if later is None:
            continue
        flow += 1
        common = {"name": "serves", "cat": "inserted", "id": flow, "pid": r.run + 1, "tid": 1}
        out.append({**common, "ph": "s", "ts": r.start_us + r.duration_us / 2})
        out.append({**common, "ph": "f", "bp": "e", "ts": later.start_us + later.duration_us / 2})
    return out
