"""``verification.csv``: each layer's verdict with its evidence, for review and scripts.

Why a file of its own: a layer billed time while its verdict is suspect or unverified
is the answer a user must not take on trust, and ``layers.csv`` gives only the verdict.
This one gives the reasons the verifier found and each call site's own verdict, so the
unconfirmed time can be sorted, filtered and checked by hand."""

from __future__ import annotations

from ..model.verification import UNVERIFIED
from .export import csv_text

HEADERS = ["layer", "verdict", "time_us", "call_sites", "reasons"]


def verification_csv(report) -> str:
    """One row per layer of the report's entry, in op order: its verdict (``Status``),
    the time billed to it (µs per run), each call site that runs it as ``label:verdict``
    and the verifier's reasons (``; ``-joined). A lineage saved without verification
    gives every layer ``unverified`` with that reason (and one whose verification has
    no layer verdicts, from before layers were verified, says so). Every cell through
    ``safe_text.csv_cell``."""
    lineage = report.lineage
    checks = lineage.verification.by_layer() if lineage.verification is not None else {}
    time = {row.layer: row.us for row in report.layers}
    site_checks = lineage.site_checks()
    rows = []
    for layer in lineage.layers():
        check = checks.get(layer)
        sites = " ".join(f"{s.label}:{site_checks[s.position].status}" for s in lineage.kernels_of(layer))
        reasons = (
            "; ".join(check.reasons)
            if check is not None
            else "the lineage holds no verification"
            if lineage.verification is None
            else "its verification gives layers no verdict (an older lineage)"
        )
        rows.append(
            [layer, check.status if check is not None else UNVERIFIED, f"{time.get(layer, 0.0):.3f}", sites, reasons]
        )
    return csv_text(HEADERS, rows)
