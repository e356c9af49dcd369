"""CSV and JSON forms of the attribution tables, for spreadsheets and scripts."""

from __future__ import annotations

import csv
import io

from ..model.codec import encode
from .safe_text import csv_cell

ROOF_COLUMNS = [
    "flops",
    "useful_flops",
    "executed_over_useful",
    "excess",
    "transcendentals",
    "bytes",
    "gflops_per_s",
    "model_gflops_per_s",
    "gbytes_per_s",
    "flops_per_byte",
    "bound_us",
    "bound_by",
    "efficiency",
    "above_bound_us",
]


def roof_cells(roof) -> list[str]:
    """A ``roofline.Roof``'s figures as the ``ROOF_COLUMNS`` cells (empty: unknown):
    ``flops`` executed (the TIR's), ``useful_flops`` what the ops ask, their ratio, and
    why the executed exceed the useful (``excess``, empty when they do not); the rate
    ``gflops_per_s`` of executed work, ``model_gflops_per_s`` of useful work."""
    if roof is None:
        return [""] * len(ROOF_COLUMNS)

    def number(value, digits=".6g"):
        return "" if value is None else format(value, digits)

    return [
        number(roof.flops, ".0f"),
        number(roof.useful, ".0f"),
        number(roof.executed_ratio, ".4g"),
        "; ".join(roof.excess),
        number(roof.transcendentals, ".0f"),
        number(roof.bytes, ".0f"),
        number(roof.gflops_s),
        number(roof.model_gflops_s),
        number(roof.gbytes_s),
        number(roof.intensity),
        number(roof.bound_us, ".3f"),
        roof.bound_by or "",
        number(roof.efficiency, ".4f"),
        number(roof.wasted_us, ".3f"),
    ]


def layers_csv(report) -> str:
    """``layers.csv`` of a ``Report``: one row per layer, slowest first, then each layer
    billed no time with its FLOPs (``_untimed``: its ops ran in another layer's kernel); ``source``:
    where its ops came from (``Lineage.sources``); the roofline's figures
    (``ROOF_COLUMNS``: its time, bytes and bound as ``policy`` bills them, its FLOPs its
    own ops'); ``precision``: the dtype(s) its ops compute in; ``policy``: the
    attribution policy; every cell through ``csv_cell``."""
    rows, sources = report.layers, report.lineage.sources()
    roofs = {r.name: r for r in report.roofline.layers}
    precision = report.precision
    return csv_text(
        [
            "layer",
            "time_us",
            "percent",
            "compute_us",
            "inserted_us",
            "ops",
            "kernel_calls",
            "verification",
            "source",
            *ROOF_COLUMNS,
            "precision",
            "policy",
        ],
        [
            [
                r.layer,
                f"{r.us:.3f}",
                f"{r.percent:.4f}",
                f"{r.compute_us:.3f}",
                f"{r.inserted_us:.3f}",
                " ".join(r.ops),
                " ".join(r.kernels),
                r.status,
                " ".join(sources.get(r.layer, ())),
                *roof_cells(roofs.get(r.layer)),
                _dtype(precision.layer(r.layer)),
                report.policy,
            ]
            for r in rows
        ]
        + [_untimed_row(report, roof, sources, precision) for roof in _untimed(report)],
    )


def _untimed(report) -> list:
    """The roofline's layers no time was billed to (under ``anchor``, a layer whose ops
    ran in another layer's kernel): listed after the timed ones, with their FLOPs."""
    timed = {r.layer for r in report.layers}
    return [roof for roof in report.roofline.layers if roof.name not in timed]


def _untimed_row(report, roof, sources, precision) -> list[str]:
    """``layers.csv``'s row of a layer billed no time (``_untimed``): 0 µs, its ops, the
    call sites that ran them, its verdict and its roofline figures."""
    lineage = report.lineage
    sites = lineage.kernels_of(roof.name)
    ops = dict.fromkeys(lineage.origins[o].short_op for o in sorted(lineage.resolve(roof.name)))
    check = lineage.verification.by_layer().get(roof.name) if lineage.verification is not None else None
    return [
        roof.name,
        "0.000",
        "0.0000",
        "0.000",
        "0.000",
        " ".join(ops),
        " ".join(s.key.label for s in sites),
        check.status if check is not None else "",
        " ".join(sources.get(roof.name, ())),
        *roof_cells(roof),
        _dtype(precision.layer(roof.name)),
        report.policy,
    ]


def _dtype(layer) -> str:
    """A layer's ``precision`` cell: its compute dtype(s) (``LayerPrecision.dtype``)."""
    return "" if layer is None else layer.dtype


def kernels_csv(report) -> str:
    """``kernels.csv`` of a ``Report``: one row per kernel (its ``KernelRow``s) with
    the roofline's figures over its call sites and its compute dtype (``precision``);
    ``library``: what runs a library call (``cublas``, ``packed``), empty for a kernel
    TVM compiled; every cell through ``safe_text.csv_cell``."""
    rows = report.kernels
    roofs = {r.name: r for r in report.roofline.kernels}
    return csv_text(
        [
            "name",
            "duration_us",
            "percent",
            "count",
            "device",
            "argument_shapes",
            "layers",
            "verification",
            "tuned",
            "min_us",
            "max_us",
            *ROOF_COLUMNS,
            "precision",
            "library",
        ],
        [
            [
                r.name,
                f"{r.us:.3f}",
                f"{r.percent:.4f}",
                r.count,
                r.device,
                r.shapes,
                " ".join(r.layers),
                r.status,
                "yes" if r.tuned else "",
                f"{r.min_us:.3f}",
                f"{r.max_us:.3f}",
                *roof_cells(roofs.get(r.name)),
                report.precision.kernel_dtype(r.name),
                r.library,
            ]
            for r in rows
        ],
    )


def inside_csv(report) -> str:
    """``inside.csv`` of a ``Report`` profiled ``--inside``: one row per op of each fused
    kernel's call site, its loop nests (``parts``) timed together
    (``analysis.inside.InsideRow``), its measured time and share beside the share
    ``--policy split`` models; every cell through ``safe_text.csv_cell``."""
    return csv_text(
        [
            "site",
            "kernel",
            "parts",
            "blocks",
            "ops",
            "layers",
            "median_us",
            "min_us",
            "max_us",
            "measured_percent",
            "modelled_percent",
            "differs",
            "site_overhead_percent",
            "note",
        ],
        [
            [
                r.site,
                r.kernel,
                " ".join(map(str, r.parts)),
                " ".join(r.blocks),
                " ".join(r.ops),
                " ".join(r.layers),
                f"{r.us:.3f}",
                f"{r.min_us:.3f}",
                f"{r.max_us:.3f}",
                f"{r.measured_percent:.2f}",
                f"{r.modelled_percent:.2f}",
                "yes" if r.differs else "",
                "" if r.overhead_percent is None else f"{r.overhead_percent:.2f}",
                r.note,
            ]
            for r in report.inside
        ],
    )


def comparison_csv(comparison) -> str:
    """One row per layer of a ``Comparison``: the cells of the terminal table."""
    from .table import comparison_rows

    return csv_text(*comparison_rows(comparison))


def csv_text(headers, rows) -> str:
    """A CSV of ``headers`` and ``rows``, as every CSV relaytrace writes: each cell
    through ``safe_text.csv_cell``, so a name starting ``=cmd|...`` is text in a
    spreadsheet, not a formula."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([csv_cell(c) for c in headers])
    writer.writerows([csv_cell(c) for c in row] for row in rows)
    return buf.getvalue()


def attribution_json(report, depth: int = 1) -> dict:
    """A ``Report`` as JSON: summary, categories, layers, modules at ``depth``, op
    types, kernels, each with its verification verdict; the roofline's peaks and each
    layer's figures (as ``layers.csv`` writes them); the precision (``precision_json``)."""
    lineage, profile, cats = report.lineage, report.profile, report.categories
    return {
        "model": lineage.build.model,
        "policy": report.policy,
        "summary": {
            "kernel_us": profile.kernel_us,
            "builtin_us": profile.builtin_us,
            "e2e_median_us": profile.e2e_median_us,
            "gap_us": profile.gap_us,
        },
        "categories": {name: us for name, us, _ in cats.rows()},
        "verification": {"suspect_us": cats.suspect_us, "unverified_us": cats.unverified_us},
        "library_us": cats.library_us,
        "inserted_by_layer": dict(cats.inserted_by_layer),
        "layers": [
            {
                "layer": r.layer,
                "us": r.us,
                "percent": r.percent,
                "compute_us": r.compute_us,
                "inserted_us": r.inserted_us,
                "ops": r.ops,
                "kernel_calls": r.kernels,
                "verification": r.status,
            }
            for r in report.layers
        ],
        "modules": [{"module": k, "us": us, "percent": p} for k, us, p in report.modules(depth)],
        "op_types": [
            {"op": r.op, "us": r.us, "percent": r.percent, "count": r.count, "layers": r.layers}
            for r in report.op_types
        ],
        "kernels": [
            {
                "name": r.name,
                "us": r.us,
                "percent": r.percent,
                "count": r.count,
                "device": r.device,
                "argument_shapes": r.shapes,
                "layers": r.layers,
                "verification": r.status,
                "library": r.library,
            }
            for r in report.kernels
        ],
        "roofline": {
            "peaks": None if report.roofline.peaks is None else encode(report.roofline.peaks),
            "layers": [{"layer": r.name, **dict(zip(ROOF_COLUMNS, roof_cells(r)))} for r in report.roofline.layers],
        },
        "precision": precision_json(report.precision),
    }


def precision_json(precision) -> dict:
    """A ``Precision`` as JSON: the build, time by compute dtype, the casts (each billed
    to the layer it serves), each layer's dtypes and, in a float16 build, whether it is
    left in float32 and why; each call site's dtypes."""
    return {
        "build": precision.build,
        "mixed": precision.mixed,
        "by_dtype": [{"dtype": d, "us": us, "percent": p} for d, us, p in precision.by_dtype],
        "cast_us": precision.cast_us,
        "cast_percent": precision.cast_percent,
        "folded_casts": list(precision.folded),
        "casts": [
            {
                "origin": c.origin,
                "layer": c.layer,
                "serves": list(c.serves),
                "inserted_by": c.by,
                "from": c.source,
                "to": c.target,
                "sites": list(c.sites),
                "fused": c.fused,
                "us": c.us,
            }
            for c in precision.casts
        ],
        "layers": [
            {
                "layer": r.layer,
                "precision": r.dtype,
                "compute": list(r.compute),
                "inputs": list(r.inputs),
                "accumulate": list(r.accumulate),
                "us": r.us,
                "cast_us": r.cast_us,
                "float32": r.float32,
                "why": r.why,
            }
            for r in precision.layers
        ],
        "sites": [
            {
                "site": s.label,
                "compute": s.dtypes.compute,
                "accumulate": s.dtypes.accumulate,
                "inputs": list(s.dtypes.inputs),
                "storage": s.dtypes.storage,
                "casts_only": s.casts_only,
            }
            for s in precision.sites.values()
        ],
    }
