"""``relaytrace legacy``: answer a Relay-era question from the artifacts alone."""

from __future__ import annotations

from pathlib import Path

from ..errors import RelaytraceError, UsageError
from ..jobs import echo, legacy_out, prepare_out_dir, write_legacy  # echo: a pasted name's control characters escaped
from . import match, summary
from .autotvm import parse_log, parse_tasks, parse_workload_lists
from .common import percent
from .relay_ir import parse_relay_ir
from .reports import parse_reports


def _read(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no {what} file at {p}")
    text = p.read_text(errors="replace")
    if not text.strip():
        raise RelaytraceError(f"{p} is empty: paste the {what} into it")
    return text


def run(args) -> int:
    """`relaytrace legacy`: each given artifact read and matched to the others (kernels
    of a report to the Relay IR's ops, AutoTVM log records to tasks and workloads),
    printed as tables; ``--out DIR`` also writes matches.json."""
    if not any((args.relay_ir, args.report, args.autotvm_tasks, args.autotvm_log)):
        raise UsageError("give at least one of --relay-ir, --report, --autotvm-tasks, --autotvm-log")
    out_dir = legacy_out(prepare_out_dir(args.out, args.force)) if args.out is not None else None
    texts = {
        k: _read(getattr(args, k), k.replace("_", "-"))
        for k in ("relay_ir", "report", "autotvm_tasks", "autotvm_log", "workloads")
    }
    issues: list = []
    result: dict = {}
    graph = None
    if texts["relay_ir"]:
        graph = parse_relay_ir(texts["relay_ir"], args.relay_ir)
        issues += graph.issues
        echo(f"Relay IR: {len(graph.ops)} ops, {len(match.chains(graph))} fusable op chains")
    if texts["report"]:
        reports, found = parse_reports(texts["report"], args.report)
        issues += found
        result["reports"] = [_report(report, graph) for report in reports]
    if texts["autotvm_tasks"]:
        tasks, found = parse_tasks(texts["autotvm_tasks"], args.autotvm_tasks)
        issues += found
        if graph:
            result["tasks"] = _tasks(tasks, graph)
        else:
            echo(f"\n{len(tasks)} AutoTVM tasks (give --relay-ir to map them to ops)")
    if texts["autotvm_log"]:
        records, found = parse_log(texts["autotvm_log"], args.autotvm_log)
        issues += found
        lists, _ = parse_workload_lists(texts["workloads"] or texts["autotvm_log"])
        result["log_weighted_total_ms"] = _log(records, next(iter(lists.values()), ()), graph, args.repeats_from)
    if issues:
        echo(f"\n{len(issues)} line(s) could not be read fully:")
        for issue in issues:
            echo(f"  {issue}")
    result["issues"] = [str(i) for i in issues]
    if out_dir is not None:
        write_legacy(out_dir, result, overwrite=args.force)
    return 0


def _report(report, graph) -> dict:
    """One profiler report printed (its layout-transform share, its kernels matched to
    the Relay IR's ops when it is given, its op-type shares); its matches.json entry."""
    pure, mixed, total = match.layout_transform_share(report)
    echo(
        f"\nreport at line {report.line} ({report.kind}, {len(report.rows)} kernels, "
        f"total {total / 1e3:.3f} ms): layout_transform kernels {percent(pure, total)} "
        f"of the time; kernels containing a layout_transform {percent(mixed, total)}"
    )
    echo(
        summary.matches_table(match.match_rows(report.rows, graph))
        if graph
        else "  (give --relay-ir to match kernels to Relay ops)"
    )
    shares = summary.op_type_shares(report)
    echo("op-type shares: " + ", ".join(f"{op} {pct:.2f}%" for op, _, pct in shares))
    entry = {
        "line": report.line,
        "kind": report.kind,
        "total_us": total,
        "layout_transform_us": pure,
        "with_layout_transform_us": mixed,
        "op_types": {op: us for op, us, _ in shares},
    }
    if graph:
        entry["layers_us"] = summary.layer_times(match.match_rows(report.rows, graph))
    return entry


def _tasks(tasks, graph) -> dict[str, list[str]]:
    """AutoTVM's tasks matched to the Relay IR's op chains, printed; task -> its chains."""
    matched = match.match_tasks(tasks, graph)
    echo("\nAutoTVM tasks -> Relay ops (repeats = layers sharing the tuned schedule):")
    echo(summary.tasks_table(matched))
    return {f"{t.task.index} {t.task.name}": [c.label for c in t.chains] for t in matched}


def _log(records, workloads, graph, repeats_from: str | None) -> float | None:
    """A tuning log's records matched to its workloads, printed; the conv2d/dense time
    weighted by how often each workload runs (in ms), or None where that is not known."""
    repeats = match.repeats_in_graph(graph) if graph else _zoo_repeats(repeats_from)
    matched = match.match_log(records, workloads, repeats)
    echo(f"\ntuning log: {len(records)} records")
    echo(summary.log_table(matched, workloads))
    unweighted = f"unweighted sum {sum(r.cost_s or 0 for r in records) * 1e3:.2f} ms"
    if repeats:
        total = match.weighted_total_s(matched)
        echo(f"total conv2d/dense time weighted by repeats: {total * 1e3:.2f} ms ({unweighted})")
        return total * 1e3
    how = (  # how often each workload runs is not known
        "no workload of the log was found in " + ("the Relay IR" if graph else str(repeats_from))
        if graph or repeats_from
        else "give --relay-ir or --repeats-from ZOO_MODEL"
    )
    echo(f"total conv2d/dense time weighted by repeats: unknown, the repeats are not known ({how}); {unweighted}")
    return None


def _zoo_repeats(name: str | None):
    from collections import Counter

    if not name:
        return Counter()
    from .. import zoo

    module, example = zoo.get(name)
    return match.repeats_in_torch(module, example)
