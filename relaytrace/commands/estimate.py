"""`relaytrace estimate`: each layer's roofline lower bound for a build that cannot run here."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..jobs import echo
from .base import Command
from .options import Served
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
    from ..render.safe_text import terminal_lines
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
    _, lineage = build(
        loaded.model, args.target, pipeline=args.pipeline, progress=say.passes, read_code=out is not None
    )
    given = {name: dims for name, dims, _ in shapes}
    served, sequences, bound = served_shapes(lineage, args.entry, Served.from_args(args), given)
    profile = estimated_profile(lineage, peaks, args.entry, {**served, **given}, args.context, sequences, bound)
    report = make_report(lineage, profile, policy=args.policy)
    if out is not None:
        text = summary(report, args.top)
        write_outputs(
            out, report, attrs.evolve(RunSpec.from_args(args, model), estimate=peaks.device), overwrite=args.force
        )
        print_summary(text, out)
        return 0
    echo(terminal_lines(profile.summary()))
    echo(roofline_summary(report.roofline, args.top, estimate=True))
    return 0


def served_shapes(
    lineage, entry: str | None, served: Served, given: dict
) -> tuple[dict[str, tuple[int, ...]], int, tuple]:
    """For an entry that takes a KV cache: (each of its tensors with a symbolic dim sized
    for one served step, unless ``given``; the step's sequences; the dims the model or
    ``--bind`` sized, as ``Profile.bound`` says them). A token dim takes ``--tokens``
    (default 32), a sequences dim ``--batch``, a weight's ``vocab_size`` the model's own
    or ``--bind`` (``model.entry.step_dims``); for any other entry, none of those options."""
    from ..model.entry import batched, cache_param, signature, step_dims, step_tokens

    name = lineage.entry(entry)
    params = lineage.build.params.get(name, ())
    tokens, batch, bind = served.tokens, served.batch, dict(served.bind)
    if cache_param(params) is None:
        if tokens is not None or batch is not None or bind:
            raise UsageError("--tokens, --batch and --bind are for an entry that takes a KV cache")
        return {}, 1, ()
    if batch not in (None, 1) and not batched(params):
        raise UsageError(f"{name} serves one sequence: --batch applies to a batch entry (MLC-LLM's batch_decode)")
    sequences = batch or 1
    length = step_tokens(params, tokens or 32)
    declared = lineage.program.sizes if lineage.program is not None else {}
    dims, bound = step_dims(name, params, length, sequences, {**declared, **bind}, declared)
    shapes = {
        tensor: tuple(d if isinstance(d, int) else dims[d] for d in shape)
        for tensor, shape, _ in signature(params)
        if tensor not in given and not all(isinstance(d, int) for d in shape)
    }
    return shapes, sequences, tuple((d, v, where) for d, v, where in bound)


COMMAND = Command(
    "estimate", "a build's least time per layer on a named device, without running it", add_arguments, run
)
