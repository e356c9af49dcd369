"""CSV and JSON forms of the attribution tables, for spreadsheets and scripts."""

from __future__ import annotations

import csv
import io

from .. import attribution as A


def layers_csv(rows) -> str:
    return _csv(["layer", "time_us", "percent", "compute_us", "inserted_us", "ops", "kernel_calls", "verification"],
                [[r.layer, f"{r.us:.3f}", f"{r.percent:.4f}", f"{r.compute_us:.3f}", f"{r.inserted_us:.3f}",
                  " ".join(r.ops), " ".join(r.kernels), r.status] for r in rows])


def kernels_csv(rows) -> str:
    return _csv(["name", "duration_us", "percent", "count", "device", "argument_shapes", "layers", "verification"],
                [[r.name, f"{r.us:.3f}", f"{r.percent:.4f}", r.count, r.device, r.shapes, " ".join(r.layers),
                  r.status] for r in rows])


def _csv(headers, rows) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return buf.getvalue()


def attribution_json(lineage, profile, policy: str = "anchor", depth: int = 1) -> dict:
    layers = A.by_layer(lineage, profile, policy)
    cats = A.by_category(lineage, profile, policy)
    return {
        "model": lineage.model,
        "policy": policy,
        "summary": {"kernel_us": profile.kernel_us, "builtin_us": profile.builtin_us,
                    "e2e_median_us": profile.e2e_median_us, "gap_us": profile.gap_us},
        "categories": {name: us for name, us, _ in cats.rows()},
        "verification": {"suspect_us": cats.suspect_us, "unverified_us": cats.unverified_us},
        "inserted_by_layer": dict(cats.inserted_by_layer),
        "layers": [{"layer": r.layer, "us": r.us, "percent": r.percent, "compute_us": r.compute_us,
                    "inserted_us": r.inserted_us, "ops": r.ops, "kernel_calls": r.kernels,
                    "verification": r.status} for r in layers],
        "modules": [{"module": k, "us": us, "percent": p} for k, us, p in A.by_prefix(layers, depth)],
        "op_types": [{"op": r.op, "us": r.us, "percent": r.percent, "count": r.count, "layers": r.layers}
                     for r in A.by_op_type(lineage, profile, policy)],
        "kernels": [{"name": r.name, "us": r.us, "percent": r.percent, "count": r.count, "device": r.device,
                     "argument_shapes": r.shapes, "layers": r.layers, "verification": r.status}
                    for r in A.by_kernel(lineage, profile)],
    }
