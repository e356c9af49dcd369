"""Chrome / Perfetto trace (Trace Event format): one complete event per call."""

from __future__ import annotations

from ..model.lineage import Lineage
from ..model.profile import KERNEL


def chrome_trace(lineage: Lineage, profile) -> dict:
    """Kernels on thread 1, VM builtins on thread 2, one process per run; each kernel
    event's args carry its layers, origins and argument shapes."""
    lineage = lineage.for_entry(profile.entry)
    sites = {(s.kernel, s.call): s for s in lineage.call_sites}
    events = []
    for run in range(profile.runs):
        events.append({"name": "process_name", "ph": "M", "pid": run + 1, "tid": 0,
                       "args": {"name": f"{lineage.model}.{profile.entry} run {run} ({profile.mode})"}})
        for tid, label in ((1, "kernels"), (2, "VM builtins")):
            events.append({"name": "thread_name", "ph": "M", "pid": run + 1, "tid": tid, "args": {"name": label}})
    for r in profile.records:
        arg = profile.args.get(f"{r.name}#{r.call}")
        args = {"call": r.call, "shapes": [list(s) for s in arg.shapes] if arg else []}
        site = sites.get((r.name, r.call))
        if site is not None:
            args["layers"] = list(dict.fromkeys(lineage.origins[o].layer for o in site.origin_ids))
            args["origins"] = {role.origin: role.role for role in site.roles}
            args["source"] = list(dict.fromkeys(lineage.origins[o].source for o in site.origin_ids
                                                if lineage.origins[o].source))
        events.append({
            "name": r.name, "cat": r.kind, "ph": "X", "ts": r.start_us, "dur": r.duration_us,
            "pid": r.run + 1, "tid": 1 if r.kind == KERNEL else 2, "args": args,
        })
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": lineage.model, "entry": profile.entry, "target": lineage.target,
                          "device": profile.device}}
