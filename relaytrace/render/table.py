"""Plain-text tables for terminals: every cell, and every name in a summary line,
through ``safe_text.terminal`` (a control character in a name is shown escaped)."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

from ..model.lineage import Coverage, Lineage
from ..model.numerics import BEYOND
from .safe_text import terminal

WRAP = 60  # a cell with spaces (a list of kernel calls) longer than this is wrapped onto more lines
MIN_WIDTH = 40  # tables are never squeezed narrower than this, whatever the terminal says
KEY_SHARE = 0.4  # the first column (what a row is about) is narrowed last, to no less than this share
RIGID = 20  # a piece no rule breaks (a number, a word between `_`) longer than this may be cut to fit

# A long name breaks after one of these: ``fused_conv2d_add_`` / ``relu#0``,
# ``layers.0.`` / ``mlp``; a '.' only next to a letter (never inside a number).
_BREAK = re.compile(r"(?<=[_/,:])(?=.)|(?<=[A-Za-z]\.)|(?<=\.)(?=[A-Za-z])")


def terminal_width() -> int | None:
    """The width tables are fitted to: ``COLUMNS`` when set (``COLUMNS=250`` for wide
    output into a file), else the terminal's when stdout is one, else None (output piped
    or redirected keeps each name whole on its line, for grep; never below ``MIN_WIDTH``)."""
    env = os.environ.get("COLUMNS", "")
    if env.strip().isdigit() and int(env) > 0:
        return max(int(env), MIN_WIDTH)
    try:
        if sys.stdout.isatty():
            return max(os.get_terminal_size(sys.stdout.fileno()).columns, MIN_WIDTH)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _pieces(word: str) -> list[str]:
    """``word`` cut after each place a long name may break (``_BREAK``)."""
    return [p for p in _BREAK.split(word) if p]


def _break_word(word: str, width: int) -> list[str]:
    """A word longer than ``width`` as lines of at most ``width``, broken after ``_``,
    ``/``, ``,``, ``:`` or a name's ``.`` (a piece longer than ``width`` is cut at it)."""
    lines, line = [], ""
    for piece in _pieces(word):
        while len(piece) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(piece[:width])
            piece = piece[width:]
        if len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
    return lines + [line] if line else lines


def _wrap(text: str, width: int) -> list[str]:
    """``text`` over lines of at most ``width``: broken at spaces, a word longer than
    ``width`` broken by ``_break_word``. Nothing is dropped: the lines joined (a space
    where a line ended at one) are the text."""
    if len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) <= width:
            line += " " + word
            continue
        if line:
            lines.append(line)
        if len(word) <= width:
            line = word
        else:
            *done, line = _break_word(word, width) or [""]
            lines.extend(done)
    return lines + [line] if line or not lines else lines


def _rigid(text: str) -> int:
    """The longest piece of ``text`` that no rule breaks (a number, a word between ``_``)."""
    return max((len(p) for w in text.split(" ") for p in _pieces(w)), default=0)


def column_widths(natural: list[int], least: list[int], budget: int) -> list[int]:
    """Widths for columns of ``natural`` widths that add up to at most ``budget``: the
    widest are narrowed first, each to one cap, none below its ``least``; the cap is
    the largest that fits (columns already narrower keep their width)."""
    if sum(natural) <= budget:
        return list(natural)
    fitted = lambda cap: [max(lo, min(n, cap)) for n, lo in zip(natural, least)]  # noqa: E731
    lo, hi = 0, max(natural)
    while lo < hi:  # the largest cap that fits
        cap = (lo + hi + 1) // 2
        if sum(fitted(cap)) <= budget:
            lo = cap
        else:
            hi = cap - 1
    widths = fitted(lo)
    spare = budget - sum(widths)
    for i in sorted(range(len(widths)), key=lambda i: -natural[i]):  # what is left, to the widest cut
        if spare <= 0:
            break
        more = min(spare, natural[i] - widths[i])
        widths[i] += max(more, 0)
        spare -= max(more, 0)
    return widths


def format_table(headers, rows, wrap: int = WRAP, width: int | None = None) -> str:
    """Columns aligned, the table fitted to ``width`` (default ``terminal_width()``; None:
    as wide as its cells): a cell with spaces over ``wrap`` characters (a list of kernel
    calls) is broken at spaces onto the row's next lines; when the table is still wider
    than ``width``, the widest columns are narrowed (``column_widths``; the first, what a
    row is about, keeps up to ``KEY_SHARE`` of the width, a layer's name whole) and their cells
    wrapped, a long name broken after ``_``, ``.``, ``/`` (``fused_conv2d_add_`` /
    ``relu#0``), never cut short: every character stays. Headers wrap at spaces alike.
    Each cell and header is ``safe_text.terminal``'s: a tab or line break in a name is
    shown escaped, not taken for space."""
    width = terminal_width() if width is None else width
    heads = [terminal(str(h)) for h in headers]
    texts = [[terminal(str(c)) for c in r] for r in rows]
    columns = range(len(heads))
    natural = [
        max([len(h)] + [len(r[i]) if " " not in r[i] else min(len(r[i]), max(wrap, _rigid(r[i]))) for r in texts])
        for i, h in enumerate(heads)
    ]
    least = [
        max([min(len(h), max(_rigid(h), 6))] + [min(len(r[i]), max(min(_rigid(r[i]), RIGID), 8)) for r in texts])
        for i, h in enumerate(heads)
    ]
    budget = None if width is None else width - 2 * (len(heads) - 1)
    if budget is not None and heads:  # the row's name (a layer, a kernel) keeps up to KEY_SHARE of the width
        least[0] = max(least[0], min(natural[0], int(budget * KEY_SHARE), budget - sum(least[1:])))
    least = [min(lo, n) for lo, n in zip(least, natural)]
    widths = natural if budget is None else column_widths(natural, least, budget)
    head_lines = [_wrap(h, w) for h, w in zip(heads, widths)]
    cells = [[_wrap(r[i], widths[i]) for i in columns] for r in texts]
    widths = [max([w, *map(len, head_lines[i])]) for i, w in enumerate(widths)]

    def line(parts):
        return "  ".join(c.ljust(w) for c, w in zip(parts, widths)).rstrip()

    def block(r):
        return [line([c[k] if k < len(c) else "" for c in r]) for k in range(max(len(c) for c in r))]

    out = block(head_lines) if heads else [""]
    out.append(line(["-" * w for w in widths]))
    for r in cells:
        out.extend(block(r))
    return "\n".join(out)


def _names(names, limit: int | None = None) -> str:
    """The first ``limit`` names (all without one), each as ``terminal`` shows it,
    comma-separated."""
    return ", ".join(terminal(n) for n in list(names)[:limit])


def coverage_summary(lineage: Lineage, cov: Coverage | None = None) -> str:
    """The lineage's coverage (``cov``, a report's; default: the lineage's own) and
    verification, one fact a line; each name in it as ``terminal`` shows it."""
    cov = cov if cov is not None else lineage.coverage()
    lines = [
        f"kernel call sites: {cov.call_sites} ({cov.attributed_sites} attributed, {100 * cov.site_fraction:.0f}%)"
        f" of {len(lineage.kernels)} kernels",
        f"model ops: {cov.origins} ({cov.in_kernels} in kernels, {cov.in_builtins} in VM builtins, "
        f"{cov.eliminated} eliminated by passes)",
    ]
    if lineage.inserted():
        lines.append(f"inserted by passes: {len(lineage.inserted())} ops")
    if len(lineage.build.entries) > 1 or lineage.subfunctions:
        lines.append(
            f"entry functions: {_names(lineage.build.entries)}"
            + (f"; Relax subfunctions called: {_names(lineage.subfunctions)}" if lineage.subfunctions else "")
        )
    build = lineage.build
    if build.kv_cache is not None:
        lines.append(
            f"KV cache made by {terminal(build.kv_cache.entry)}: {len(build.kv_cache.kernels)} kernels that "
            "run inside its builtins, not at call sites of their own; a profile of an entry that takes it "
            "times them and bills each to the attention layer whose builtin ran it"
        )
    if build.tuned or build.options.database:
        lines.append(f"tuned schedules (MetaSchedule database): {len(build.tuned)} of {len(lineage.kernels)} kernels")
    lines.append(f"verified against the compiled IR: {cov.verified_sites} of {cov.call_sites} call sites")
    if cov.layers:
        verified = cov.layers - len(cov.suspect_layers) - len(cov.unverified_layers)
        lines.append(f"layers verified against the frontend's program: {verified} of {cov.layers}")
    by_layer = lineage.verification.by_layer() if lineage.verification is not None else {}
    for word, layers in (("SUSPECT LAYERS", cov.suspect_layers), ("UNVERIFIED LAYERS", cov.unverified_layers)):
        if layers:
            lines.append(
                f"{word}: {len(layers)} ({_names(layers, 5)}{', ...' if len(layers) > 5 else ''}); "
                f"{terminal(layers[0])}: {terminal(by_layer[layers[0]].reasons[0])}"
            )
    checks = lineage.site_checks()
    by_label = {site.label: checks[site.position] for site in lineage.call_sites}
    for word, labels in (("SUSPECT", cov.suspect), ("UNVERIFIED", cov.unverified)):
        if labels:
            first = by_label[labels[0]]
            lines.append(
                f"{word}: {len(labels)} call sites ({_names(labels, 5)}"
                f"{', ...' if len(labels) > 5 else ''}); {terminal(labels[0])}: {terminal(first.reasons[0])}"
            )
    for problem in cov.problems[:5]:
        lines.append(f"SUSPECT LINEAGE: {terminal(problem)}")
    if cov.unresolved:
        lines.append(f"UNRESOLVED: {len(cov.unresolved)} ops no rule explains: {_names(cov.unresolved, 5)}")
    if cov.unaccounted:
        lines.append(f"UNACCOUNTED: {_names(cov.unaccounted, 5)}")
    for reason in lineage.journal.degraded:
        lines.append(f"DEGRADED: {terminal(reason)}")
    return "\n".join(lines)


def _ms(us: float) -> str:
    return f"{us / 1e3:.3f}"


def layer_table(rows, top: int | None = None) -> str:
    """The terminal table of ``LayerRow``s (the ``top`` slowest, or all)."""
    shown = rows[:top] if top else rows
    return format_table(
        ["layer", "time (ms)", "%", "inserted (ms)", "ops", "kernel calls", "verification"],
        [
            [
                r.layer,
                _ms(r.us),
                f"{r.percent:.2f}",
                _ms(r.inserted_us),
                ", ".join(r.ops),
                ", ".join(r.kernels),
                r.status,
            ]
            for r in shown
        ],
    )


def op_type_table(rows) -> str:
    """The terminal table of ``OpTypeRow``s."""
    return format_table(
        ["op type", "time (ms)", "%", "count", "layers"],
        [[r.op, _ms(r.us), f"{r.percent:.2f}", r.count, r.layers] for r in rows],
    )


def kernel_table(rows) -> str:
    """The columns of TVM's old profiler report, plus the layers each kernel runs; a
    library call's name says what runs it (``name [library cublas]``)."""
    return format_table(
        ["Name", "Duration (us)", "Percent", "Count", "Device", "Argument Shapes", "Layers"],
        [
            [
                r.name + (f" [library {r.library}]" if r.library else ""),
                f"{r.us:.2f}",
                f"{r.percent:.2f}",
                r.count,
                r.device,
                r.shapes,
                ", ".join(r.layers),
            ]
            for r in rows
        ],
    )


def category_table(categories) -> str:
    """The terminal table of a ``Categories``: where the end-to-end time went."""
    rows = [[name, _ms(us), f"{pct:.2f}"] for name, us, pct in categories.rows()]
    rows.append(["end-to-end (median)", _ms(categories.e2e_us), "100.00"])
    text = format_table(["category", "time (ms)", "% of end-to-end"], rows)
    for word, us in (("SUSPECT", categories.suspect_us), ("UNVERIFIED", categories.unverified_us)):
        if us:
            text += (
                f"\n{word}: {_ms(us)} ms ({100 * us / (categories.e2e_us or 1):.1f}%) ran at call sites "
                f"whose attribution is {word.lower()}"
            )
    if categories.library_us:
        us = categories.library_us
        text += (
            f"\nlibrary calls: {_ms(us)} ms ({100 * us / (categories.e2e_us or 1):.1f}%) of the compute ran in "
            "external functions (offloaded groups, registered functions), not in kernels TVM compiled"
        )
    if categories.inserted_by_layer:
        caused = ", ".join(f"{terminal(layer)} ({_ms(us)} ms)" for layer, us in categories.inserted_by_layer[:8])
        text += f"\ninserted layout transforms/casts are caused by: {caused}"
    return text


def roofline_rows(roofs, top: int | None = None, first: str = "layer") -> tuple[list[str], list[list[str]]]:
    """Headers and one row per ``roofline.Roof`` (the ``top`` first, or all), as the
    terminal shows them (``roofline_summary``)."""
    headers = [
        first,
        "time (ms)",
        "above bound (ms)",
        "efficiency",
        "bound by",
        "GFLOP",
        "useful GFLOP",
        "GFLOP/s",
        "model GFLOP/s",
        "GB/s",
        "FLOP/byte",
    ]
    shown = roofs[:top] if top else roofs
    rows = [
        [
            r.name,
            figure(r.us / 1e3, ".4g"),
            figure(None if r.wasted_us is None else r.wasted_us / 1e3, ".4g"),
            figure(None if r.efficiency is None else 100 * r.efficiency, ".1f") + ("%" if r.efficiency else ""),
            r.bound_by or "",
            figure(None if r.flops is None else r.flops / 1e9),
            figure(None if r.useful is None else r.useful / 1e9) + ("*" if r.excess else ""),
            figure(r.gflops_s),
            figure(r.model_gflops_s),
            figure(r.gbytes_s),
            figure(r.intensity),
        ]
        for r in shown
    ]
    return headers, rows


ESTIMATE_COLUMNS = (0, 1, 4, 5, 6, 10)  # layer, time (the bound), bound by, GFLOP, useful GFLOP, FLOP/byte
MEASURED_COLUMNS = tuple(range(10))  # all but FLOP/byte (in layers.csv and the report): the table fits 100 columns


def roofline_summary(roofline, top: int = 10, estimate: bool = False) -> str:
    """The peaks used and the ``top`` layers by time above the roofline's bound (by
    time without peaks; for an ``estimate``, by the bound, which is its time), with any
    site above a ceiling said."""
    peaks = roofline.peaks
    head = (
        terminal(peaks.line())
        if peaks is not None
        else "no peak rates for this device (give --peak-gflops and --peak-gbps, or --device NAME): rates without a "
        "bound"
    )
    headers, rows = roofline_rows(roofline.layers, top)
    if estimate:
        headers, rows = (
            ["layer", "bound (ms)", "bound by", "GFLOP", "useful GFLOP", "FLOP/byte", "MB moved"],
            [
                [*(row[i] for i in ESTIMATE_COLUMNS), figure(None if r.bytes is None else r.bytes / 1e6)]
                for row, r in zip(rows, roofline.layers)
            ],
        )
        title = f"top {top} layers by their lower bound"
    else:
        headers, rows = [headers[i] for i in MEASURED_COLUMNS], [[row[i] for i in MEASURED_COLUMNS] for row in rows]
        title = f"top {top} layers by time above the roofline bound" if peaks else f"top {top} layers' rates"
    title += (
        f" (time billed by the {roofline.policy} policy; GFLOP: executed, as the TIR counts them; useful "
        "GFLOP: what each layer's own ops ask; model GFLOP/s: useful over time):"
    )
    lines = [head, title, format_table(headers, rows)]
    beyond = [r for r in roofline.layers if r.excess]
    if beyond:
        lines.append(
            f"* EXECUTED BEYOND USEFUL: {len(beyond)} layer(s); "
            + "; ".join(
                f"{terminal(r.name)} executes {times(r.executed_ratio)} the FLOPs it asks ({', '.join(r.excess)})"
                for r in beyond[:5]
            )
        )
    sites = len(roofline.sites)
    if roofline.counted < sites:
        lines.append(f"work counted at {roofline.counted} of {sites} call sites (the others: no FLOPs, no bound)")
    if roofline.over_ceiling and not estimate:
        label, why = roofline.over_ceiling[0]
        lines.append(f"ABOVE A CEILING: {len(roofline.over_ceiling)} call site(s); {terminal(label)}: {why}")
    heavy = [
        r
        for r in roofline.layers[:top]
        if r.transcendentals and r.flops is not None and r.transcendentals * 4 >= r.flops
    ]
    if heavy:
        lines.append(
            "TRANSCENDENTAL-HEAVY (their exp/erf/sqrt/tanh calls are not in the bound, which is then "
            "low): " + ", ".join(f"{terminal(r.name)} ({r.transcendentals:,.0f} calls)" for r in heavy[:5])
        )
    if peaks is not None and peaks.native_gain is not None:
        lines.append(
            f"GENERIC CODE: the target names no CPU, so the ceiling above is generic code's; the same FMA "
            f"kernel built for this CPU ({terminal(peaks.native_mcpu or 'its mcpu')}) reaches "
            f"{peaks.native_gflops:,.1f} GFLOP/s ({peaks.native_gain:.1f}x). A "
            "kernel far below its ceiling is held back by its schedule, not the instruction set: building "
            f'with --target \'{{"kind": "llvm", "mcpu": "{terminal(peaks.native_mcpu or "MCPU")}"}}\' '
            "raises the ceiling, and may not speed up untuned kernels (measure it; relaytrace tasks --tune)"
        )
    return "\n".join(lines)


def times(ratio: float | None) -> str:
    """A ratio of executed to useful FLOPs as ``4.00x``; ``unknown`` where there is none
    (useful FLOPs of 0 or not counted)."""
    return "unknown" if ratio is None else f"{ratio:.2f}x"


def figure(value, digits: str = ".3g") -> str:
    """A comparison's figure, ``n/a`` where it has none (a relative error against an
    all-zero reference, a cosine of no finite element)."""
    return "n/a" if value is None else format(value, digits)


def comparison_rows(comparison) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per layer of a ``Comparison`` in run order: the terminal
    table and the CSV show the same cells."""
    headers = [
        "layer",
        "status",
        "max abs",
        "max rel",
        "tol ratio",
        "cosine",
        "NaN/Inf",
        "shape",
        "call site",
        "read",
        "note",
    ]
    rows = [
        [
            e.layer,
            e.status.upper() if e.status == BEYOND else e.status,
            figure(e.max_abs),
            figure(e.max_rel),
            figure(e.tolerance_ratio),
            figure(e.cosine, ".6f"),
            f"{e.nan}/{e.inf}" + (f" (ref {e.reference_nan})" if e.reference_nan else "") if e.compared else "",
            "x".join(map(str, e.shape)),
            e.site,
            e.route or "",
            e.note,
        ]
        for e in comparison.layers
    ]
    return headers, rows


def comparison_table(comparison) -> str:
    """The terminal table of a ``Comparison``, one row per layer in run order."""
    return format_table(*comparison_rows(comparison))


def precision_summary(precision, top: int = 5) -> str:
    """A build's precision in a few lines (for one that is not all float32): time by
    compute dtype, the casts' time and share and who inserted them, and the ``top``
    layers left in float32 by time, each with why."""
    shares = ", ".join(f"{terminal(d)} {us / 1e3:,.3f} ms ({p:.2f}%)" for d, us, p in precision.by_dtype)
    by = ", ".join(
        f"{n} by {terminal(who)}"
        for who, n in sorted(Counter(c.by for c in precision.casts).items(), key=lambda x: -x[1])
    )
    lines = [
        f"precision: {terminal(precision.build)}; time by compute dtype: {shares or 'none'}",
        f"casts: {len(precision.casts)} ({by or 'none'}), {precision.cast_us / 1e3:,.3f} ms, "
        f"{precision.cast_percent:.2f}% of kernel time"
        + (f"; {len(precision.folded)} more folded away at build time" if precision.folded else ""),
    ]
    kept = precision.float32_layers
    if kept:
        lines.append(f"left in float32: {len(kept)} layer(s), {sum(r.us for r in kept) / 1e3:,.3f} ms; top {top}:")
        lines.append(
            format_table(
                ["layer", "time (ms)", "why"], [[r.layer, f"{r.us / 1e3:.3f}", r.why] for r in kept[:top]], wrap=100
            )
        )
    return "\n".join(lines)


LONG_CALL_US = 50.0  # a shorter call's time is mostly the VM's call overhead, which the stamps leave out


def inside_summary(rows, top: int = 10) -> str:
    """What ``profile --inside`` measured inside the fused kernels (``analysis.inside``'s
    rows): how many sites and ops, what the stamps cost, and the ``top`` ops whose
    measured share differs from the modelled one beyond the scatter, the largest
    difference first (or a line saying none does)."""
    long = {r.site: r.overhead_percent for r in rows if r.plain_us >= LONG_CALL_US and r.overhead_percent is not None}
    costs = sorted(long.values())
    cost = (
        f"; on the {len(costs)} call(s) over {LONG_CALL_US:g} us the copy's calls took {costs[0]:+.1f}% to "
        f"{costs[-1]:+.1f}% of the plain build's (the copy is another binary: its shares are used, never its times)"
        if costs
        else ""
    )
    apart = {r.site for r in rows if r.parts}
    lines = [
        f"inside the fused kernels (timed by an instrumented copy, --inside): {len(apart)} call site(s) timed op "
        f"by op{cost}"
    ]
    one = sorted({r.site for r in rows if not r.parts})
    if one:
        shown = ", ".join(terminal(s) for s in one[:6])
        lines.append(f"{len(one)} call site(s) of several ops in one loop nest, billed as modelled: {shown}")
    odd = sorted((r for r in rows if r.differs), key=lambda r: -abs(r.measured_percent - r.modelled_percent))
    if not odd:
        lines.append(
            "the modelled split (--policy split) agrees with the measured one within the scatter on every part"
        )
        return "\n".join(lines)
    lines.append(f"ops the modelled split misjudges ({len(odd)}; --policy measured bills by the measured share):")
    lines.append(
        format_table(
            ["site", "ops", "layers", "measured %", "modelled %", "median us"],
            [
                [
                    r.site,
                    " ".join(r.ops),
                    " ".join(r.layers),
                    f"{r.measured_percent:.1f}",
                    f"{r.modelled_percent:.1f}",
                    f"{r.us:.1f}",
                ]
                for r in odd[:top]
            ],
        )
    )
    return "\n".join(lines)
