"""A build TVM itself failed, said in one line: where (the pass that raised, or code
generation and the PrimFunc it failed on, or the model's op it met unlowered), the
layers whose ops those hold and the lines of the model's code that made them, the
known TVM limitation it matches with the way around it, and whether plain
``tvm.compile`` fails the same way.

Evidence only, each piece found after the failure, never during the build:

- the pass: the recorder's ``Recording.running`` (a pass that raises reports no end, so
  it is the last one begun and not ended); none running means code generation failed,
  after the last pass;
- the PrimFunc: code generation is run again on each PrimFunc of the last module the
  passes left, alone; those that fail alone with the build's own error are named. A pass gives no such handle (the
  instrument sees its name, not the pass): the PrimFuncs its error text names are;
- an op left unlowered: when no PrimFunc fails alone, a binding of the last module
  that calls a Relax op which is its own origin's op (no pass lowered it; the VM's code
  generation cannot emit it);
- the layers and lines: origins followed through the partial recording
  (``follow.origins_of_callees``) to the bindings calling those PrimFuncs or ops, and
  their ``Origin.source``;
- the limitation: the first of ``LIMITATIONS`` matching the step, TVM's error and one
  of those origins (its op and input dtypes);
- plain ``tvm.compile``: the same module, target, pipeline and PassContext
  configuration, without any instrument, run again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from attrs import define

from .errors import RelaytraceError, describe
from .model.names import Name
from .model.ops import short_op

CODEGEN = "code generation"
_SHOWN = 6  # layers named in the line; more are counted
_SOURCES = 3  # source lines named in the line


@define(frozen=True)
class Limitation:
    """A limitation of TVM met on real models, with the way around it: it matches a
    failure at ``step`` (``pass NAME`` or ``CODEGEN``) whose cause holds ``cause``, on
    an op ``op`` (its short name) with an input of ``dtype`` ("": any). ``what`` says
    the limitation, ``workaround`` what the user changes."""

    op: str
    step: str
    cause: str
    what: str
    workaround: str
    dtype: str = ""

    def matches(self, step: str, cause: str, origin) -> bool:
        """Whether this limitation explains a failure at ``step`` with ``cause`` on ``origin``'s op."""
        return (
            self.step == step
            and self.cause in cause
            and origin.short_op == self.op
            and (not self.dtype or self.dtype in origin.input_dtypes)
        )


LIMITATIONS = (  # extend as more are met: a test builds each one's model and checks its line
    Limitation(
        "cumsum",
        CODEGEN,
        "MatchesCode(DLDataTypeCode::kDLFloat)",
        "LLVM cannot compile a cumsum over booleans",
        "cast them to int32 before the cumsum; where transformers' default attention-mask code makes it, "
        "pass the model a 4-D float attention mask (batch, 1, query, key; 0 where attended, -inf where not), "
        "which skips that code",
        "bool",
    ),
    Limitation(
        "conv2d_transpose",
        CODEGEN,
        "CodeGenVM cannot emit this Relax operator",
        "LegalizeOps does not lower conv2d_transpose in NHWC and leaves it to the VM",
        "leave the layout NCHW (build without --layout NHWC)",
    ),
)


class Plain(Name):
    """What plain ``tvm.compile`` (the same module, target, pipeline and PassContext, no
    instruments) did with a build relaytrace saw fail."""

    NOT_TRIED = ""
    SAME = "same"  # failed the same way
    BUILT = "built"
    OTHER = "other"  # failed another way


@define(frozen=True)
class BuildFailure:
    """Where TVM failed: ``step`` is ``pass NAME`` or ``code generation``;
    ``primfuncs`` those it failed on (when known), ``unlowered`` the model's ops code
    generation met still as Relax ops (no pass lowered them), ``layers`` the layers of
    the ops they hold and ``sources`` where in the model's code those ops were made
    (``Origin.source``); ``cause`` TVM's error (``errors.describe``); ``plain`` what
    plain ``tvm.compile`` did (``Plain``), ``plain_cause`` its error when it failed
    otherwise; ``limitation`` the known TVM limitation it matches (``LIMITATIONS``), if
    any."""

    step: str
    primfuncs: tuple[str, ...]
    layers: tuple[str, ...]
    cause: str
    plain: Plain = Plain.NOT_TRIED
    plain_cause: str = ""
    unlowered: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    limitation: Limitation | None = None

    def line(self) -> str:
        """The one line the CLI prints."""
        text = f"TVM's {self.step} failed"
        if self.primfuncs or self.unlowered:
            text += (
                f" on PrimFunc{'s' if len(self.primfuncs) > 1 else ''} {', '.join(self.primfuncs)}"
                if self.primfuncs
                else f" on op{'s' if len(self.unlowered) > 1 else ''} {', '.join(self.unlowered)}, left unlowered"
            )
            if self.layers:
                more = len(self.layers) - _SHOWN
                text += (
                    f", which holds ops of layer{'s' if len(self.layers) > 1 else ''} "
                    f"{', '.join(self.layers[:_SHOWN])}" + (f" and {more} more" if more > 0 else "")
                )
            if self.sources:
                more = len(self.sources) - _SOURCES
                text += f" (made at {', '.join(self.sources[:_SOURCES])}" + (f" and {more} more)" if more > 0 else ")")
        elif self.step != CODEGEN:
            text += " (TVM does not say on which op)"
        text += f": {self.cause}"
        if self.limitation is not None:
            text += f"; a known TVM limitation: {self.limitation.what}; to build: {self.limitation.workaround}"
        if self.plain == Plain.SAME:
            text += "; plain tvm.compile fails the same way: TVM's own failure, not relaytrace's" + (
                "" if self.limitation else " (change the model around it, or report it to TVM)"
            )
        elif self.plain == Plain.BUILT:
            text += (
                "; plain tvm.compile (no instruments) builds it: relaytrace's tracing broke the build, "
                "please report it to relaytrace"
            )
        elif self.plain == Plain.OTHER:
            text += f"; plain tvm.compile fails too, otherwise: {self.plain_cause}"
        return text


class BuildFailedError(RelaytraceError):
    """TVM failed to build the model; ``failure`` says where (``BuildFailure``) and
    ``__cause__`` is TVM's own exception."""

    def __init__(self, failure: BuildFailure):
        super().__init__(failure.line())
        self.failure = failure


def diagnose(
    exc: Exception, recording, layer_of=None, target=None, plain: Callable[[], object] | None = None
) -> BuildFailure:
    """Where the build recorded in ``recording`` failed with ``exc``. ``target`` (a
    ``tvm.target.Target``) builds a PrimFunc alone when no pass names it; ``plain``
    runs plain ``tvm.compile`` once, to say whether it fails the same way. Each piece
    of evidence that cannot be had is left out; this never raises."""
    cause = describe(exc)
    step = f"pass {recording.running[-1]}" if recording.running else CODEGEN
    functions = _last_primfuncs(recording)
    if step == CODEGEN:
        primfuncs = _failing_alone(functions, target, cause)
    else:
        primfuncs = _named_in(str(exc), functions)
    callers: dict = {}
    if primfuncs or step == CODEGEN:
        try:
            from .tracking.follow import origins_of_callees

            callers = origins_of_callees(recording, layer_of)
        except Exception:  # noqa: BLE001 - the layers are a help; TVM's failure is the news
            pass
    # a model's op that reached code generation as itself: no pass lowered it
    unlowered = (
        {}
        if primfuncs or step != CODEGEN
        else {
            callee: tuple(o for o in found if o.op == callee)
            for callee, found in callers.items()
            if any(o.op == callee for o in found)
        }
    )
    failing = tuple(dict.fromkeys(o for name in primfuncs for o in callers.get(name, ()))) + tuple(
        o for found in unlowered.values() for o in found
    )
    limitation = next((lim for lim in LIMITATIONS for o in failing if lim.matches(step, cause, o)), None)
    named = [o for o in failing if limitation.matches(step, cause, o)] if limitation else failing
    outcome, plain_cause = _plain_result(plain, exc) if plain else (Plain.NOT_TRIED, "")
    return BuildFailure(
        step,
        primfuncs,
        tuple(dict.fromkeys(o.layer for o in named)),
        cause,
        outcome,
        plain_cause,
        tuple(dict.fromkeys(short_op(name) for name in unlowered)),
        tuple(dict.fromkeys(_short_source(o.source) for o in named if o.source)),
        limitation,
    )


def _short_source(source: str) -> str:
    """``file:line`` as a user finds it: an installed package's file from its package
    directory (``transformers/models/mistral/modeling_mistral.py:354``)."""
    return re.split(r"[/\\](?:site|dist)-packages[/\\]", source)[-1]


def _last_primfuncs(recording) -> dict:
    """name -> (GlobalVar, PrimFunc) of the last module recorded (code generation's
    input, after a failure there), the module's attributes under ``None``."""
    import tvm

    if not recording.passes:
        return {}
    module = recording.passes[-1].module
    found = {gv.name_hint: (gv, f) for gv, f in module.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    return {**found, None: module.attrs} if found else {}


def _failing_alone(functions: dict, target, cause: str) -> tuple[str, ...]:
    """The PrimFuncs whose code generation fails when each is built alone, for the
    target its ``target`` attribute names (BindTarget put it there), else ``target``,
    with the build's own ``cause`` (``errors.describe``). Another failure is no
    evidence: a PrimFunc built alone may lack a function it calls."""
    import tvm

    failing = []
    attrs = functions.get(None)
    for name, entry in functions.items():
        if name is None:
            continue
        gv, func = entry
        bound = func.attrs.get("target", None) if func.attrs is not None else None
        chosen = bound or target
        build = tvm.get_global_func(f"target.build.{chosen.kind.name}", allow_missing=True) if chosen else None
        if build is None:
            continue
        try:
            build(tvm.IRModule({gv: func}, attrs=attrs), chosen)
        except Exception as exc:  # noqa: BLE001 - failing here is what is looked for
            if describe(exc) == cause:
                failing.append(name)
    return tuple(failing)


def _named_in(text: str, functions: dict) -> tuple[str, ...]:
    """The PrimFuncs of ``functions`` that ``text`` names as whole words."""
    return tuple(
        name for name in functions if name is not None and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text)
    )


def _plain_result(plain: Callable[[], object], exc: Exception) -> tuple[Plain, str]:
    """What plain ``tvm.compile`` did, and its error when it failed otherwise."""
    try:
        plain()
    except Exception as again:  # noqa: BLE001 - its failure is the answer
        same = type(again) is type(exc) and describe(again) == describe(exc)
        return (Plain.SAME, "") if same else (Plain.OTHER, describe(again))
    return Plain.BUILT, ""
