"""Profiler reports of the Relay era, as printed and pasted.

- profiler_vm / debug_executor ``Report`` tables: a header with ``Name`` and
  ``Duration (us)``, columns in any order, optional columns empty, numbers with any
  digit grouping (``11,64,595.59``), closing ``Sum`` / ``Total`` lines. Several may
  stand in one paste.
- the older debug-runtime table: ``Node Name Ops Time(us) Time(%) Shape Inputs Outputs``.
"""

from __future__ import annotations

import re

from attrs import define, field

from .common import Issue, Shape, number, shape

_CELL = re.compile(r"\S+(?: \S+)*")
_OLD_ROW = re.compile(r"^(\S+)\s+(\S+)\s+([\d.,]+)\s+([\d.,]+)\s+(\([\d,\s]*\))\s+(\d+)\s+(\d+)\s*$")


@define(frozen=True)
class ReportRow:
    """One kernel of a profiler report: its name, the fused function it runs, its
    duration, percent (None when not printed), call count, output and argument shapes,
    its cells by column, and its line."""

    name: str  # the kernel (node) name
    function: str  # the fused function it runs (debug runtime "Ops"; else the name)
    duration_us: float
    percent: float | None
    count: int
    out_shape: Shape = ()
    arg_shapes: tuple[Shape, ...] = ()
    columns: dict = field(factory=dict, eq=False)
    line: int = 0


@define(frozen=True)
class Report:
    """One profiler table as read: its kind, header line and rows, the ``Sum`` and
    ``Total`` it printed (None when absent), and the issues met reading it."""

    kind: str  # "table" (profiler_vm / debug_executor) | "debug_runtime"
    line: int  # where its header stands
    rows: tuple[ReportRow, ...]
    sum_us: float | None
    total_us: float | None
    issues: tuple[Issue, ...] = ()

    @property
    def kernel_us(self) -> float:
        """The sum of the rows' durations, in microseconds."""
        return sum(r.duration_us for r in self.rows)


def parse_reports(text: str, source: str = "report") -> tuple[tuple[Report, ...], tuple[Issue, ...]]:
    """Every profiler table in a paste (profiler_vm / debug_executor tables, debug-runtime
    tables), and the issues met reading them; one issue when the text holds none."""
    lines = text.splitlines()
    reports, issues = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "Name" in line and "Duration (us)" in line:
            report, i = _table(lines, i, source)
        elif line.strip().startswith("Node Name") and "Time(us)" in line:
            report, i = _old_table(lines, i, source)
        else:
            i += 1
            continue
        reports.append(report)
        issues.extend(report.issues)
    if not reports:
        issues.append(
            Issue(
                source, 0, "no profiler report found (no 'Name ... Duration (us)' or 'Node Name ... Time(us)' header)"
            )
        )
    return tuple(reports), tuple(issues)


def _cells(line: str):
    return [(m.group(0), m.start(), m.end()) for m in _CELL.finditer(line)]


def _column(cell, columns) -> tuple[str, bool]:
    """The header a cell stands under (most overlap, else the nearest), and whether it
    overlaps that header at all."""
    _, start, end = cell
    best = max(columns, key=lambda c: (min(end, c[2]) - max(start, c[1]), -abs(start - c[1])))
    return best[0], min(end, best[2]) > max(start, best[1])


def _continues(lines, i: int) -> bool:
    """Whether the table goes on after the blank line at ``i``: the next text is a row
    or a Sum/Total line of it, not a new table or prose."""
    nxt = next((line for line in lines[i + 1 : i + 4] if line.strip()), "")
    cells = _cells(nxt)
    if len(cells) < 2 or "Duration (us)" in nxt:
        return False
    try:
        number(cells[1][0])
    except ValueError:
        return False
    return True


def _table(lines, at, source):
    columns = _cells(lines[at])
    rows: list[ReportRow] = []
    issues: list[Issue] = []
    sum_us = total_us = None
    if "Duration (us)" not in [c[0] for c in columns[1:]]:
        end = next((j for j in range(at + 1, len(lines)) if not lines[j].strip()), len(lines))
        issues.append(
            Issue(
                source,
                at + 1,
                "the report's columns are separated by single spaces (collapsed by a "
                "paste?): re-paste it with its spacing; its table was not read",
            )
        )
        return Report("table", at + 1, (), None, None, tuple(issues)), end
    i = at + 1
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            if rows and not _continues(lines, i):
                i += 1
                break
            if rows:
                issues.append(Issue(source, i + 1, "blank line inside the table; reading on"))
            i += 1
            continue
        if stripped.startswith("---"):
            i += 1
            continue
        first, value, found = _row(line, columns, source, i + 1)
        issues += found
        i += 1
        if first == "Sum":
            sum_us = value
        elif first == "Total":
            total_us = value
            break
        elif value is not None:
            rows.append(value)
    if total_us is None:
        issues.append(Issue(source, i, f"report at line {at + 1} has no Total line (truncated paste?)"))
    return Report("table", at + 1, tuple(rows), sum_us, total_us, tuple(issues)), i


def _row(line: str, columns, source, lineno: int):
    """One line of a table: (its first cell, its ``ReportRow`` (for a Sum or Total line,
    its duration) or None where it cannot be read, the issues it raised)."""
    stripped = line.strip()
    cells = _cells(line)
    first = cells[0][0]
    total = first in ("Sum", "Total")
    if " " in first and not total:  # a kernel's name has no space: columns ran together
        return (
            first,
            None,
            [
                Issue(
                    source,
                    lineno,
                    f"row {stripped[:70]!r} has a name with a space ({first!r}): "
                    "its columns ran together (a misaligned paste?); row not read",
                )
            ],
        )
    placed = [(c, *_column(c, columns[1:])) for c in cells[1:]]
    values = {name: c[0] for c, name, _ in placed}
    astray = [c[0] for c, _, overlaps in placed if not overlaps]
    issues = []
    if astray and not total:
        issues.append(
            Issue(
                source, lineno, f"cell {astray[0]!r} stands under no column (a misaligned row?): read under the nearest"
            )
        )
    if total:
        try:
            return first, number(values.get("Duration (us)", "nan")), issues
        except ValueError:
            return first, None, [*issues, Issue(source, lineno, f"{first} line without a duration")]
    if "Duration (us)" not in values:
        return first, None, [*issues, Issue(source, lineno, f"row without a duration, skipped: {stripped[:70]!r}")]
    try:
        duration = number(values["Duration (us)"])
        percent = number(values["Percent"]) if "Percent" in values else None
        count = int(number(values.get("Count", "1")))
    except ValueError as exc:
        return first, None, [*issues, Issue(source, lineno, f"unreadable number ({exc}), row skipped")]
    shapes = tuple(shape(s) for s in re.findall(r"\[([\d,\s]*)\]", values.get("Argument Shapes", "")))
    row = ReportRow(
        first, _function(first), duration, percent, count, shapes[-1] if shapes else (), shapes, values, lineno
    )
    return first, row, issues


def _function(name: str) -> str:
    """Graph-executor kernels carry a ``tvmgen_default_`` prefix; the VM's do not."""
    return name[len("tvmgen_default_") :] if name.startswith("tvmgen_default_") else name


def _old_table(lines, at, source):
    rows: list[ReportRow] = []
    issues: list[Issue] = []
    total_us = None
    i = at + 1
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("---"):
            i += 1
            if rows and not stripped:
                break
            continue
        if stripped.startswith("Total_time"):
            parts = stripped.split()
            try:
                total_us = number(parts[2])
            except (IndexError, ValueError):
                issues.append(Issue(source, i + 1, "Total_time line without a time"))
            i += 1
            break
        m = _OLD_ROW.match(stripped)
        if not m:
            if stripped.startswith("fused_") or stripped.startswith("tvmgen_"):
                issues.append(Issue(source, i + 1, f"unreadable debug-runtime row: {stripped[:70]!r}"))
                i += 1
                continue
            break  # the table ended
        name, ops, t, pct, out, _, _ = m.groups()
        try:
            rows.append(ReportRow(name, ops, number(t), number(pct), 1, shape(out), (), {}, i + 1))
        except ValueError as exc:
            issues.append(Issue(source, i + 1, f"unreadable number ({exc}), row skipped"))
        i += 1
    if total_us is None:
        issues.append(Issue(source, i, f"debug-runtime table at line {at + 1} has no Total_time line"))
    return Report("debug_runtime", at + 1, tuple(rows), None, total_us, tuple(issues)), i
