"""`relaytrace advise`: what to change in a build, with the evidence and the estimated
saving; `--verify` rebuilds with each change alone and measures it."""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..jobs import echo
from ..render.safe_text import terminal
from .base import Command
from .shared import at_least


def add_arguments(p) -> None:
    """`relaytrace advise`'s arguments and options (docs/cli.md#advise)."""
    p.add_argument("dir", metavar="DIR", help="an output DIR of `relaytrace profile`")
    p.add_argument("--verify", action="store_true",
                   help="rebuild with each change relaytrace can make (alone), profile it as DIR was, diff by layer")
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
    saving = (f"estimated saving {finding.saving_us / 1e3:.3f} ms per run "
              f"({100 * finding.saving_us / (e2e_us or 1):.1f}% of the end-to-end time)"
              if finding.saving_us else "saving not estimated")
    lines = [f"{i}. {terminal(finding.title)} [{finding.rule}]: {saving}"]
    lines += [f"   - {terminal(e)}" for e in finding.evidence]
    if finding.layers:
        more = f" and {len(finding.layers) - 6} more" if len(finding.layers) > 6 else ""
        lines.append(f"   layers: {', '.join(terminal(n) for n in finding.layers[:6])}{more}")
    lines.append(f"   change: {finding.change.what}: {finding.change.how}"
                 + ("" if finding.change.rebuild else " (not rebuilt by --verify)"))
    return "\n".join(lines) + "\n"


# how each change relaytrace can make is made: the run.json field and its value
_CHANGES = {"fold-batch-norm": ("fold_batch_norm", True), "layout NCHW": ("layout", "NCHW"),
            "pipeline fused": ("pipeline", "fused"), "precision fp32": ("precision", "fp32")}


def _verify(args, report) -> None:
    """Each finding whose change relaytrace can make: DIR's model rebuilt with that change
    alone, profiled as DIR was, and diffed layer by layer (``analysis.diff``)."""
    from ..analysis import diff as D
    from ..frontends.loader import load
    from ..jobs import parse_shape, run_info
    from ..render.table import format_table
    from .shared import build_and_profile, progress

    info = run_info(args.dir)
    say = progress(args)
    lineage_a, profile_a = report.build_lineage, report.profile
    for finding in report.advice:
        if finding.change.rebuild not in _CHANGES:
            continue
        field, value = _CHANGES[finding.change.rebuild]
        if info.get(field) == value:
            echo(f"{finding.rule}: DIR was built with {field} {value} already: nothing to rebuild")
            continue
        options = {**info, field: value}
        say(f"verifying {finding.rule}: rebuilding with {field} {value}")
        loaded = load(info["model"], shapes=[parse_shape(s) for s in info["input_shapes"]], dtype=info["dtype"],
                      entry=info["entry"])
        build_args = argparse.Namespace(
            target=options["target"], pipeline=options["pipeline"], layout=options["layout"],
            precision=options["precision"], fold_batch_norm=options["fold_batch_norm"], db=options["db"],
            entry=profile_a.entry, mode=None, repeat=args.repeat or profile_a.repeat, rpc=None, tracker=None,
            key=None, cc=None, kernel_timeout=None, device=None, peak_gflops=None, peak_gbps=None, name=None)
        if profile_a.remote:
            raise UsageError(f"{args.dir} was profiled on {profile_a.remote}: --verify rebuilds and profiles here")
        lineage_b, profile_b = build_and_profile(loaded.model, build_args, say, loaded.inputs)
        rows = D.compare(lineage_a, profile_a, lineage_b, profile_b)
        a_ms, b_ms = profile_a.e2e_median_us / 1e3, profile_b.e2e_median_us / 1e3
        echo(f"{finding.rule} with {field} {value}: end to end {a_ms:.3f} -> {b_ms:.3f} ms, measured saving "
             f"{a_ms - b_ms:.3f} ms (estimated {finding.saving_us / 1e3:.3f} ms)")
        changed = [r for r in rows if r.a_us is not None or r.b_us is not None][:args.top]
        echo(format_table(["layer", "before (ms)", "after (ms)", "after / before"],
                          [[r.layer, _ms(r.a_us, r.absent_a), _ms(r.b_us, r.absent_b),
                            "-" if r.ratio is None else f"{r.ratio:.3f}" + (" ~" if r.within_noise else "")]
                           for r in changed]))
        unverified = len(lineage_b.coverage().unverified) + len(lineage_b.coverage().suspect)
        if unverified:
            echo(f"({unverified} call site(s) of the rebuild are not verified: their layers' times are not sure)")
        echo()


def _ms(us, why: str) -> str:
    return why if us is None else f"{us / 1e3:.3f}"


COMMAND = Command("advise", "what to change in a build, with its evidence and saving (--verify: measured)",
                  add_arguments, run)
