"""A ``Memory`` (``analysis.memory``) as the terminal shows it and as ``memory.csv``.

Both only read the record: the peak, where it is, what is live there and whose it is,
the layers by bytes at the peak, and each value's lifetime. Names go through
``safe_text`` (``terminal``, ``csv_cell`` in ``export.csv_text``)."""

from __future__ import annotations

from ..analysis.memory import TVM_SAYS, Verdict
from .export import csv_text
from .safe_text import terminal
from .table import format_table

CSV_HEADERS = [
    "kind",
    "name",
    "bytes",
    "shape",
    "dtype",
    "site",
    "layer",
    "first_step",
    "last_step",
    "first_site",
    "last_site",
    "live_at_peak",
]


def size(n: float) -> str:
    """Bytes in the unit a person reads (``24.0 KiB``, ``1.50 GiB``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}" if n / scale < 100 else f"{n / scale:.0f} {unit}"
    return f"{n:.0f} B"


def formula(poly) -> str:
    """A size formula as text (``1024*seq_len + 65536`` bytes)."""
    terms = []
    for coef, atoms in sorted(poly, key=lambda t: (-len(t[1]), t[1])):
        factors = ([str(coef)] if coef != 1 or not atoms else []) + list(atoms)
        terms.append("*".join(factors))
    return " + ".join(terms).replace("+ -", "- ") or "0"


def memory_line(memory) -> str:
    """One line: the peak, where, the plan's total, weights, and whether TVM's figure agrees."""
    if memory is None:
        return "memory: the lineage has no memory plan (saved before relaytrace read plans, or no VM build)"
    if not memory.known:
        return f"memory ({terminal(memory.entry)}): not known at these sizes: {memory.why}"
    tvm = next((c.verdict for c in memory.checks if c.against == TVM_SAYS), None)
    agrees = (
        "; TVM's own estimate agrees"
        if tvm == Verdict.AGREES
        else "; TVM's own estimate differs (relaytrace memory DIR)"
        if tvm == Verdict.DIFFERS
        else ""
    )
    where = f" at {terminal(memory.peak_site)}" if memory.peak_site else ""
    cache = (
        f"; KV cache {size(memory.kv_cache)} ({len(memory.kv_pages)} page tensors of "
        f"{'x'.join(map(str, memory.kv_pages[0][0]))} {memory.kv_pages[0][1]}, as the run allocated them)"
        if memory.kv_pages
        else ""
    )
    return (
        f"memory ({terminal(memory.entry)}): peak {size(memory.peak)} of activations{where}; "
        f"{memory.blocks} planned blocks, {size(memory.planned)} in all; weights {size(memory.weights)}, "
        f"inputs {size(memory.inputs)}{cache}{agrees}"
    )


def memory_summary(memory, top: int = 10) -> str:
    """``relaytrace memory``'s text: the line, the peak's formula at symbolic sizes,
    the values live at the peak, the ``top`` layers by bytes at the peak, the checks and
    notes."""
    lines = [memory_line(memory)]
    if memory is None or not memory.known:
        return "\n".join(lines)
    if memory.dims:
        dims = ", ".join(f"{terminal(k)}={v}" for k, v in sorted(memory.dims.items()))
        lines.append(f"at {dims}; the peak as a formula: {terminal(formula(memory.peak_formula))} bytes")
    if memory.at_peak:
        lines += [
            "",
            f"live at the peak ({terminal(memory.peak_site)}, step {memory.peak_step + 1} of {len(memory.steps)}):",
        ]
        rows = [
            [v.block, size(v.bytes), _value(v), v.layer, v.site + (" (returned)" if v.returned else ""), v.sized_for]
            for v in memory.at_peak[:top]
        ]
        lines.append(format_table(["block", "bytes", "value", "layer", "written by", "block sized for"], rows))
        if len(memory.at_peak) > top:
            lines.append(f"... and {len(memory.at_peak) - top} more")
        idle = [v for v in memory.at_peak if v.idle]
        if idle:
            lines.append(
                f"{len(idle)} block(s), {size(sum(v.bytes for v in idle))}, are idle at the peak: the plan "
                "keeps a block from its first value to its last, and these wait for their next"
            )
    if memory.layers:
        lines += ["", f"top {top} layers by memory at the peak:"]
        rows = [[r.layer, size(r.at_peak), size(r.activations), size(r.weights)] for r in memory.layers[:top]]
        lines.append(format_table(["layer", "at peak", "written", "weights"], rows))
    lines += ["", *(c.text for c in memory.checks), *memory.notes]
    return "\n".join(line for line in lines).rstrip()


def _value(v) -> str:
    """A live value as the table shows it: shape, dtype and its own bytes, or what an
    idle block is kept for."""
    shape = "x".join(map(str, v.shape)) + f" {v.dtype}".rstrip()
    return f"idle, kept for {shape}" if v.idle else f"{shape} ({size(v.value_bytes)})"


def memory_csv(report) -> str:
    """``memory.csv``: one row per value the plan places (kind ``activation``: its block,
    the block's bytes, shape, dtype, the site writing it and its layer, the steps and
    sites of its first write and last read, whether it is live at the peak), per weight
    (kind ``weight``: bytes, the first site reading it and its layer) and per input.
    Empty but for the headers when the report has no memory at known sizes."""
    memory = report.memory
    if memory is None or not memory.known:
        return csv_text(CSV_HEADERS, [])

    def site(step: int) -> str:
        return memory.steps[step] if 0 <= step < len(memory.steps) else ""

    rows = [
        [
            v.kind,
            v.name,
            f"{v.bytes:.0f}",
            "x".join(map(str, v.shape)),
            v.dtype,
            v.site,
            v.layer,
            v.first if v.first >= 0 else "",
            v.last if v.last >= 0 else "",
            site(v.first),
            site(v.last),
            "yes" if v.at_peak else "",
        ]
        for v in memory.lifetimes
    ]
    return csv_text(CSV_HEADERS, rows)
