"""`relaytrace diff`: per-layer time differences of two runs (or against a reference table), with their noise."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..jobs import echo
from ..render.safe_text import terminal
from .base import Command


def add_arguments(p) -> None:
    """`relaytrace diff`'s arguments and options (docs/cli.md#diff)."""
    p.add_argument("a", metavar="A", help="output DIR or profile.json")
    p.add_argument("b", metavar="B", nargs="?", help="output DIR or profile.json")
    p.add_argument("--reference", metavar="layers.csv", help="external per-layer times (layer,time_us)")
    p.add_argument(
        "--by-layer",
        action="store_true",
        help="match layers by name, not by op: one model through two frontends (torch and ONNX)",
    )
    p.add_argument("--out", metavar="diff.svg", help="also draw the layer graph coloured by speedup")
    p.add_argument("--force", action="store_true")


def run(args) -> int:
    """`relaytrace diff A B`: per-layer (or per-kernel) time differences of two runs, with
    their noise."""
    from ..analysis import diff
    from ..jobs import load_pair
    from ..render.table import format_table

    lineage_a, profile_a = load_pair(args.a)
    if args.reference:
        rows, unknown = diff.compare_reference(lineage_a, profile_a, diff.read_reference(args.reference))
        headers = ["layer", "ours (ms)", "reference (ms)", "reference / ours", "noise (ms)", "kernel calls"]
    else:
        if not args.b:
            raise UsageError("diff needs B (a second output DIR or profile.json) or --reference CSV")
        lineage_b, profile_b = load_pair(args.b)
        said = kinds_said(profile_a, profile_b)
        if said:
            echo(said)
        rows, unknown = diff.compare(lineage_a, profile_a, lineage_b, profile_b, by_layer=args.by_layer), ()
        headers = ["layer", "A (ms)", "B (ms)", "B / A", "noise (ms)", "kernel calls A -> B"] + (
            ["match"] if args.by_layer else []
        )

    table = [
        [
            r.layer,
            r.shown("a"),
            r.shown("b"),
            "-" if r.ratio is None else f"{r.ratio:.3f}" + (" ~" if r.within_noise else ""),
            f"±{r.spread_us / 1e3:.3g}" if r.spread_us else "-",
            " ".join(r.kernels_a) + ("" if args.reference else " -> " + " ".join(r.kernels_b)),
        ]
        + ([r.match] if args.by_layer and not args.reference else [])
        for r in rows
    ]
    echo(format_table(headers, table))
    total_a, total_b = diff.totals(rows)
    echo(
        f"\ntotal: A {total_a / 1e3:.3f} ms, {'reference' if args.reference else 'B'} {total_b / 1e3:.3f} ms"
        + (f", B / A {total_b / total_a:.3f}" if total_a else "")
        + " (rows sorted by the size of the change)"
    )
    noise = [r.layer for r in rows if r.within_noise]
    echo(
        f"{len(noise)} layer(s) marked ~ changed by no more than their runs scatter (noise: max - min over "
        "runs): that change may be noise"
        if noise
        else "noise: how far each layer's time scatters over the runs (max - min); '-': one run, nothing to tell by"
    )
    if args.by_layer and not args.reference:
        echo("\n" + diff.match_summary(rows))
    missing = [r.layer for r in rows if r.b_us is None]
    if args.reference and missing:
        echo(
            f"\n{len(missing)} layer(s) missing from the reference: {', '.join(map(terminal, missing[:10]))}"
            f"{' ...' if len(missing) > 10 else ''}"
        )
    if unknown:
        echo(f"\n{len(unknown)} reference layer(s) not in the model: {', '.join(map(terminal, unknown[:10]))}")
    if args.out and not args.reference:
        from ..render import graphviz
        from ..render.diff_graph import diff_graph

        path = graphviz.render(diff_graph(lineage_a, rows), Path(args.out), overwrite=args.force)
        echo(f"\ngraph coloured by speedup: {path}")
    return 0


COMMAND = Command("diff", "compare two profiles of one model layer by layer", add_arguments, run)


def kinds_said(a, b) -> str:
    """A line heading the table when A and B are not both measurements (``Profile.mode``
    estimate): a ratio of a measurement to an estimate is how far a run is from its
    roofline bound, not a speedup; "" when both are measurements."""
    from ..model.profile import Mode

    def what(p) -> str:
        if p.mode == Mode.ESTIMATE:
            return f"an estimate (roofline lower bounds on {terminal(p.device)})"
        return f"a measurement on {terminal(p.device)}"

    estimated = (a.mode == Mode.ESTIMATE, b.mode == Mode.ESTIMATE)
    if not any(estimated):
        return ""
    if all(estimated):
        return f"A is {what(a)}, B {what(b)}: not measurements"
    if estimated[0]:
        return f"A is {what(a)}, B {what(b)}: B / A is how far the measured run is from its estimate's bound"
    return f"A is {what(a)}, B {what(b)}: B / A is the estimate's bound over the measured time, not a speedup"
