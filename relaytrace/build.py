"""build() and trace(): compile with TVM as usual, and come back with a Lineage.

TVM is imported when one of them is called, not when this module is: ``import
relaytrace`` stays TVM-free for the data layer and the CLI's reading commands.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from .errors import RelaytraceError, UsageError, describe, expect, expect_number
from .model.build_facts import BuildFacts, BuildOptions, PrecisionPolicy
from .model.lineage import Lineage

if TYPE_CHECKING:
    from .tracking.origins import LayerNamer
    from .tracking.recorder import Recorder

PIPELINES = ("fused", "unfused")
ZOO_PIPELINE = "mlc_style"  # the zoo's pipeline written as MLC-LLM writes its own (zoo.mlc_pipeline), known by name
NHWC = {"relax.nn.conv2d": ["NHWC", "OHWI"]}  # what --layout NHWC asks ConvertLayout for
# the three builds (pipeline, convert_layout) goldens and generated models are checked in
BUILD_CONFIGS = {"unfused": ("unfused", None), "fused": ("fused", None), "nhwc": ("fused", NHWC)}


class Trace:
    """Handle returned by ``trace()``; ``lineage`` is set when the block exits.

    The recorded build is followed on a second thread while TVM generates its code
    (``tracking.ahead``); ``finish`` takes that lineage, or follows the recording itself
    when the thread's snapshot no longer describes it."""

    def __init__(  # noqa: PLR0913 - what trace() was given
        self,
        recorder: Recorder,
        layer_of,
        model: str,
        target: str,
        pipeline: str | BuildOptions,
        program=None,
        read_code: bool = False,
    ):
        from .tracking.ahead import FollowAhead

        self.recorder: Recorder | None = recorder  # None once finished: the record is let go
        self.layer_of = layer_of
        self.program = program
        self.model = model
        self.target = target
        self.pipeline = pipeline
        self.lineage: Lineage | None = None
        # what follows a recording, holding the build's facts and not this handle: the
        # thread's holder (``ahead``) is the handle's, and a method of the handle would
        # make a reference cycle that keeps the snapshot, every recorded module, alive
        # until the collector finds it
        self._follow = _follower(BuildFacts(model, target, pipeline), layer_of, program, read_code)
        self.ahead = FollowAhead(self._follow)
        recorder.on_lowering = self.ahead.start

    def finish(self) -> Lineage:
        """Follow the recorded build into a lineage; the record (the IR) is let go."""
        from .model.jsonio import gc_paused
        from .tracking.ir import built_target

        if self.recorder is None:
            raise RuntimeError("this trace is finished: its recording was followed once and let go")
        recording, self.recorder = self.recorder.recording, None
        if recording.input is None and not recording.degraded:
            self.ahead.wait()
            raise RelaytraceError(
                "no Relax module passed through the traced PassContext: call tvm.compile "
                "(or relax.build) inside the `with relaytrace.trace():` block"
            )
        lineage = self.ahead.result(recording)
        if lineage is None:
            with gc_paused():
                lineage = self._follow(recording)
        if not self.target:
            built = attrs.evolve(lineage.build, target=built_target([p.module for p in recording.passes]))
            lineage = attrs.evolve(lineage, build=built)
        self.lineage = lineage
        return lineage


def _follower(build: BuildFacts, layer_of, program, read_code: bool) -> Callable[..., Lineage]:
    """``(recording, on_step=None) -> Lineage``: ``follow`` of a recording of ``build``
    (its model, target and options) with the frontend's ``layer_of`` and ``program``,
    reading what outputs show during it when ``read_code``."""

    def follow_recording(recording, on_step=None) -> Lineage:
        from .tracking.follow import follow

        return follow(recording, layer_of, build=build, program=program, on_step=on_step, read_code=read_code)

    return follow_recording


@contextlib.contextmanager
def trace(  # noqa: PLR0913 - public API: keyword options, checked and then held in records
    model: str = "model",
    target: str = "",
    pipeline: str | BuildOptions = "user",
    layer_of: LayerNamer | None = None,
    progress=None,
    opt_level: int | None = None,
    program=None,
    read_code: bool = False,
):
    """Trace every pass run inside the block, e.g. around your own ``tvm.compile``.

    ``pipeline`` names the build's pipeline in the lineage (or is the ``BuildOptions``
    ``build`` made). ``layer_of`` and ``program`` come from a frontend's ``ImportedModel`` (its
    ``layer_of`` and ``program``): the layers, and the program verification holds them
    against (``model.frontend``).

    The current PassContext is kept: its opt_level (unless ``opt_level`` is given),
    config, required/disabled passes and instruments stay in force, with ours added
    last. Trace one build per block: a second module entering it stops the recording
    and marks the lineage degraded (not complete), saying so. ``read_code``: as
    ``build``'s (the code view's code and the memory plans read while following the
    build, not at their first ask).
    """
    from .tracking.recorder import Recorder

    expect("progress", progress, (Callable, None), "a function called as progress(count, pass_name)")
    if opt_level is not None:
        expect_number("opt_level", opt_level, 0, 4)
    recorder = Recorder(progress)
    handle = Trace(recorder, layer_of, model, target, pipeline, program, read_code)
    with _composed(recorder, opt_level):
        try:
            yield handle
        except BaseException:
            handle.ahead.cancel()  # the block failed: no lineage is wanted
            failed = recorder.progress_failure
            if failed is not None:  # TVM hands back its own copy of the exception
                raise RelaytraceError(
                    f"the progress callback {getattr(progress, '__qualname__', repr(progress))} "
                    f"raised {describe(failed)} (the build stopped after pass "
                    f"{recorder.recording.pass_count})"
                ) from failed
            raise
    handle.finish()


def _composed(recorder, opt_level: int | None = None):
    """The current PassContext with ``recorder`` added after its instruments (and
    ``opt_level`` when given): its config and required/disabled passes stay in force.
    Without a ``recorder``: the same context with no instrument at all (plain
    ``tvm.compile``, as ``diagnosis`` reruns it)."""
    import tvm

    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=current.opt_level if opt_level is None else opt_level,
        required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        config=dict(current.config),
        instruments=list(current.instruments) + [recorder] if recorder is not None else [],
    )


def build_pipeline(  # noqa: PLR0913 - public API: the build's options, each optional
    pipeline,
    target,
    convert_layout: Mapping[str, list] | None = None,
    mixed_precision: str | None = None,
    fold_batch_norm: bool = False,
    lift_params: bool = False,
    observe=None,
):
    """The Relax pipeline to run: "fused", "unfused", the name of a pipeline registered
    with TVM (``tvm.relax.register_pipeline``: a model's file may register one, such as
    a BYOC flow, or MLC-LLM's; ``NAME:{JSON}`` gives it arguments, ``registered_pipeline``)
    or a tvm Pass, after an optional
    ConvertLayout, after an optional ``relax.transform.ToMixedPrecision`` whose
    accumulators (conv, matmul outputs) are ``mixed_precision`` ("float32" or
    "float16"): float16 compute for the ops it converts, after an optional
    ``relax.transform.FoldBatchnormToConv2D`` (``fold_batch_norm``: each batch norm
    after a conv folded into its weights and a bias add; with a layout conversion,
    ``FoldConstant`` computes the folded weights first, and the fold must come first:
    it matches NCHW convs only), and last before the pipeline an optional
    ``relax.transform.LiftTransformParams`` (``lift_params``: what each entry computes
    from weights alone moves into ``X_transform_params``, run once when the weights are
    loaded). ``observe``: a pass run right after ToMixedPrecision (where it would run
    when there is none), before ConvertLayout: ``analysis.observe``'s, which writes
    chosen values out of their kernels as the build computes them."""
    import tvm
    from tvm import relax

    if isinstance(pipeline, str):
        if pipeline.partition(":")[0] == ZOO_PIPELINE:
            from .zoo import mlc_pipeline  # noqa: F401 - registers it with TVM
        if pipeline == "fused":
            base = relax.get_default_pipeline(target)
        elif pipeline == "unfused":
            base = relax.get_pipeline("default")
        elif pipeline.partition(":")[0] in relax.pipeline.PIPELINE_MAP:
            base = registered_pipeline(pipeline, target)
        else:
            raise UsageError(
                f"unknown pipeline {pipeline!r}: use one of {PIPELINES}, a pipeline registered with "
                f"tvm.relax.register_pipeline (registered: {', '.join(sorted(relax.pipeline.PIPELINE_MAP))}) "
                "or a tvm Pass"
            )
    elif isinstance(pipeline, tvm.transform.Pass):
        base = pipeline
    else:
        raise RelaytraceError(
            f"pipeline must be 'fused', 'unfused' or a tvm.transform.Pass, not {type(pipeline).__name__}"
        )
    before = [relax.transform.FoldBatchnormToConv2D()] if fold_batch_norm else []
    if fold_batch_norm and convert_layout:
        # the folded weights computed before ConvertLayout sees them: TVM 0.27's
        # ConvertLayout segfaults on the fold's unfolded weight arithmetic
        before.append(relax.transform.FoldConstant())
    if mixed_precision is not None:
        if mixed_precision not in ("float32", "float16"):
            raise RelaytraceError(f"mixed precision accumulates in float32 or float16, not {mixed_precision!r}")
        before.append(relax.transform.ToMixedPrecision(out_dtype=mixed_precision))
    if observe is not None:
        before.append(observe)
    if convert_layout:
        before.append(relax.transform.ConvertLayout({op: list(layouts) for op, layouts in convert_layout.items()}))
    if lift_params:
        before.append(relax.transform.LiftTransformParams())
    if not before:
        return base
    return tvm.transform.Sequential([*before, base], name="relaytrace_pipeline")


def registered_pipeline(text: str, target):
    """The pipeline TVM has registered as ``NAME`` made from ``NAME`` or
    ``NAME:{"key": value, ...}`` (a JSON object of its keyword arguments: MLC-LLM's
    ``mlc_llm:{"flashinfer": false, "metadata": {...}}``); a function that takes a
    ``target`` and is given none is given the build's. Arguments it does not take, or
    that are no JSON object, are a one-line ``UsageError`` naming what it takes; a
    function that raises, a ``RelaytraceError`` saying so."""
    import inspect
    import json

    import tvm
    from tvm import relax
    from tvm.target import Target

    name, _, given = text.partition(":")
    try:
        kwargs = json.loads(given) if given else {}
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--pipeline {name}:ARGS takes a JSON object of its arguments; {given!r} is not JSON: {exc}"
        ) from None
    if not isinstance(kwargs, dict):
        raise UsageError(f"--pipeline {name}:ARGS takes a JSON object of its arguments, not {given!r}")
    make = relax.pipeline.PIPELINE_MAP[name]
    try:
        params: Mapping[str, inspect.Parameter] = inspect.signature(make).parameters
    except (TypeError, ValueError):
        params = {}
    if "target" in params and "target" not in kwargs:
        kwargs["target"] = Target(target) if isinstance(target, (str, dict)) else target
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    unknown = sorted(set(kwargs) - set(params)) if params and not takes_any else []
    if unknown:
        raise UsageError(
            f"the pipeline {name} takes no argument {unknown[0]!r}: it takes {', '.join(params) or 'none'}"
        )
    try:
        made = make(**kwargs)
    except Exception as exc:
        raise RelaytraceError(f"the pipeline {name} could not be made: {describe(exc)}") from exc
    if not isinstance(made, tvm.transform.Pass):
        raise RelaytraceError(
            f"the pipeline {name} made a {type(made).__name__}, not a tvm.transform.Pass: "
            "a registered pipeline's function returns the pass to run"
        )
    return made


def build(  # noqa: PLR0913 - public API: keyword options, checked and then held in records
    mod,
    target="llvm",
    pipeline="fused",
    convert_layout=None,
    *,
    model: str | None = None,
    example_args=None,
    opt_level: int = 3,
    layer_of: LayerNamer | None = None,
    progress=None,
    database=None,
    mixed_precision: str | None = None,
    fold_batch_norm: bool = False,
    lift_params: bool = False,
    read_code: bool = False,
):
    """Compile ``mod`` for ``target``; return ``(executable, lineage)``.

    The executable is exactly what ``tvm.compile`` gives for the same pipeline. The
    PassContext you entered stays in force as for ``trace()`` (its instruments, config,
    required and disabled passes), at ``opt_level`` (build's own argument, default 3).
    ``database``: a MetaSchedule database directory (``relaytrace tasks --tune N --db
    DIR``) whose schedules are applied after FuseTIR, on the fused CPU pipeline.
    ``mixed_precision``: build through ``ToMixedPrecision`` accumulating in that dtype
    (``build_pipeline``); the casts it inserts are traced as inserted ops.
    ``fold_batch_norm``: fold each batch norm into the conv before it first
    (``relax.transform.FoldBatchnormToConv2D``; the tracker's ``constants`` rule follows
    it: the conv keeps its origin, the bias add takes the norm's).
    ``lift_params``: ``relax.transform.LiftTransformParams`` first, so that what each
    entry computes from weights alone (a Linear's weight transposed) runs once, in
    ``X_transform_params``, not at every call (``advise``'s weight-only-compute).
    ``read_code``: read the code view's code (``lineage.code``) during the build, on
    the thread that follows it behind LLVM's code generation, rather than at its first
    ask (the default: printing it is a third of tracking's time, and only outputs that
    show the code need it; the CLI, which always writes code.json, reads it now), and
    each entry's memory plan (``lineage.build.memory``, likewise put off by default).

    When TVM fails (a pass, code generation), a ``diagnosis.BuildFailedError`` says
    where, on which PrimFunc and layers, and whether plain ``tvm.compile`` (run again
    without instruments) fails the same way; TVM's exception is its ``__cause__``.
    """
    import tvm

    from .frontends.loader import load

    _check_target(target, convert_layout)
    _check_options(model, opt_level, layer_of, database, fold_batch_norm, lift_params)
    imported = load(mod, example_args, name=model, with_inputs=False).model
    mod, layer_of, name = imported.mod, layer_of or imported.layer_of, model or imported.name
    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    if database is not None:
        from .profiling import tasks

        if pipeline != "fused" or convert_layout or mixed_precision or fold_batch_norm or lift_params:
            raise RelaytraceError(
                "a tuning database applies to the fused pipeline alone: without --layout NHWC, mixed precision, "
                "--fold-batch-norm or --lift-params"
            )
        target = tasks.tuning_target(target)
        seq = tasks.tuned_pipeline(target, tasks.open_database(database))
    else:
        seq = build_pipeline(pipeline, target, convert_layout, mixed_precision, fold_batch_norm, lift_params)
    options = BuildOptions(
        pipeline if isinstance(pipeline, str) else str(pipeline.info.name),
        str(database or ""),
        {op: tuple(v) for op, v in (convert_layout or {}).items()},
        mixed_precision,
        bool(fold_batch_norm),
        bool(lift_params),
    )
    plain_context = _composed(None, opt_level)  # the caller's, before ours is entered
    with trace(
        model=name,
        target=str(target),
        pipeline=options,
        layer_of=layer_of,
        progress=progress,
        opt_level=opt_level,
        program=imported.program,
        read_code=read_code,
    ) as handle:
        try:
            executable = tvm.compile(mod, target, relax_pipeline=seq)
        except Exception as exc:
            if handle.recorder.progress_failure is not None:
                raise  # the caller's callback, not TVM: trace() says so
            failure = _diagnosed(exc, handle, layer_of, target, lambda: _compile_in(plain_context, mod, target, seq))
            if failure is None:
                raise
            from .diagnosis import BuildFailedError

            raise BuildFailedError(failure) from exc
    lineage = handle.lineage
    if mixed_precision:
        lineage = attrs.evolve(
            lineage,
            build=attrs.evolve(
                lineage.build, accumulate=mixed_precision, policies=mixed_precision_policies(lineage.origins)
            ),
        )
    return executable, lineage


def _check_target(target, convert_layout) -> None:
    """``build``'s target and layouts, each of its type, or a ``UsageError`` saying what
    to give."""
    import tvm

    expect("build(target=)", target, (str, dict, tvm.target.Target), "a TVM target: 'llvm', a dict or a Target")
    expect(
        "build(convert_layout=)",
        convert_layout,
        (Mapping, None),
        "a mapping of op to layouts, e.g. relaytrace.build.NHWC ({'relax.nn.conv2d': ['NHWC', 'OHWI']})",
    )
    for op, layouts in (convert_layout or {}).items():
        expect(f"build(convert_layout=)'s {op!r}", layouts, (list, tuple), "a list of layouts, e.g. ['NHWC', 'OHWI']")


def _check_options(model, opt_level, layer_of, database, fold_batch_norm, lift_params) -> None:
    """``build``'s other arguments, each of its type and range, or a ``UsageError`` saying
    what to give (``pipeline``, ``mixed_precision`` and ``progress`` are checked where used)."""
    import os

    expect("build(model=)", model, (str, None), "the model's name (a str)")
    expect_number("build(opt_level=)", opt_level, 0, 4)
    expect("build(layer_of=)", layer_of, (Callable, None), "a function layer_of(function, var_handle, position)")
    expect("build(database=)", database, (str, os.PathLike, None), "a MetaSchedule database directory")
    expect("build(fold_batch_norm=)", fold_batch_norm, bool, "True or False")
    expect("build(lift_params=)", lift_params, bool, "True or False")


_POLICIES = dict(enumerate(PrecisionPolicy))  # TVM's MixedPrecisionPolicyKind: 0 always, 1 follow, 2 never


def mixed_precision_policies(origins) -> dict[str, PrecisionPolicy]:
    """Each op of the ``origins``' ``ToMixedPrecision`` policy as this TVM registers it
    (``TMixedPrecisionPolicy``): "always", "follow" or "never"; an op registered without
    one is "never", as the pass takes it (``GetMixedPrecisionInfo``)."""
    import tvm

    out = {}
    for op in sorted({o.op for o in origins.values()}):
        try:
            policy = tvm.ir.Op.get(op).get_attr("TMixedPrecisionPolicy")
        except Exception:  # not a registered op (a call to a function): the pass leaves it alone
            continue
        kind = PrecisionPolicy.NEVER if policy is None else _POLICIES.get(int(policy))
        if kind is not None:  # a kind this relaytrace does not know: the op's policy is left unsaid
            out[op] = kind
    return out


def _compile_in(context, mod, target, pipeline):
    import tvm

    with context:
        return tvm.compile(mod, target, relax_pipeline=pipeline)


def _diagnosed(exc: Exception, handle: Trace, layer_of, target, plain):
    """Where TVM's failure ``exc`` happened (``diagnosis.BuildFailure``), or None when
    tracing had stopped before (the recording says nothing sure) or ``exc`` is TVM's
    error for ``relaytrace`` itself: a RelaytraceError, a Ctrl-C (``failures``: then
    the interrupt is raised). The follow thread, if one runs, is stopped first: the
    diagnosis reads the recording it reads."""
    from .diagnosis import diagnose
    from .failures import stop_if_interrupted

    handle.ahead.cancel()
    stop_if_interrupted()
    handle.ahead.wait()
    if handle.recorder is None:  # finished: the failure came after the recording was followed
        return None
    recording = handle.recorder.recording
    if recording.degraded or recording.input is None or isinstance(exc, RelaytraceError):
        return None
    return diagnose(exc, recording, layer_of, target, plain)
