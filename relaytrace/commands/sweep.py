"""`relaytrace sweep`: an LLM's entry served at a grid of contexts and batch sizes, each
layer's time fitted against them, the fits written and plotted."""

from __future__ import annotations

import argparse

from ..errors import UsageError
from .base import Command
from .shared import absolute_factory, add_build_options, add_model_options, at_least, dim_binding


def _sizes(text: str) -> tuple[int, ...]:
    """``64,256,1024`` as distinct whole numbers in order (0 allowed: an empty cache)."""
    try:
        values = tuple(sorted({int(v) for v in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, not {text!r}") from None
    if not values or values[0] < 0:
        raise argparse.ArgumentTypeError(f"expected whole numbers of 0 or more, not {text!r}")
    return values


def add_arguments(p) -> None:
    """`relaytrace sweep`'s arguments and options (docs/cli.md#sweep)."""
    add_model_options(p)
    add_build_options(p, profiling=False)
    p.add_argument(
        "--context",
        type=_sizes,
        required=True,
        metavar="C,C,...",
        help="the tokens in each sequence's KV cache at each point, e.g. 64,256,1024,4096",
    )
    p.add_argument(
        "--batch",
        type=_sizes,
        default=(1,),
        metavar="B,B,...",
        help="the sequences served at once at each point (a batch entry, MLC-LLM's batch_decode; default 1)",
    )
    p.add_argument("--tokens", type=at_least(1), metavar="N", help="tokens per sequence per step (a prefill's)")
    p.add_argument("--bind", action="append", type=dim_binding, metavar="DIM=VALUE", help="as for profile")
    p.add_argument("--repeat", type=at_least(1), default=3, help="profiled runs at each point (default 3)")
    p.add_argument(
        "--project",
        type=at_least(1),
        metavar="C",
        help="a context to project each layer's fit to (the model's maximum: its context window)",
    )
    p.add_argument(
        "--device",
        metavar="NAME",
        help="also bound each point on a named device (relaytrace peaks --list), as estimate does, and fit those",
    )
    p.add_argument("--out", required=True, help="output DIR")
    p.add_argument("--force", action="store_true", help="write into an existing DIR")


def run(args) -> int:
    """`relaytrace sweep MODEL --entry E --context ... --batch ...`: one build, a served
    profile at each (context, batch) point, each layer's fit."""
    from ..analysis.report import make_report
    from ..analysis.sweep import SweepPoint, fit_sweep
    from ..frontends.loader import load
    from ..jobs import echo, prepare_out_dir, write_sweep
    from ..model.peaks import named
    from ..model.run_spec import RunSpec
    from ..profiling.serve import Serving, takes_cache
    from ..profiling.vm import profile
    from ..render.sweep import sweep_table
    from .shared import build_traced, check_target, progress

    if 0 in args.batch:
        raise UsageError("--batch takes sizes of 1 or more")
    peaks = named(args.device) if args.device else None
    say = progress(args)
    check_target(args.target)
    out = prepare_out_dir(args.out, args.force)
    shown = absolute_factory(args.model) if not args.model.endswith(".onnx") else args.model
    say(f"importing {args.model}")
    loaded = load(shown, entry=args.entry)
    run = RunSpec(
        shown,
        target=args.target,
        pipeline=args.pipeline,
        layout=args.layout,
        precision=args.precision,
        fold_batch_norm=args.fold_batch_norm,
        lift_params=args.lift_params,
    )
    executable, lineage, _ = build_traced(loaded.model, run, say)
    entry = lineage.entry(args.entry)
    if not takes_cache(lineage, entry):
        raise UsageError(f"sweep serves an entry that takes a KV cache (an LLM's decode); {entry} takes none")
    bind = dict(args.bind or ())
    points, bounds = [], []
    grid = [(c, b) for b in args.batch for c in args.context]
    for i, (context, batch) in enumerate(grid, 1):
        say(f"point {i}/{len(grid)}: context {context}, batch {batch}")
        serving = Serving(tokens=args.tokens or 32, context=context, sequences=batch, bind=bind)
        found = profile(executable, lineage, [], entry=entry, repeat=args.repeat, serving=serving)
        report = make_report(lineage, found)
        points.append(SweepPoint(context, batch, {r.layer: r.us for r in report.layers}, found.e2e_median_us))
        if peaks is not None:
            bounds.append(_bounded(lineage, entry, peaks, args, context, batch))
    try:
        sweep = fit_sweep(entry, points)
        device = fit_sweep(f"{entry} bound on {peaks.device}", bounds) if peaks is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    write_sweep(out, sweep, args.project, overwrite=args.force, device=device)
    echo(sweep_table(sweep, args.project))
    if device is not None:
        echo(f"\nESTIMATE, not a measurement: each point's roofline lower bound\n{sweep_table(device, args.project)}")
    echo(
        f"\nwritten to {out}/: report.html, sweep.csv, fits.csv, sweep.svg"
        f"{', device.csv, device_fits.csv' if device else ''}"
    )
    return 0


def _bounded(lineage, entry: str, peaks, args, context: int, batch: int):
    """The ``SweepPoint`` of one (context, batch) point as ``estimate`` bounds it on
    ``peaks``' device: each layer's roofline lower bound, the step's their sum."""
    from ..analysis.estimate import estimated_profile
    from ..analysis.report import make_report
    from ..analysis.sweep import SweepPoint
    from .estimate import served_shapes
    from .options import Served

    shapes, sequences, bound = served_shapes(lineage, entry, Served(args.tokens, batch=batch, bind=args.bind or ()), {})
    found = estimated_profile(lineage, peaks, entry, shapes, context, sequences, bound)
    layers = {r.layer: r.us for r in make_report(lineage, found).layers}
    return SweepPoint(context, batch, layers, sum(layers.values()))


COMMAND = Command(
    "sweep", "serve an LLM entry at several contexts and batch sizes; fit each layer's time", add_arguments, run
)
