"""`relaytrace bundle`: build a model traced and write a directory that profiles it where it is copied."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..jobs import echo
from ..render.safe_text import terminal
from .base import Command
from .options import Served
from .shared import (
    absolute_factory,
    add_build_options,
    add_model_options,
    add_serving_options,
    build_traced,
    check_target,
    progress,
    serving,
)


def add_arguments(p) -> None:
    """`relaytrace bundle`'s arguments and options (docs/cli.md#bundle)."""
    add_model_options(p)
    add_build_options(p, profiling=False)
    p.add_argument("--out", required=True, help="the bundle DIR (new)")
    p.add_argument("--db", metavar="DIR", help="apply the MetaSchedule database `tasks --tune` wrote in DIR")
    add_serving_options(p)


def run(args) -> int:
    """`relaytrace bundle MODEL --out DIR`: build the model traced as `profile` would and
    write the bundle (``profiling.bundle``): copy DIR to the host, run
    `python DIR/run.py` there, bring DIR/profile.json back, `relaytrace report DIR`."""
    from ..frontends.loader import load
    from ..jobs import parse_shape
    from ..model.run_spec import RunSpec
    from ..profiling.bundle import device_of, write_bundle

    shapes = [parse_shape(s) for s in args.input_shape]
    if args.dtype and not shapes:
        raise UsageError(
            "--dtype is the dtype of inputs given with --input-shape NAME:DIMS (without their own); "
            "give the shapes too, e.g. --input-shape x:1x3x224x224 --dtype float16"
        )
    out = Path(args.out)
    if out.exists():
        raise FileExistsError(f"{out} exists: bundle into a new directory")
    check_target(args.target)
    device = device_of(args.target)
    say = progress(args)
    say(f"importing {args.model}")
    loaded = load(args.model, entry=args.entry, shapes=shapes, dtype=args.dtype)
    spec = str(Path(args.model).resolve()) if args.model.endswith(".onnx") else absolute_factory(args.model)
    run = RunSpec.from_args(args, spec)
    executable, lineage, _ = build_traced(loaded.model, run, say, elsewhere=True)
    entry = lineage.entry(args.entry)
    write_bundle(
        executable,
        lineage,
        loaded.inputs,
        out,
        entry=entry,
        run=run,
        say=say,
        serving=serving(Served.from_args(args), lineage, entry),
    )
    echo(
        f"bundle of {terminal(lineage.build.model)} ({lineage.entry(args.entry)}, {device}) written to {out}/: "
        f"copy it to the host, run `python {out}/run.py` there (needs numpy and tvm_ffi "
        "(pip install apache-tvm-ffi), no tvm), bring back its profile.json and run `relaytrace report "
        f"{out}`"
    )
    return 0


COMMAND = Command(
    "bundle",
    "build a model and write a directory that profiles it on a host with only TVM's runtime",
    add_arguments,
    run,
)
