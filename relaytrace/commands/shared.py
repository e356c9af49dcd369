"""What several commands share: the build and device options, their checks, building
and profiling a model as the options say, the summary a run prints, the record of
how a run was made (run.json)."""

from __future__ import annotations

import argparse
from pathlib import Path

import attrs

from ..errors import RelaytraceError, UsageError, describe
from ..jobs import echo
from ..model.profile import Mode
from ..model.run_spec import Layout, PolicyName, Precision, RunSpec
from ..profiling.remote import LONGEST_WAIT_S
from ..render.safe_text import terminal
from .options import Served, Timing


def progress(args):
    """The progress line writer of a command: silent under ``--quiet``."""
    from ..jobs import Progress

    return Progress(args.quiet)


def timing(args) -> Timing:
    """The profiling options of a command that takes them all (``add_build_options``),
    checked: the peaks given (``given_peaks``)."""
    mode = Mode(args.mode) if args.mode else None
    return Timing(args.entry, mode, args.repeat, given_peaks(args), Served.from_args(args), args.inside)


def build_traced(model, run: RunSpec, say, remote=None, elsewhere: bool = False, name: str | None = None):
    """``(executable, lineage, remote)``: ``model`` built traced as ``run`` says (its
    target, pipeline, layout, precision, tuning database and passes), named ``name``
    (None: the model's own), for ``remote`` (a ``RemoteDevice``; None: this machine),
    which is checked (compiler, address, key) before the build. A build that cannot run
    here without one is refused before it is made, unless it is to run ``elsewhere`` (a
    bundle)."""
    from ..build import NHWC, build
    from ..profiling.remote import exporter, runs_here, target_name

    if remote is not None:  # a missing compiler, an address or key that answers not: said before the build
        exporter(run.target, remote.compiler)
        say(f"checking {remote.describe()}")
        remote.connect()
    elif not elsewhere and not runs_here(run.target):
        raise UsageError(
            f"a build for {target_name(run.target)} does not run on this machine: profile it on its "
            "device with --rpc HOST:PORT or --tracker HOST:PORT --key KEY (docs/remote.md)"
        )
    fp16 = run.precision == Precision.FP16
    say(
        f"building {getattr(model, 'name', 'model')} ({run.pipeline}, {run.layout}"
        f"{', float16 accumulating in float32' if fp16 else ''}) for {run.target}"
    )
    executable, lineage = build(
        model,
        run.target,
        pipeline=run.pipeline,
        model=name,
        convert_layout=NHWC if run.layout == Layout.NHWC else None,
        progress=say.passes,
        database=run.db,
        mixed_precision="float32" if fp16 else None,
        fold_batch_norm=run.fold_batch_norm,
        lift_params=run.lift_params,
        read_code=True,  # every output directory holds code.json: read behind LLVM's code generation
    )
    return executable, lineage, remote


def profile_built(built, options: Timing, say, inputs):
    """The ``Profile`` of a ``build_traced`` result on ``inputs``, as ``options`` say; a
    build may be profiled more than once."""
    from ..profiling.vm import profile

    executable, lineage, remote = built
    entry = lineage.entry(options.entry)
    mode = Mode.ISOLATED if remote is not None else options.mode or Mode.TIMELINE
    say(f"profiling {entry} ({mode}{', on ' + remote.describe() if remote else ''}, {options.repeat} run(s))")
    return profile(
        executable,
        lineage,
        list(inputs),
        repeat=options.repeat,
        mode=mode,
        progress=say,
        entry=entry,
        remote=remote,
        peaks=options.peaks,
        serving=serving(options.served, lineage, entry),
    )


def serving(served: Served, lineage, entry: str):
    """The ``Serving`` that ``served`` (``--tokens``, ``--context``, ``--batch``, ``--bind``)
    gives an entry that takes a KV cache (None leaves the defaults); an error for an
    entry that takes none."""
    from ..profiling.serve import Serving, takes_cache

    if not takes_cache(lineage, entry):
        if served.given:
            raise UsageError(
                f"--tokens, --context, --batch and --bind are for an entry that takes a KV cache; {entry} takes none"
            )
        return None
    if not served.given:
        return None
    from ..model.entry import default_context, of_any_length, step_tokens

    params = lineage.build.params[entry]
    if served.tokens is not None and not of_any_length(params):
        raise UsageError(
            f"{entry} runs {step_tokens(params, 1)} token(s) per sequence per step, fixed by its inputs: --tokens "
            "sizes an entry of any length (a prefill); give --context for the tokens before the step"
        )
    return Serving(
        tokens=served.tokens or 32,
        context=served.context if served.context is not None else default_context(params),
        sequences=served.batch or 1,
        bind=dict(served.bind),
    )


def add_peak_options(p) -> None:
    """The options that give a device's peaks instead of measuring them (``estimate``
    needs one of them)."""
    p.add_argument("--device", metavar="NAME", help="peaks of a named device (relaytrace peaks --list)")
    p.add_argument("--peak-gflops", type=at_least(0, float), metavar="G", help="peak GFLOP/s (a spec sheet's)")
    p.add_argument("--peak-gbps", type=at_least(0, float), metavar="B", help="peak memory bandwidth, GB/s")


def given_peaks(args):
    """The ``Peaks`` ``--device`` or ``--peak-gflops`` and ``--peak-gbps`` give, None when
    none is given (then they are measured where the profile runs)."""
    from ..model.peaks import given, named

    name, gflops, gbps = args.device, args.peak_gflops, args.peak_gbps
    if name is not None and (gflops is not None or gbps is not None):
        raise UsageError("give --device NAME or --peak-gflops and --peak-gbps, not both")
    if (gflops is None) != (gbps is None):
        raise UsageError("give both --peak-gflops and --peak-gbps (a roofline has two ceilings)")
    try:
        return named(name) if name is not None else given(gflops, gbps) if gflops is not None else None
    except RelaytraceError as exc:
        raise UsageError(str(exc)) from None


def check_target(text: str, given: str = "--target"):
    """The TVM target ``--target`` names, refused in one line before any work; ``given``
    says where the text came from (``DIR/run.json's target`` when read from a run)."""
    import tvm

    try:
        return tvm.target.Target(text)
    except Exception as exc:  # TVM's parser: ValueError, TVMError, ...
        raise UsageError(
            f"{given} {text!r} is not a TVM target ({describe(exc, 160)}): give a kind (llvm, "
            'cuda) or JSON such as \'{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}\''
        ) from None


def remote_device(args):
    """The RPC device ``--rpc`` or ``--tracker``/``--key`` name, or None to run here."""
    if not (args.rpc or args.tracker or args.key):
        if args.cc or args.kernel_timeout is not None:
            raise UsageError("--cc and --kernel-timeout apply to a remote device (--rpc or --tracker)")
        return None
    if args.rpc and args.tracker:
        raise UsageError("give --rpc HOST:PORT or --tracker HOST:PORT --key KEY, not both")
    if args.mode == Mode.TIMELINE:
        raise UsageError("a remote device is timed --mode isolated (the VM's per-call timer cannot run there)")
    from ..profiling.remote import RemoteDevice

    try:
        timeout = {} if args.kernel_timeout is None else {"kernel_timeout_s": args.kernel_timeout}
        return RemoteDevice(rpc=args.rpc, tracker=args.tracker, key=args.key, compiler=args.cc, **timeout)
    except RelaytraceError as exc:
        raise UsageError(str(exc)) from None


def summary(report, top: int = 10) -> str:
    """What ``profile``, ``demo``, ``report`` and ``estimate --out`` print: the profile's
    summary and warnings (and a line when nothing ran), the ``top`` layers, time by category, the peaks and the
    ``top`` layers by time above the roofline, the precision of a build not all
    float32, the memory peak and coverage. Rendered whole before any output is written,
    so that no command writes its outputs and then fails."""
    from ..model.profile import ESTIMATE
    from ..render.memory import memory_line
    from ..render.table import (
        category_table,
        coverage_summary,
        inside_summary,
        layer_table,
        precision_summary,
        roofline_summary,
    )

    lines = [f"{terminal(report.lineage.build.model)}: {report.profile.summary()}", *report.profile.warnings(), ""]
    if not report.lineage.call_sites:  # a forward that returns nothing compiles to nothing, and ran
        lines[-1:-1] = [
            "NOTHING RAN: the compiled entry calls no kernel; no op of the model reaches its result "
            "(does the model return what it computes? an op on an input in place is not kept)"
        ]
    lines += [f"top {top} layers (attribution policy {report.policy}):", layer_table(report.layers, top=top), ""]
    lines += [category_table(report.categories), ""]
    lines += [roofline_summary(report.roofline, top, estimate=report.profile.mode == ESTIMATE), ""]
    if report.precision.mixed:
        lines += [precision_summary(report.precision), ""]
    if report.inside:
        lines += [inside_summary(report.inside, top), ""]
    elif report.policy == PolicyName.MEASURED:
        lines += ["policy measured: no kernel was timed inside (profile --inside): each is billed as by split", ""]
    lines += [memory_line(report.memory), "", coverage_summary(report.lineage, report.coverage)]
    return "\n".join(lines)


def print_summary(text: str, out: Path) -> None:
    """``text`` (``summary``) and the files written to ``out``."""
    from ..render.outputs import NAMES

    echo(text)
    echo()
    echo(f"written to {out}/: {', '.join(n for n in NAMES if (out / n).exists())}")


def profile_into_out(
    args, model: str, shown: str, spec: str, collapse: int | None = None, name: str | None = None, **load_options
) -> int:
    """``profile`` and ``demo``: the target and device checked and ``--out`` prepared
    before any work, ``model`` (a model spec ``frontends.loader.load`` takes, with
    ``load_options``; ``shown`` in the progress line) imported, built (named ``name``;
    None: the model's own) and profiled as the options say, every output written
    (``spec``: run.json's model), the summary printed."""
    from ..analysis.report import make_report
    from ..frontends.loader import load
    from ..jobs import prepare_out_dir, write_outputs
    from ..model.entry import served_steps
    from ..render.steps import steps_summary

    say = progress(args)
    check_target(args.target)
    remote = remote_device(args)
    options = timing(args)
    run = RunSpec.from_args(args, spec)
    if options.inside:
        _check_inside(run, remote)
    out = prepare_out_dir(args.out, args.force)
    say(f"importing {shown}")
    loaded = load(model, entry=args.entry, **load_options)
    built = build_traced(loaded.model, run, say, remote, name=name)
    steps = served_steps(built[1].build.params) if args.entry is None and "main" not in built[1].build.entries else None
    prefill = None
    if steps is None:
        profiled = profile_built(built, options, say, loaded.inputs)
        if options.inside:
            profiled = _timed_inside(profiled, loaded, built[1], options, say)
        report = make_report(built[1], profiled, policy=args.policy)
        text = summary(report)
    elif options.inside:
        raise UsageError("--inside times one entry run on its inputs; an LLM served as prefill and decode: not yet")
    else:  # an LLM: its prompt's prefill, then a decode step after it, each served as an engine serves them
        prefill, report = (
            make_report(built[1], profile_built(built, step, say, ()), policy=args.policy)
            for step in _served_steps(options, steps)
        )
        text = f"{summary(report)}\n\n{steps_summary(prefill, report)}"
    write_outputs(out, report, run, collapse=collapse, overwrite=args.force, prefill=prefill)
    print_summary(text, out)
    return 0


def _check_inside(run: RunSpec, remote) -> None:
    """``--inside``'s refusals, before any work: an llvm build here, not tuned."""
    from ..profiling.inside import check_target as inside_target

    if remote is not None or run.db:
        raise UsageError(
            "--inside times an instrumented copy of the build on this machine, through the same pipeline: "
            "not on a remote device, not with a tuning database (not yet)"
        )
    inside_target(run.target)


def _timed_inside(profiled, loaded, lineage, options: Timing, say):
    """``profiled`` with each fused kernel of its entry timed inside (``Profile.inside``),
    through the pipeline the lineage says it was built by."""
    from ..profiling.inside import InsideRun, measure_inside, pipeline_of

    how = InsideRun(tuple(loaded.inputs), serving(options.served, lineage, profiled.entry), options.repeat)
    found = measure_inside(loaded.model.mod, pipeline_of(lineage.build), lineage, profiled.entry, how, say)
    return attrs.evolve(profiled, inside=found)


def _served_steps(options: Timing, steps: tuple[str, str]) -> tuple[Timing, Timing]:
    """The options of an LLM's two served steps: the prefill of ``--tokens`` (default 32),
    then a decode after ``--context`` (default: that prompt)."""
    tokens = options.served.tokens or 32
    context = options.served.context
    prefill = attrs.evolve(options, entry=steps[0], served=attrs.evolve(options.served, tokens=tokens, context=0))
    decode = attrs.evolve(
        options,
        entry=steps[1],
        served=attrs.evolve(options.served, tokens=None, context=tokens if context is None else context),
    )
    return prefill, decode


def absolute_factory(spec: str) -> str:
    """``path/to/file.py:factory`` with its path made absolute (a demo name as it is):
    run.json's model, found again from any directory."""
    if spec.startswith("demo:"):
        return spec
    path, _, factory = spec.rpartition(":")
    return f"{Path(path).resolve()}:{factory}"


def at_least(low, kind=int, strict: bool = True, most: float = float("inf")):
    """An argparse type: a number of ``kind`` no smaller than ``low`` (above it for
    floats, unless not ``strict``) and no larger than ``most``; a float is finite."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        above = kind is not int and strict
        if value != value:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        if value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} must be finite")
        if not ((value > low if above else value >= low) and value < float("inf")):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'above' if above else 'at least'} {low}")
        if value > most:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {most:g}")
        return value

    parse.__name__ = "count" if kind is int else "seconds"
    return parse


def add_pipeline_options(p, layout: bool = True) -> None:
    """``--pipeline`` (and ``--layout``), as every command that builds takes them."""
    p.add_argument(
        "--pipeline",
        default="fused",
        metavar="fused|unfused|NAME",
        help="fused (default), unfused, or a pipeline the model's file registers with "
        "tvm.relax.register_pipeline (a BYOC flow, MLC-LLM's), NAME:{JSON} giving it keyword arguments "
        "(the build's target unless given)",
    )
    if layout:
        p.add_argument(
            "--layout",
            choices=[m.value for m in Layout],
            default=Layout.NCHW.value,
            help="NHWC: ConvertLayout conv2d to NHWC/OHWI before the pipeline",
        )


def add_build_options(p, profiling: bool = True) -> None:
    """The build and device options of ``demo`` and ``profile`` (docs/cli.md); without
    ``profiling`` (``bundle``), the build options alone."""
    p.add_argument("--target", default="llvm", help="TVM target (default llvm)")
    add_pipeline_options(p)
    p.add_argument(
        "--precision",
        choices=[m.value for m in Precision],
        default=Precision.FP32.value,
        help="fp16: build through relax.transform.ToMixedPrecision, accumulating in float32 "
        "(default fp32: as imported)",
    )
    p.add_argument(
        "--fold-batch-norm",
        action="store_true",
        help="fold each batch norm into the conv before it (relax.transform.FoldBatchnormToConv2D)",
    )
    p.add_argument(
        "--lift-params",
        action="store_true",
        help="compute what depends on weights alone once, when they are loaded (relax.transform.LiftTransformParams)",
    )
    p.add_argument("--entry", metavar="NAME", help="entry function to profile (default main, or the only one)")
    if not profiling:
        p.set_defaults(rpc=None, tracker=None, key=None, cc=None, kernel_timeout=None, mode=None, inside=False)
        return
    p.add_argument(
        "--mode",
        choices=[Mode.TIMELINE.value, Mode.ISOLATED.value],
        default=None,
        help="timeline (default here) or isolated (the only mode on a remote device)",
    )
    p.add_argument("--rpc", metavar="HOST:PORT", help="profile on the device of this TVM RPC server")
    p.add_argument("--tracker", metavar="HOST:PORT", help="profile on a device from this TVM RPC tracker's pool")
    p.add_argument("--key", metavar="KEY", help="the device key (needed with --tracker; a server's own key with --rpc)")
    p.add_argument(
        "--cc",
        metavar="COMPILER",
        help="links the build for a remote device (default: MTRIPLE-g++ for a target of another CPU)",
    )
    p.add_argument(
        "--kernel-timeout",
        type=at_least(0, float, most=LONGEST_WAIT_S),
        metavar="S",
        help="seconds one call site may take on a remote device (default 120, at most a day)",
    )
    p.add_argument("--repeat", type=at_least(1), default=3, help="profiled runs (default 3)")
    p.add_argument(
        "--inside",
        action="store_true",
        help="also time each fused kernel's loop nests in an instrumented copy of the build (llvm on x86-64): "
        "inside.csv, and --policy measured bills by it",
    )
    add_serving_options(p)
    add_peak_options(p)
    add_policy_option(p)


def add_serving_options(p) -> None:
    """``--tokens``, ``--context``, ``--batch`` and ``--bind``: how an entry that takes a KV cache is
    served (``serving``)."""
    p.add_argument(
        "--tokens",
        type=at_least(1),
        metavar="N",
        help="an entry that takes a KV cache (an LLM's prefill): the tokens one step runs (default 32)",
    )
    p.add_argument(
        "--context",
        type=at_least(0),
        metavar="L",
        help="an entry that takes a KV cache: the tokens already in the cache before each step "
        "(default 32 for a decode, 0 for a prefill)",
    )
    p.add_argument(
        "--batch",
        type=at_least(1),
        metavar="B",
        help="a batch entry (MLC-LLM's batch_decode, batch_prefill): the sequences one step serves, "
        "each at its own context (default 1)",
    )
    p.add_argument(
        "--bind",
        action="append",
        type=dim_binding,
        metavar="DIM=VALUE",
        help="the value of a symbolic dim the step's size does not give (a weight's vocab_size the model "
        "declares none of); repeat for several; it overrides the model's own",
    )


def dim_binding(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` (``--bind``) as ``(name, value)``: a positive integer value."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected DIM=VALUE with a positive integer VALUE, not {text!r}")
    return name.strip(), int(value)


def add_policy_option(p) -> None:
    """``--policy``: how a fused kernel's time is billed to its layers
    (``attribution.POLICIES``); every output states it."""
    from ..analysis.attribution import POLICIES

    p.add_argument(
        "--policy",
        choices=[name.value for name in POLICIES],
        default=next(iter(POLICIES)).value,
        help="how a kernel's time is billed to layers: "
        + "; ".join(f"{p.name}: {p.about}" for p in POLICIES.values())
        + " (the first is the default); each "
        "layer's FLOPs are its own ops' under any",
    )


def add_model_options(p) -> None:
    """MODEL and its input options, for the commands that import a model file."""
    p.add_argument("model", metavar="MODEL", help="an .onnx file or path/to/file.py:factory (tasks: or an output DIR)")
    add_input_shape_option(p)
    p.add_argument("--dtype", help="dtype of inputs given a shape without one (default: the model's)")


class _InputShapes(argparse.Action):
    """``--input-shape``, repeatable: each value kept as given (run.json records them),
    parsed as it is met and refused in one line when it does not parse or names an
    input an earlier one named (one would silently win)."""

    def __call__(self, parser, namespace, value, option_string=None):
        from ..frontends.loader import given_shapes
        from ..jobs import parse_shape

        given = [*(getattr(namespace, self.dest, None) or []), value]
        try:
            given_shapes([parse_shape(text) for text in given], None)
        except UsageError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, given)


def add_input_shape_option(p) -> None:
    """``--input-shape NAME:DIMS[:DTYPE]`` (``_InputShapes``)."""
    p.add_argument(
        "--input-shape",
        action=_InputShapes,
        default=[],
        metavar="NAME:1x3x224x224[:DTYPE]",
        help="an input's size, and dtype (repeatable, once per input); needed for symbolic dims",
    )
