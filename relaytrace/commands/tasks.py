"""`relaytrace tasks`: MetaSchedule tuning tasks mapped to kernels and layers; --tune tunes them and rebuilds."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..jobs import echo
from ..render.safe_text import terminal
from .base import Command
from .shared import add_model_options, at_least, check_target, progress, remote_device


def add_arguments(p) -> None:
    """`relaytrace tasks`'s arguments and options (docs/cli.md#tasks)."""
    add_model_options(p)
    p.add_argument("--target", help="TVM target (default llvm, or the one an output DIR was made for)")
    p.add_argument("--tune", type=at_least(1), metavar="N", help="tune N trials per task, then rebuild")
    p.add_argument("--db", metavar="DIR", help="tuning database directory")
    p.add_argument("--tracker", metavar="HOST:PORT", help="measure tuning candidates on this tracker's devices")
    p.add_argument("--key", metavar="KEY", help="the devices' key in the tracker")
    p.set_defaults(rpc=None, mode=None, cc=None, kernel_timeout=None)
    p.add_argument("--out", metavar="lineage.json", help="write the tuned build's lineage")
    p.add_argument("--force", action="store_true")


def run(args) -> int:
    """`relaytrace tasks MODEL|DIR`: MetaSchedule tuning tasks mapped to kernels and
    layers; `--tune N --db DIR` tunes them."""
    from ..build import build
    from ..frontends.loader import load
    from ..jobs import parse_shape
    from ..model.run_spec import Layout, Precision, RunSpec
    from ..profiling import tasks
    from ..render.table import format_table

    say = progress(args)
    if args.tune is not None and not args.db:
        raise UsageError("--tune needs --db DIR for the tuning database")
    remote = remote_device(args)
    if remote is not None and args.tune is None:
        raise UsageError("--tracker measures tuning candidates: give --tune N --db DIR with it")
    spec, shapes, dtype, target = args.model, args.input_shape, args.dtype, args.target or "llvm"
    given = "--target"
    if Path(spec).is_dir():  # an output DIR: rebuild the model it was made from, as it was made
        info = RunSpec.load(spec)
        if info.pipeline != "fused" or info.layout != Layout.NCHW or info.precision != Precision.FP32:
            raise UsageError(
                f"{spec} was built {info.pipeline} with layout {info.layout} in {info.precision}; tasks "
                "are those of the fused NCHW fp32 build: profile the model that way, or pass the model "
                "itself"
            )
        spec, shapes, dtype, target = info.model, info.input_shapes, info.dtype, args.target or info.target
        given = given if args.target else f"{Path(args.model) / 'run.json'}'s target"
    target_text = target
    if remote is not None and "num-cores" not in check_target(target, given).attrs:
        raise UsageError(
            "tuning on a tracker's devices needs their core count in the target: give --target as JSON "
            'with "num-cores", e.g. \'{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 4}\''
        )
    target = tasks.tuning_target(check_target(target, given)) if args.tune else check_target(target, given)
    loaded = load(spec, shapes=[parse_shape(s) for s in shapes], dtype=dtype, with_inputs=False)
    mod = loaded.model.mod
    say("building (fused) and extracting MetaSchedule tasks")
    _, lineage = build(loaded.model, target, progress=say.passes)
    rows = tasks.extract(mod, target, lineage)
    echo(format_table(["task", "weight", "kernel", "layers"], [_task_row(r) for r in rows]))
    echo("\n" + _task_totals(rows, len(lineage.call_sites)))
    if args.tune:
        tasks.tune(mod, target, args.db, tasks.Trials(args.tune, len(rows)), progress=say, remote=remote)
        say("rebuilding with the tuned schedules")
        _, tuned = build(loaded.model, target, progress=say.passes, database=args.db)
        cov = tuned.coverage()
        echo(
            f"tuned build: {cov.attributed_sites}/{cov.call_sites} kernel call sites attributed"
            f"{'' if cov.complete else ' (INCOMPLETE)'}; {len(tuned.build.tuned)} of {len(tuned.kernels)} kernels "
            f"took a tuned schedule"
        )
        failed = tasks.failed_tasks(args.db)
        if failed:
            echo(
                f"{failed} task(s) kept the default schedule: every candidate failed to build or run "
                f"(MetaSchedule's logs: {Path(args.db) / 'logs'})"
            )
        echo(
            f"tuning database written to {args.db}; profile the tuned build with:\n"
            f"  {_profile_command(spec, shapes, dtype, target_text, args.db, remote)}"
        )
        if args.out:
            tuned.save(args.out, overwrite=args.force)
            echo(f"tuned lineage written to {args.out}")
    return 0


def _task_row(row) -> list:
    """A task's row: its name, weight, its kernel (``same`` when the task's name is the
    kernel's, as MetaSchedule names them; ``none`` when it became no kernel) and layers."""
    kernel = " ".join("same" if k == row.name else k for k in row.kernels) or "none (VM builtin or folded)"
    return [row.name, row.weight, kernel, ", ".join(row.layers)]


def _task_totals(rows, call_sites: int) -> str:
    """The tasks' weights against the build's kernel call sites, said as they are: a
    task that became no kernel of the build (a reshape run as a VM builtin) apart."""
    running = [r for r in rows if r.kernels]
    idle = [r.name for r in rows if not r.kernels]
    weight = sum(r.weight for r in running)
    relation = "=" if weight == call_sites else "!="
    text = f"{len(rows)} tasks; those with a kernel: total weight {weight} {relation} {call_sites} kernel call sites"
    if relation != "=":
        text += " (MetaSchedule's task weights and the lineage's call sites disagree)"
    if idle:
        text += (
            f"\n{len(idle)} task(s) became no kernel of this build (run as VM builtins or folded): "
            f"{', '.join(map(terminal, idle[:8]))}{' ...' if len(idle) > 8 else ''}"
        )
    return text


def _profile_command(spec, shapes, dtype, target: str, db, remote) -> str:
    """The ``relaytrace profile`` command that profiles a tuned build as it was tuned."""
    import shlex

    words = ["relaytrace", "profile", spec, "--db", str(db)]
    words += [w for shape in shapes for w in ("--input-shape", shape)]
    words += ["--dtype", dtype] if dtype else []
    words += ["--target", target] if target != "llvm" else []
    words += ["--tracker", remote.tracker, "--key", remote.key] if remote is not None else []
    return " ".join(map(shlex.quote, words + ["--out", "DIR"]))


COMMAND = Command("tasks", "MetaSchedule tuning tasks, their weights and layers", add_arguments, run)
