"""`relaytrace estimate`: each layer's roofline lower bound for a build that cannot run here."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..jobs import echo
from .base import Command
from .shared import (
    absolute_factory,
    add_model_options,
    add_peak_options,
    add_pipeline_options,
    add_policy_option,
    add_serving_options,
    at_least,
    check_target,
    given_peaks,
    progress,
)


def add_arguments(p) -> None:
    """`relaytrace estimate`'s arguments and options (docs/cli.md#estimate)."""
    add_model_options(p)
    p.add_argument("--target", default="cuda", help="TVM target to build for (default cuda)")
    add_pipeline_options(p, layout=False)
    p.add_argument("--entry", metavar="NAME", help="entry function (default main, or the only one)")
    add_serving_options(p)
    add_peak_options(p)
    add_policy_option(p)
    p.add_argument("--top", type=at_least(1), default=15, help="layers shown (default 15)")
    p.add_argument("--out", help="also write every output (tables, report.html) of the estimate into DIR")
    p.add_argument("--force", action="store_true", help="write into an existing DIR")


def run(args) -> int:
    """`relaytrace estimate MODEL --device NAME`: build traced (not run), and print
    each layer's least time on the named device, what bounds it, its work."""
    import attrs

    from ..analysis.estimate import estimated_profile
    from ..analysis.report import make_report
    from ..build import build
    from ..frontends.loader import load
    from ..jobs import parse_shape, prepare_out_dir, write_outputs
    from ..model.run_spec import RunSpec
    from ..render.safe_text import terminal
    from ..render.table import roofline_summary
    from .shared import print_summary, summary

    peaks = given_peaks(args)
    if peaks is None:
        raise UsageError(
            "an estimate needs the device's peaks: --device NAME (relaytrace peaks --list) or "
            "--peak-gflops G --peak-gbps B"
        )
    check_target(args.target)
    shapes = [parse_shape(s) for s in args.input_shape]
    out = prepare_out_dir(args.out, args.force) if args.out else None
    say = progress(args)
    say(f"importing {args.model}")
    model = (
        args.model
        if args.model.startswith("demo:")
        else (str(Path(args.model).resolve()) if args.model.endswith(".onnx") else absolute_factory(args.model))
    )
    loaded = load(model, entry=args.entry, shapes=shapes, dtype=args.dtype, with_inputs=False)
    say(f"building for {args.target} (traced, not run)")
    _, lineage = build(loaded.model, args.target, pipeline=args.pipeline, progress=say.passes)
    given = {name: dims for name, dims, _ in shapes}
    profile = estimated_profile(
        lineage, peaks, args.entry, {**served_shapes(lineage, args.entry, args.tokens, given), **given}, args.context
    )
    report = make_report(lineage, profile, policy=args.policy)
    if out is not None:
        text = summary(report, args.top)
        write_outputs(
            out, report, attrs.evolve(RunSpec.from_args(args, model), estimate=peaks.device), overwrite=args.force
        )
        print_summary(text, out)
        return 0
    echo(terminal(profile.summary()))
    echo(roofline_summary(report.roofline, args.top, estimate=True))
    return 0


def served_shapes(lineage, entry: str | None, tokens: int | None, given: dict) -> dict[str, tuple[int, ...]]:
    """For an entry that takes a KV cache: its first tensor (the embeddings) sized for
    ``tokens`` new tokens (default 32) in its symbolic dims, unless ``given``; else none."""
    from ..model.entry import cache_param

    params = lineage.build.params.get(lineage.entry(entry), ())
    if cache_param(params) is None:
        if tokens is not None:
            raise UsageError("--tokens is for an entry that takes a KV cache")
        return {}
    first = next((t for p in params for t in p.tensors), None)
    if first is None or first.name in given:
        return {}
    return {first.name: tuple(d if isinstance(d, int) else tokens or 32 for d in first.shape)}


COMMAND = Command(
    "estimate", "a build's least time per layer on a named device, without running it", add_arguments, run
)
