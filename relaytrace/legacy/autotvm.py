"""AutoTVM task listings and tuning logs (JSON lines), as pasted.

A task listing (as AutoTVM's ``extract_from_program`` loop prints it) shows
``[Kernel 3/11] conv2d_NCHWc.x86 - Search space size: 800`` followed by the data and
weight tensors. A tuning-log record is one JSON object per line: ``{"i": [target,
task, args, kwargs, workload, config], "r": [costs, error_no, all_cost, timestamp],
"v": version}``; forum pastes turn its quotes
typographic, which is undone first.
"""

from __future__ import annotations

import json
import math
import re

from attrs import define

from .common import Issue, Shape, normalise_quotes, shape

_TASK = re.compile(r"^\[Kernel\s+(\d+)/(\d+)\]\s+(\S+)(?:\s+-\s+Search space size:\s*(\d+))?")
_TENSOR = re.compile(r"\(\s*'TENSOR'\s*,\s*\(([^)]*)\)\s*,\s*'(\w+)'\s*\)")
_WORKLOAD = re.compile(r"^\(\s*'(\w+)'\s*,\s*\(([^)]*)\)\s*,\s*\(([^)]*)\)\s*,\s*\(([^)]*)\)\s*,\s*\(([^)]*)\)")


@define(frozen=True)
class Workload:
    """What identifies a convolution or dense workload across artifacts."""

    op: str  # conv2d | depthwise_conv2d | dense
    data: Shape
    weight: Shape
    strides: Shape = ()
    padding: Shape = ()

    def key(self) -> tuple:
        """(op, data, weight, strides, padding): equal for one workload whatever artifact
        spelled it, a symmetric four-value padding taken as its two-value form."""
        return (self.op, self.data, self.weight, self.strides, _pad2(self.padding))


def _pad2(padding: Shape) -> Shape:
    """(1, 1) and (1, 1, 1, 1) are the same symmetric padding."""
    if len(padding) == 4 and padding[:2] == padding[2:]:
        return padding[:2]
    return padding


@define(frozen=True)
class Task:
    """One task of a printed AutoTVM listing: its ``[Kernel i/n]`` index and total, its
    name, the search-space size (None when not printed), its workload and its line."""

    index: int
    total: int
    name: str  # conv2d_NCHWc.x86
    space: int | None
    workload: Workload
    line: int


@define(frozen=True)
class LogRecord:
    """One record of an AutoTVM tuning log: its line, target, task name and workload, the
    mean measured cost in seconds (None when the measurement failed) and error number."""

    line: int
    target: str
    task: str
    workload: Workload
    cost_s: float | None  # mean of the measured costs; None when the measurement failed
    error_no: int


def op_of(task_name: str) -> str:
    """The workload op a task name runs: ``depthwise_conv2d``, ``conv2d`` or ``dense``
    (``matmul`` too); any other name up to its first dot, lower-cased."""
    name = task_name.lower()
    if "depthwise" in name:
        return "depthwise_conv2d"
    if "conv2d" in name:
        return "conv2d"
    if "dense" in name or "matmul" in name:
        return "dense"
    return name.split(".")[0]


def parse_tasks(text: str, source: str = "autotvm-tasks") -> tuple[tuple[Task, ...], tuple[Issue, ...]]:
    """The tasks of a printed AutoTVM task listing, each with the data and weight tensors
    of the two lines after its header, and the issues met: a task listed again (the
    first listing kept), one without its tensor lines, no task at all."""
    lines = normalise_quotes(text).splitlines()
    tasks, issues = [], []
    seen = set()
    for i, line in enumerate(lines):
        m = _TASK.match(line.strip())
        if not m:
            continue
        if m.group(1) in seen:
            issues.append(Issue(source, i + 1, f"task {m.group(1)} listed again; the first listing is kept"))
            continue
        seen.add(m.group(1))
        tensors = [t for nxt in lines[i + 1 : i + 3] for t in _TENSOR.findall(nxt)]
        if len(tensors) < 2:
            issues.append(Issue(source, i + 1, f"task {m.group(3)} lacks its data/weight tensor lines"))
            continue
        workload = Workload(op_of(m.group(3)), shape(tensors[0][0]), shape(tensors[1][0]))
        tasks.append(
            Task(int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)) if m.group(4) else None, workload, i + 1)
        )
    if not tasks:
        issues.append(Issue(source, 0, "no AutoTVM task lines ('[Kernel i/n] name ...') found"))
    return tuple(tasks), tuple(issues)


def parse_log(text: str, source: str = "autotvm-log") -> tuple[tuple[LogRecord, ...], tuple[Issue, ...]]:
    """The records of an AutoTVM tuning log (lines not starting with ``{`` are skipped),
    and an issue per line that is no JSON record or lacks the expected fields, or for
    a log with no record at all."""
    records, issues = [], []
    for number, line in enumerate(normalise_quotes(text).splitlines(), start=1):
        stripped = line.strip()
        if not stripped.startswith("{"):
            continue
        try:
            data = json.loads(stripped)
            target, task, args = data["i"][0], data["i"][1], data["i"][2]
            costs, error_no = data["r"][0], int(data["r"][1])
            data_t, weight_t = args[0], args[1]
            if (
                not isinstance(target, str)
                or not isinstance(task, str)
                or not isinstance(costs, list)
                or not all(
                    isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and 0 <= c < 1e6
                    for c in costs
                )
            ):
                raise ValueError("target and task must be strings, costs a list of seconds")
            workload = Workload(
                op_of(task),
                _flat(data_t[1]),
                _flat(weight_t[1]),
                _flat(args[2]) if len(args) > 2 and isinstance(args[2], list) else (),
                _flat(args[3]) if len(args) > 3 and isinstance(args[3], list) else (),
            )
        except json.JSONDecodeError as exc:
            issues.append(Issue(source, number, f"not a JSON record (column {exc.colno}): {exc.msg}"))
            continue
        except (KeyError, IndexError, TypeError, ValueError, OverflowError) as exc:
            issues.append(Issue(source, number, f"record without the expected fields: {exc}"))
            continue
        cost = sum(costs) / len(costs) if costs and error_no == 0 else None
        records.append(LogRecord(number, target, task, workload, cost, error_no))
    if not records:
        issues.append(Issue(source, 0, "no tuning-log records (JSON lines) found"))
    return tuple(records), tuple(issues)


def _flat(value) -> tuple:
    """A shape or an attribute list of a record: a list of numbers and strings; anything
    else (a nested list, an object) is a ValueError the caller reports."""
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"a shape must be a flat list of numbers, not {json.dumps(value)[:40]}")
    return tuple(value)


def parse_workload_lists(
    text: str, source: str = "workloads"
) -> tuple[dict[str, tuple[Workload, ...]], tuple[Issue, ...]]:
    """Workload tuples, ``('conv2d', (1, 3, 224, 224, 'float32'), (64, 3, 7, 7, 'float32'),
    (2, 2), (3, 3), 'NCHW', 'float32')``, grouped under the line that introduces them
    (``Resnet-50 workload:``)."""
    groups: dict[str, list[Workload]] = {}
    title = "workloads"
    for line in normalise_quotes(text).splitlines():
        stripped = line.strip()
        m = _WORKLOAD.match(stripped)
        if m:
            groups.setdefault(title, []).append(
                Workload(op_of(m.group(1)), shape(m.group(2)), shape(m.group(3)), shape(m.group(4)), shape(m.group(5)))
            )
        elif stripped.endswith(":") and len(stripped) < 60:
            title = stripped[:-1].strip()
    issues = () if groups else (Issue(source, 0, "no workload tuples found"),)
    return {k: tuple(v) for k, v in groups.items()}, issues
