"""`relaytrace advise`: what to change in a build, with the evidence and the estimated
saving; `--verify` rebuilds with each change alone and measures it."""

from __future__ import annotations

import statistics

from ..errors import UsageError
from ..jobs import echo
from ..model.origin import OP
from ..render.safe_text import terminal
from .base import Command
from .shared import at_least


def add_arguments(p) -> None:
    """`relaytrace advise`'s arguments and options (docs/cli.md#advise)."""
    p.add_argument("dir", metavar="DIR", help="an output DIR of `relaytrace profile`")
    p.add_argument(
        "--verify",
        action="store_true",
        help="rebuild with each change relaytrace can make (alone), profile it as DIR was, diff by layer",
    )
    p.add_argument("--repeat", type=at_least(1), metavar="N", help="profiled runs of each rebuild (default: DIR's)")
    p.add_argument("--top", type=at_least(1), default=5, metavar="N", help="layers shown per measured change")


def run(args) -> int:
    """`relaytrace advise DIR [--verify]`."""
    from ..analysis.report import make_report
    from ..jobs import load_pair

    lineage, profile = load_pair(args.dir)
    report = make_report(lineage, profile)
    if not report.advice:
        echo("no advice: no rule found anything worth a line in this run")
        return 0
    for i, finding in enumerate(report.advice, 1):
        echo(_finding_text(i, finding, profile.e2e_median_us))
    if args.verify:
        _verify(args, report)
    return 0


def _finding_text(i: int, finding, e2e_us: float) -> str:
    saving = (
        f"estimated saving {finding.saving_us / 1e3:.3f} ms per run "
        f"({100 * finding.saving_us / (e2e_us or 1):.1f}% of the end-to-end time)"
        if finding.saving_us
        else "saving not estimated"
    )
    lines = [f"{i}. {terminal(finding.title)} [{finding.rule}]: {saving}"]
    lines += [f"   - {terminal(e)}" for e in finding.evidence]
    if finding.layers:
        more = f" and {len(finding.layers) - 6} more" if len(finding.layers) > 6 else ""
        lines.append(f"   layers: {', '.join(terminal(n) for n in finding.layers[:6])}{more}")
    lines.append(
        f"   change: {finding.change.what}: {finding.change.how}"
        + ("" if finding.change.rebuild is not None else " (not rebuilt by --verify)")
    )
    return "\n".join(lines) + "\n"


def _verify(args, report) -> None:
    """Each finding whose change relaytrace can make: DIR's model rebuilt with that change
    alone and profiled, between two profiles of the same model rebuilt as DIR was, made
    in the same sitting just before and just after (a profile made earlier drifts with
    the machine's load, and drift while the change runs shows as scatter in the runs
    around it; DIR's own files are left as they are), and the two diffed layer by layer
    (``analysis.diff``)."""
    from ..frontends.loader import load
    from ..jobs import parse_shape
    from ..model.run_spec import RunSpec
    from .options import Served, Timing
    from .shared import build_traced, profile_built, progress

    if report.profile.remote:
        raise UsageError(f"{args.dir} was profiled on {report.profile.remote}: --verify rebuilds and profiles here")
    info = RunSpec.load(args.dir)
    say = progress(args)
    todo = []
    for finding in report.advice:
        if finding.change.rebuild is None:
            continue
        field, value = finding.change.rebuild.option
        if getattr(info, field) == value:
            echo(f"{finding.rule}: DIR was built with {field} {value} already: nothing to rebuild")
        else:
            todo.append((finding, field, value))
    if not todo:
        return
    loaded = load(info.model, shapes=[parse_shape(s) for s in info.input_shapes], dtype=info.dtype, entry=info.entry)

    timing = Timing(
        entry=report.profile.entry,
        repeat=args.repeat or report.profile.repeat,
        served=Served(info.tokens, info.context),
    )
    say("verifying: rebuilding DIR's model as it was, to measure beside each change")
    base = build_traced(loaded.model, info, say)
    changed = rebuilt_differs(report.build_lineage, base[1])
    if changed:
        raise UsageError(
            f"{args.dir}'s model rebuilt as it was is not the model DIR was made of ({changed}): the model file "
            f"changed since, or DIR's run.json does not say how it was built; profile it again, then advise"
        )
    before = profile_built(base, timing, say, loaded.inputs)
    for finding, field, value in todo:
        say(f"verifying {finding.rule}: rebuilding with {field} {value}")
        built = build_traced(loaded.model, info.with_change(field, value), say)
        after = profile_built(built, timing, say, loaded.inputs)
        say("profiling DIR's model as it was again, after the change")
        again = profile_built(base, timing, say, loaded.inputs)
        _measured_change(args, finding, f"{field} {value}", (base[1], before, again), (built[1], after))
        before = again


def rebuilt_differs(was, now) -> str:
    """How the lineage ``now`` of a rebuild "as it was" differs from ``was``, the one its
    directory holds, in words ("" when alike): other ops of the model (their stable
    origin ids), or other groups of them in kernels. ``--verify`` measures a change
    against the rebuild, so a rebuild of another model (the file edited since) would be
    a verdict on it. Ops passes insert are left out, and kernels are compared by the
    model's ops in them, not by name: TVM numbers shape functions in an order that
    differs from process to process (``shape_func3`` in one build is ``shape_func2``
    in the next)."""
    ops_was, ops_now = _model_ops(was), _model_ops(now)
    if ops_was != ops_now:
        return f"{len(ops_was ^ ops_now)} op(s) differ"
    kernels_was = sorted(tuple(sorted(set(s.origin_ids) & ops_was)) for s in was.call_sites)
    kernels_now = sorted(tuple(sorted(set(s.origin_ids) & ops_now)) for s in now.call_sites)
    if kernels_was != kernels_now:
        return f"its kernels differ ({len(kernels_was)} call sites before, {len(kernels_now)} now)"
    return ""


def _model_ops(lineage) -> set[str]:
    return {oid for oid, origin in lineage.origins.items() if origin.kind == OP}


def _measured_change(args, finding, change: str, base, changed) -> None:
    """What one change did: first whether it applied where its finding said
    (``advice.not_applied``), then end to end, as a saving only beyond the runs' scatter
    (``advice.Measured``: the build as it was profiled just before and just after the
    change), its finding's layers and the layers that changed most. ``base``: its
    lineage and the profiles before and after; ``changed``: the change's lineage and
    profile."""
    from ..analysis import diff
    from ..analysis.advice import Measured, not_applied
    from ..analysis.diff import Why
    from ..render.table import format_table

    (lineage_a, profile_a, again), (lineage_b, profile_b) = base, changed
    measured = Measured(profile_a.e2e_us + again.e2e_us, profile_b.e2e_us, not_applied(finding, lineage_a, lineage_b))
    a_ms, b_ms = statistics.median(measured.before_us) / 1e3, profile_b.e2e_median_us / 1e3
    echo(
        f"{finding.rule} with {change}: end to end {a_ms:.3f} -> {b_ms:.3f} ms (each built and profiled now, "
        f"{len(measured.before_us)} runs around {len(profile_b.e2e_us)}): {measured.verdict()} "
        f"(estimated {finding.saving_us / 1e3:.3f} ms)"
    )
    if measured.not_applied:
        echo()
        return
    rows = diff.compare(lineage_a, profile_a, lineage_b, profile_b)
    named = [r for r in rows if r.layer in set(finding.layers)]
    if named:
        inside = sum(r.b_us is None and r.absent_b is not None and r.absent_b.why == Why.FUSED for r in named)
        echo(
            f"its {len(named)} layer(s): {sum(r.a_us or 0 for r in named) / 1e3:.3f} -> "
            f"{sum(r.b_us or 0 for r in named) / 1e3:.3f} ms"
            + (f"; {inside} now run inside another layer's kernel, billed to it" if inside else "")
        )
    top = [r for r in rows if r.a_us is not None or r.b_us is not None][: args.top]
    echo(f"the {len(top)} layers that changed most (~: within the runs' scatter):")
    echo(
        format_table(
            ["layer", "before (ms)", "after (ms)", "after / before"],
            [
                [
                    r.layer,
                    r.shown("a"),
                    r.shown("b"),
                    "-" if r.ratio is None else f"{r.ratio:.3f}" + (" ~" if r.within_noise else ""),
                ]
                for r in top
            ],
        )
    )
    unverified = len(lineage_b.coverage().unverified) + len(lineage_b.coverage().suspect)
    if unverified:
        echo(f"({unverified} call site(s) of the rebuild are not verified: their layers' times are not sure)")
    echo()


COMMAND = Command(
    "advise", "what to change in a build, with its evidence and saving (--verify: measured)", add_arguments, run
)
