"""`relaytrace render`: draw a saved run again: a graph in another format, or the HTML report."""

from __future__ import annotations

from pathlib import Path

from ..errors import RelaytraceError, UsageError
from ..jobs import echo, load_lineage
from .base import Command
from .shared import add_policy_option, at_least


def add_arguments(p) -> None:
    """`relaytrace render`'s arguments and options (docs/cli.md#render)."""
    p.add_argument("source", metavar="DIR|lineage.json")
    p.add_argument("--profile", metavar="profile.json")
    p.add_argument("--format", choices=["svg", "png", "pdf", "dot", "html"], default="svg")
    p.add_argument("--graph", choices=["layers", "kernels"], default="layers")
    p.add_argument(
        "--compare",
        metavar="compare.json",
        help="html: show each layer's numerical error from `relaytrace compare --out` (default: a "
        "compare.json beside the lineage)",
    )
    p.add_argument(
        "--collapse",
        type=at_least(0),
        metavar="N",
        help="group layers by module prefix depth N (0: every op; default: every op up to 400, else grouped)",
    )
    p.add_argument("--out", help="output file (default: beside the lineage)")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    add_policy_option(p)


def run(args) -> int:
    """`relaytrace render DIR`: draw a saved run again (a graph in another format, the
    report) beside its outputs."""
    from ..analysis.report import make_report
    from ..model.jsonio import write_atomic
    from ..model.profile import Profile
    from ..render import graphviz
    from ..render.html import html_report

    suffixes = (f".{args.format}",) + ((".htm",) if args.format == "html" else ())
    if args.out and Path(args.out).suffix.lower() not in suffixes:
        raise UsageError(
            f"--out {args.out} does not end in .{args.format}, the --format it would be written in: "
            f"name it ...{'.' + args.format} or give the --format its suffix says"
        )
    if args.compare and args.format != "html":
        raise UsageError(
            "--compare shows each layer's error in the HTML report (--format html); the layer graph "
            "coloured by error is errors.svg, written by `relaytrace compare --out DIR`"
        )
    if args.format == "html" and args.graph != "layers":
        raise UsageError(
            "the HTML report holds the layer graph and every table: --graph applies to svg, png, pdf and dot"
        )
    source = Path(args.source)
    lineage_path = source / "lineage.json" if source.is_dir() else source
    profile_path = (
        Path(args.profile)
        if args.profile
        else (lineage_path.with_name("profile.json") if lineage_path.with_name("profile.json").is_file() else None)
    )
    lineage = load_lineage(lineage_path)
    report = make_report(lineage, Profile.load(profile_path), policy=args.policy) if profile_path else None
    beside = lineage_path.with_name("compare.json")
    comparison = _comparison(args.compare or (beside if args.format == "html" and beside.is_file() else None), lineage)
    from ..jobs import RENDERED

    stem = lineage_path.parent / (RENDERED + ("report" if args.format == "html" else args.graph))
    out = Path(args.out) if args.out else stem.with_suffix(f".{args.format}")  # never one of profile's own names
    if args.format == "html":
        if report is None:
            raise UsageError("the HTML report needs a profile: pass --profile profile.json")
        write_atomic(out, html_report(report, comparison), overwrite=args.force)
    else:
        graph = (
            graphviz.layer_graph(lineage, report, collapse=args.collapse)
            if args.graph == "layers"
            else graphviz.kernel_graph(lineage, report)
        )
        graphviz.render(graph, out, args.format, overwrite=args.force)
    echo(str(out))
    return 0


def _comparison(path, lineage):
    """The ``relaytrace compare`` result at ``path`` (None without one), refused when it
    is of another model than ``lineage``, or of an entry it lacks, or lacks a row for one
    of the entry's layers (``layer_outputs``: compare writes one for each)."""
    from ..analysis.layer_outputs import layer_outputs
    from ..model.numerics import Comparison

    if path is None:
        return None
    comparison = Comparison.load(path)
    unknown = [e.layer for e in comparison.layers if e.layer not in set(lineage.layers())]
    if comparison.model != lineage.build.model or unknown:
        raise RelaytraceError(
            f"{path} compares {comparison.model!r}, not this lineage's model {lineage.build.model!r}"
            + (f" (layers {', '.join(unknown[:3])} are not in it)" if unknown else "")
            + ": pass the compare.json of the same model"
        )
    if comparison.entry not in lineage.build.entries:
        raise RelaytraceError(f"{path} compares the entry {comparison.entry!r}, which this lineage does not have")
    expected = {p.layer for p in layer_outputs(lineage, comparison.entry)}
    missing = sorted(expected - {e.layer for e in comparison.layers})
    if missing:
        raise RelaytraceError(
            f"{path} has no row for {len(missing)} of the {len(expected)} layers of {comparison.entry} "
            f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}): `relaytrace compare` writes "
            "one for every layer; compare the model again"
        )
    return comparison


COMMAND = Command("render", "draw a saved lineage (and profile)", add_arguments, run)
