"""A build TVM itself failed, said in one line: where (the pass that raised, or code
generation and the PrimFunc it failed on), the layers whose ops that PrimFunc holds,
and whether plain ``tvm.compile`` fails the same way.

Evidence only, each piece found after the failure, never during the build:

- the pass: the recorder's ``Recording.running`` (a pass that raises reports no end, so
  it is the last one begun and not ended); none running means code generation failed,
  after the last pass;
- the PrimFunc: code generation is run again on each PrimFunc of the last module the
  passes left, alone; those that fail alone with the build's own error are named. A pass gives no such handle (the
  instrument sees its name, not the pass): the PrimFuncs its error text names are;
- the layers: origins followed through the partial recording
  (``follow.layers_of_callees``) to the bindings calling those PrimFuncs;
- plain ``tvm.compile``: the same module, target, pipeline and PassContext
  configuration, without any instrument, run again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from attrs import define

from .errors import RelaytraceError, describe

CODEGEN = "code generation"
_SHOWN = 6  # layers named in the line; more are counted


@define(frozen=True)
class BuildFailure:
    """Where TVM failed: ``step`` is ``pass NAME`` or ``code generation``;
    ``primfuncs`` those it failed on (when known) and ``layers`` the layers whose ops
    they hold; ``cause`` TVM's error (``errors.describe``); ``plain`` what plain
    ``tvm.compile`` did: ``same`` (failed the same way), ``built``, ``other: CAUSE`` or
    ``""`` (not tried)."""

    step: str
    primfuncs: tuple[str, ...]
    layers: tuple[str, ...]
    cause: str
    plain: str = ""

    def line(self) -> str:
        """The one line the CLI prints."""
        text = f"TVM's {self.step} failed"
        if self.primfuncs:
            text += f" on PrimFunc{'s' if len(self.primfuncs) > 1 else ''} {', '.join(self.primfuncs)}"
            if self.layers:
                more = len(self.layers) - _SHOWN
                text += (f", which holds ops of layer{'s' if len(self.layers) > 1 else ''} "
                         f"{', '.join(self.layers[:_SHOWN])}" + (f" and {more} more" if more > 0 else ""))
        elif self.step != CODEGEN:
            text += " (TVM does not say on which op)"
        text += f": {self.cause}"
        if self.plain == "same":
            text += ("; plain tvm.compile fails the same way: TVM's own failure, not relaytrace's (change the "
                     "model around it, or report it to TVM)")
        elif self.plain == "built":
            text += ("; plain tvm.compile (no instruments) builds it: relaytrace's tracing broke the build, "
                     "please report it to relaytrace")
        elif self.plain:
            text += f"; plain tvm.compile fails too, otherwise: {self.plain.split(': ', 1)[1]}"
        return text


class BuildFailedError(RelaytraceError):
    """TVM failed to build the model; ``failure`` says where (``BuildFailure``) and
    ``__cause__`` is TVM's own exception."""

    def __init__(self, failure: BuildFailure):
        super().__init__(failure.line())
        self.failure = failure


def diagnose(exc: Exception, recording, layer_of=None, target=None,
             plain: Callable[[], object] | None = None) -> BuildFailure:
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
    layers: tuple[str, ...] = ()
    if primfuncs:
        try:
            from .tracking.follow import layers_of_callees

            callers = layers_of_callees(recording, layer_of)
            layers = tuple(dict.fromkeys(layer for name in primfuncs for layer in callers.get(name, ())))
        except Exception:  # noqa: BLE001 - the layers are a help; TVM's failure is the news
            pass
    return BuildFailure(step, primfuncs, layers, cause, _plain_result(plain, exc) if plain else "")


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
    return tuple(name for name in functions
                 if name is not None and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text))


def _plain_result(plain: Callable[[], object], exc: Exception) -> str:
    """``same``, ``built`` or ``other: CAUSE`` for plain ``tvm.compile``."""
    try:
        plain()
    except Exception as again:  # noqa: BLE001 - its failure is the answer
        same = type(again) is type(exc) and describe(again) == describe(exc)
        return "same" if same else f"other: {describe(again)}"
    return "built"
