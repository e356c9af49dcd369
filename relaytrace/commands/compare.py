"""`relaytrace compare`: each layer's value in the build against the framework's, and the
first layer beyond tolerance."""

from __future__ import annotations

from ..errors import RelaytraceError, UsageError
from ..jobs import echo
from ..model.run_spec import Layout, Precision
from .base import Command
from .shared import add_input_shape_option, add_pipeline_options, at_least, check_target, progress


def add_arguments(p) -> None:
    """`relaytrace compare`'s arguments and options (docs/cli.md#compare)."""
    p.add_argument(
        "model",
        metavar="MODEL",
        help="an .onnx file or path/to/file.py:factory returning a torch module, its inputs [and dynamic_shapes]",
    )
    add_input_shape_option(p)
    p.add_argument("--target", default="llvm", help="TVM target of this machine (default llvm)")
    add_pipeline_options(p)
    p.add_argument(
        "--precision",
        choices=[m.value for m in Precision],
        default=Precision.FP32.value,
        help="fp16: build through relax.transform.ToMixedPrecision (default fp32: as imported)",
    )
    p.add_argument(
        "--accumulate",
        choices=["float32", "float16"],
        help="with --precision fp16: the dtype conv and matmul accumulate in (default float32)",
    )
    p.add_argument(
        "--atol",
        type=at_least(0, float, strict=False),
        metavar="A",
        help="absolute tolerance (default from the precision: 1e-4 for fp32, 1e-2 for fp16 accumulating "
        "in float32, 5e-2 in float16)",
    )
    p.add_argument(
        "--rtol",
        type=at_least(0, float, strict=False),
        metavar="R",
        help="relative tolerance (default as --atol): beyond when |got - ref| > A + R |ref| anywhere",
    )
    p.add_argument(
        "--observe",
        action="append",
        default=[],
        metavar="LAYER[,LAYER]",
        help="layers whose value the build keeps inside a kernel (fused): rebuild with their values "
        "written out and compare them there (repeatable)",
    )
    p.add_argument("--observe-all", action="store_true", help="--observe every layer the build fuses away")
    p.add_argument(
        "--no-search",
        action="store_true",
        help="do not search the kernel of the first layer beyond the tolerance for its first op beyond it "
        "(a search rebuilds the model with some of that kernel's ops' values written out)",
    )
    p.add_argument(
        "--per-rebuild",
        type=at_least(1),
        metavar="N",
        help="at most N ops' values written out per rebuild of the search (default 8: a kernel of up to 9 ops "
        "takes one rebuild; a larger one is bisected)",
    )
    p.add_argument("--out", help="output DIR: lineage.json, compare.json, compare.csv, errors.svg")
    p.add_argument("--force", action="store_true", help="replace an existing DIR")


def run(args) -> int:
    """`relaytrace compare MODEL`: each layer's value in the build against the framework's,
    and the first layer beyond tolerance."""
    from ..analysis.comparison import compare
    from ..analysis.observe import build_observed, check_layers
    from ..build import NHWC, build
    from ..frontends.loader import load
    from ..jobs import parse_shape, prepare_out_dir, write_compare
    from ..model.numerics import FUSED, with_observed
    from ..profiling.remote import runs_here, target_name
    from ..render.outputs import COMPARE, names
    from ..render.table import comparison_table

    say = progress(args)
    check_target(args.target)
    if not runs_here(args.target):
        raise UsageError(
            f"compare runs the build here, and a build for {target_name(args.target)} does not run "
            "on this machine: compare with a target of this machine (llvm)"
        )
    if args.accumulate and args.precision != Precision.FP16:
        raise UsageError("--accumulate applies to --precision fp16")
    if args.no_search and args.per_rebuild is not None:
        raise UsageError("--per-rebuild sizes the search that --no-search turns off: give one of them")
    out = prepare_out_dir(args.out, args.force) if args.out else None
    say(f"importing {args.model}")
    loaded = load(args.model, shapes=[parse_shape(x) for x in args.input_shape])
    if loaded.source is None:
        raise UsageError(
            f"compare runs the model in its own framework, and {args.model} gives only a TVM model (an "
            "ImportedModel, an nn module or a Relax IRModule): compare an .onnx file or a factory "
            "returning (torch module, example inputs[, dynamic_shapes])"
        )
    named = [name for given in args.observe for name in given.split(",") if name]
    if named and args.observe_all:
        raise UsageError("--observe names layers and --observe-all takes every fused one: give one of them")
    check_layers(loaded.model, named)
    accumulate = (args.accumulate or "float32") if args.precision == Precision.FP16 else None
    precision = f"float16, accumulating in {accumulate}" if accumulate else "float32 as built"
    say(f"building {loaded.model.name} ({args.pipeline}, {args.layout}, {precision}) for {args.target}")
    executable, lineage = build(
        loaded.model,
        args.target,
        pipeline=args.pipeline,
        convert_layout=NHWC if args.layout == Layout.NHWC else None,
        progress=say.passes,
        mixed_precision=accumulate,
    )

    def against(built, traced, **options):
        """``compare`` of a build of the model against its source, on its inputs."""
        return compare(
            built, traced, loaded.source, list(loaded.inputs), dynamic_shapes=loaded.dynamic_shapes, **options
        )

    comparison = against(executable, lineage, atol=args.atol, rtol=args.rtol, progress=say)
    wanted = [e.layer for e in comparison.layers if e.status == FUSED] if args.observe_all else named
    if wanted:
        say(f"rebuilding with the values of {len(wanted)} layer(s) written out: {', '.join(wanted)}")
        kept_executable, kept = build_observed(
            loaded.model, lineage.build.options, args.target, layers=wanted, progress=say.passes
        )
        again = against(kept_executable, kept, atol=comparison.atol, rtol=comparison.rtol, progress=say)
        comparison = with_observed(comparison, again, wanted)
    if comparison.first_beyond is not None and not args.no_search:
        tolerance = {"atol": comparison.atol, "rtol": comparison.rtol}
        comparison = _searched(
            args, loaded, lineage, comparison, say, lambda ops: against(executable, lineage, ops=ops, **tolerance)
        )
    echo(comparison_table(comparison))
    echo()
    echo(comparison.summary())
    if out is not None:
        write_compare(out, lineage, comparison, overwrite=args.force)
        echo(f"\nwritten to {out}/: {', '.join(names(COMPARE))}")
    return 0


def _searched(args, loaded, lineage, comparison, say, here):
    """``comparison`` with the first op beyond the tolerance among the ops of its first
    layer beyond it and of the kernel that writes it (``analysis.narrow``): compared on
    the build where its kernels write them (``here``), else by rebuilds."""
    import attrs

    from ..analysis.narrow import narrow, rebuilding

    recompare = rebuilding(
        loaded.model, lineage, loaded.source, loaded.inputs, comparison, loaded.dynamic_shapes, progress=say
    )
    try:
        found = narrow(lineage, comparison, recompare, args.per_rebuild or 8, progress=say, here=here)
    except RelaytraceError as exc:  # the comparison stands without it
        echo(f"the search for the first op beyond the tolerance stopped: {exc}")
        return comparison
    return attrs.evolve(comparison, divergence=found)


COMMAND = Command("compare", "compare every layer's output of the build with the torch model's", add_arguments, run)
