"""A sweep (``analysis.sweep.Sweep``) as files and a terminal table: ``sweep.csv`` (each
layer at each measured point, with its fit there), ``fits.csv`` (each layer's curve,
its error and its time projected to a context), ``sweep.svg`` (a panel per batch size,
time against context on log axes: the measured points and the fitted curves of the
slowest layers), ``report.html`` (the plot and every layer's fit on one page, and the
same for the device bound with ``--device``). Reads only the sweep; names from the model are escaped as text in
every format."""

from __future__ import annotations

import html
import math

from ..analysis.sweep import Sweep
from .export import csv_text
from .safe_text import terminal

SHOWN = 6  # layers drawn in sweep.svg: the slowest at the largest point
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")


def sweep_csv(sweep: Sweep) -> str:
    """layer, context, batch, measured µs, fitted µs: one row per layer and point."""
    rows = [
        [f.layer, c, b, round(us, 3), round(f.at(c, b), 3)]
        for f in (*sweep.fits, sweep.step)
        for c, b, us in _measured(sweep, f.layer)
    ]
    return csv_text(["layer", "context", "batch", "measured_us", "fitted_us"], rows)


def fits_csv(sweep: Sweep, project: int | None) -> str:
    """Each layer's fit: its coefficients, errors and, given ``project`` (a context),
    its time there at each measured batch size."""
    batches = sorted({p.batch for p in sweep.points})
    extra = [f"at_{project}_batch_{b}_us" for b in batches] if project else []
    rows = [
        [
            f.layer,
            round(f.base_us, 4),
            round(f.per_sequence_us, 4),
            round(f.per_cached_token_us, 6),
            round(100 * f.error, 2),
            round(100 * f.worst, 2),
            *([round(f.at(project, b), 3) for b in batches] if project else []),
        ]
        for f in (*sweep.fits, sweep.step)
    ]
    head = ["layer", "base_us", "per_sequence_us", "per_cached_token_us", "error_percent", "worst_percent"]
    return csv_text(head + extra, rows)


def sweep_table(sweep: Sweep, project: int | None, top: int = 10) -> str:
    """The slowest layers' fits as a terminal table, the step's last."""
    batches = sorted({p.batch for p in sweep.points})
    big = max(batches)
    head = f"{'layer':<40} {'base us':>9} {'us/seq':>9} {'us/1k cached':>12} {'fit err':>8}"
    if project:
        head += f" {f'at {project}, B={big} (ms)':>22}"
    lines = [
        f"{sweep.entry}: time = base + B x (per sequence + per cached token x C), fitted to {len(sweep.points)} "
        f"points (C = {', '.join(map(str, sorted({p.context for p in sweep.points})))}; "
        f"B = {', '.join(map(str, batches))})",
        head,
    ]
    for f in (*sweep.fits[:top], sweep.step):
        line = (
            f"{terminal(f.layer)[:40]:<40} {f.base_us:9.4g} {f.per_sequence_us:9.4g} "
            f"{1000 * f.per_cached_token_us:12.4g} {100 * f.error:7.1f}%"
        )
        if project:
            line += f" {f.at(project, big) / 1e3:22.4g}"
        lines.append(line)
    return "\n".join(lines)


def sweep_svg(sweep: Sweep, dots: str = "measured") -> str:
    """The plot: one panel per batch size, each layer of the slowest ``SHOWN`` in its
    colour, its points as dots (``dots`` says what they are) and the fit as a line, both
    axes logarithmic."""
    batches = sorted({p.batch for p in sweep.points})
    contexts = sorted({p.context for p in sweep.points})
    shown = sweep.fits[:SHOWN]
    values = [us for f in shown for _, _, us in _measured(sweep, f.layer) if us > 0]
    values += [f.at(c, b) for f in shown for c in contexts for b in batches if f.at(c, b) > 0]
    if not values:
        values = [1.0]
    low, high = math.log10(min(values)), math.log10(max(values))
    if high - low < 1e-9:
        high = low + 1
    cx = [math.log10(max(c, 1)) for c in contexts]
    c_low, c_high = min(cx), max(cx) if max(cx) > min(cx) else min(cx) + 1
    width, height, pad, legend = 300, 220, 48, 18 * len(shown) + 30
    total_w = pad + len(batches) * (width + pad)
    total_h = height + 2 * pad + legend
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{pad}" y="16" font-size="13">{_text(sweep.entry)}: time per layer against context</text>',
        f'<text x="{pad}" y="30">dots {_text(dots)}, lines fitted; log axes</text>',
    ]

    def place(x0, context, us):
        x = x0 + (math.log10(max(context, 1)) - c_low) / (c_high - c_low) * width
        y = pad + height - (math.log10(us) - low) / (high - low) * height
        return x, y

    for i, batch in enumerate(batches):
        x0 = pad + i * (width + pad)
        out.append(f'<rect x="{x0}" y="{pad}" width="{width}" height="{height}" fill="none" stroke="#999"/>')
        out.append(f'<text x="{x0 + width / 2}" y="{pad - 6}" text-anchor="middle">batch {batch}</text>')
        for c in contexts:
            x, _ = place(x0, c, 10**low)
            out.append(f'<text x="{x:.1f}" y="{pad + height + 14}" text-anchor="middle">{c}</text>')
        for exponent in range(math.ceil(low), math.floor(high) + 1):
            _, y = place(x0, contexts[0], 10**exponent)
            out.append(f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end">{_us(10**exponent)}</text>')
            out.append(f'<line x1="{x0}" x2="{x0 + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        for colour, f in zip(_COLOURS, shown):
            line = [place(x0, c, f.at(c, batch)) for c in contexts if f.at(c, batch) > 0]
            if len(line) > 1:
                points = " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
                out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
            for c, b, us in _measured(sweep, f.layer):
                if b == batch and us > 0:
                    x, y = place(x0, c, us)
                    out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
    out.append(f'<text x="{pad}" y="{pad + height + 32}">context (tokens in each sequence\'s cache)</text>')
    for j, (colour, f) in enumerate(zip(_COLOURS, shown)):
        y = pad + height + 52 + 18 * j
        out.append(f'<rect x="{pad}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{pad + 16}" y="{y}">{_text(f.layer)} (fit error {100 * f.error:.1f}%)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def sweep_html(sweep: Sweep, project: int | None, device: Sweep | None = None) -> str:
    """The sweep's page: for the measured sweep (and ``device``'s bound, labelled an
    estimate) the plot and a table of every layer's fit, its error and, given
    ``project``, its time there at the largest batch. One self-contained file, no
    script; every name from the model is escaped."""
    sections = [_html_section(sweep, project, estimate=False)]
    if device is not None:
        sections.append(_html_section(device, project, estimate=True))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>relaytrace sweep: {_text(sweep.entry)}</title><style>{_STYLE}</style></head>\n<body>\n"
        f"<h1>relaytrace sweep: {_text(sweep.entry)}</h1>\n"
        "<p>Each layer's time per step fitted as base + B &times; (per sequence + per cached token &times; C), "
        "B the sequences served at once, C the tokens in each one's KV cache; fit error: the root mean square "
        "of the relative residuals over the measured points.</p>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


_STYLE = (
    "body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "td,th{border-bottom:1px solid #ddd;padding:2px 8px;text-align:right}td:first-child,th:first-child"
    "{text-align:left}.warn{color:#a60}"
)


def _html_section(sweep: Sweep, project: int | None, estimate: bool) -> str:
    """One sweep's plot and fit table: measured, or each point's bound (``estimate``),
    headed and coloured as such."""
    big = max(p.batch for p in sweep.points)
    head = ["layer", "base µs", "µs per sequence", "µs per 1k cached tokens", "fit error", "worst point"]
    if project:
        head.append(f"at context {project}, batch {big} (ms)")
    rows = []
    for f in (*sweep.fits, sweep.step):
        cells = [
            _text(f.layer),
            f"{f.base_us:.4g}",
            f"{f.per_sequence_us:.4g}",
            f"{1000 * f.per_cached_token_us:.4g}",
            f"{100 * f.error:.1f}%",
            f"{100 * f.worst:.1f}%",
        ]
        if project:
            cells.append(f"{f.at(project, big) / 1e3:.4g}")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    heading = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
    title = (
        '<h2 class="warn">ESTIMATE, not a measurement: each point\'s roofline bound</h2>'
        if estimate
        else "<h2>measured</h2>"
    )
    plot = sweep_svg(sweep, "each point's bound" if estimate else "measured")
    return f"{title}\n{plot}<table>{heading}{''.join(rows)}</table>"


def _measured(sweep: Sweep, layer: str) -> list[tuple[int, int, float]]:
    if layer == sweep.step.layer:
        return [(p.context, p.batch, p.e2e_us) for p in sweep.points]
    return sweep.measured(layer)


def _text(name: str) -> str:
    """A model's name as SVG text: control characters escaped, markup as entities."""
    return html.escape(terminal(name), quote=True)


def _us(us: float) -> str:
    return f"{us / 1e3:g} ms" if us >= 1e3 else f"{us:g} us"
