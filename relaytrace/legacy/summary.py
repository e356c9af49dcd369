"""Answers from matched legacy artifacts: per-layer time, op-type shares, task map."""

from __future__ import annotations

from collections import defaultdict

from ..render.table import format_table
from .match import fused_ops


def layer_times(matches) -> dict[str, float]:
    """Decided rows' time per Relay op chain; a row that ran several layers (Count > 1)
    is split evenly over them."""
    out: dict[str, float] = defaultdict(float)
    for m in matches:
        for chain in m.matched:
            out[chain.label] += m.row.duration_us / len(m.matched)
    return dict(out)


def op_type_shares(report) -> list[tuple[str, float, float]]:
    """(op, microseconds, percent of the total) per op type of a report, slowest first:
    a row counts under the first compute op of its fused name (``layout_transform``
    when it has none)."""
    total = report.total_us or report.kernel_us or 1.0
    sums: dict[str, float] = defaultdict(float)
    for row in report.rows:
        ops = fused_ops(row.function)
        compute = [o for o in ops if o != "layout_transform"]
        sums[compute[0] if compute else "layout_transform"] += row.duration_us
    return sorted(((op, us, 100.0 * us / total) for op, us in sums.items()), key=lambda x: -x[1])


def matches_table(matches) -> str:
    """Row matches as a table: kernel, time, count, the Relay ops it ran (or its
    candidates and the likely one), and the basis of the match."""
    rows = []
    for m in matches:
        if m.matched:
            what = ", ".join(c.label for c in m.matched)
        elif m.candidates:
            what = "one of: " + " | ".join(c.label for c in m.candidates)
            if m.likely is not None:
                what += f"  (likely {m.likely.label}: time ~ FLOPs)"
        else:
            what = "-"
        rows.append([m.row.name, f"{m.row.duration_us:.2f}", m.row.count, what, m.basis])
    return format_table(["kernel", "time (us)", "count", "Relay ops", "basis"], rows)


def tasks_table(task_matches) -> str:
    """Task matches as a table: task, workload shapes, how many layers it serves, and
    their Relay ops."""
    return format_table(
        ["task", "workload (data, weight)", "repeats", "Relay ops"],
        [
            [
                f"{t.task.index} {t.task.name}",
                f"{list(t.task.workload.data)} x {list(t.task.workload.weight)}",
                len(t.chains),
                ", ".join(c.label for c in t.chains) or "no op fits",
            ]
            for t in task_matches
        ],
    )


def log_table(log_matches, workloads) -> str:
    """Log matches as a table: line, workload, listed position, repeats, and the cost and
    the cost times repeats in milliseconds (``failed`` for a failed measurement)."""
    rows = []
    for m in log_matches:
        w = m.record.workload
        listed = f"#{m.workload_index}" if m.workload_index is not None else "not listed"
        cost = "failed" if m.record.cost_s is None else f"{m.record.cost_s * 1e3:.3f}"
        weighted = "-" if m.record.cost_s is None else f"{m.record.cost_s * m.repeats * 1e3:.3f}"
        rows.append(
            [
                m.record.line,
                f"{list(w.data)} x {list(w.weight)} s{list(w.strides)} p{list(w.padding)}",
                listed,
                m.repeats,
                cost,
                weighted,
            ]
        )
    return format_table(["log line", "workload", "listed as", "repeats", "cost (ms)", "x repeats (ms)"], rows)
