"""The PassInstrument: thin. During the build it only records what each pass left
(``Recording``); origins are followed through the record once the Relax passes are
done (``follow.follow``, on a thread while TVM generates code: ``ahead``), so nothing
the tracker does can break or change the user's build, or slow its passes."""

from __future__ import annotations

from typing import Any, NamedTuple

import tvm
from attrs import define, field

from . import ir

FUSE_TIR = "FuseTIR"


class PassRecord(NamedTuple):
    """What one pass left: its module's Relax functions (``ir.function_map``), taken
    when the pass ran (functions never change, a module object may), and the module,
    for its PrimFuncs' attributes."""

    number: int
    pass_name: str
    functions: dict
    module: Any
    # FuseTIR's kernels as it left them (name -> PrimFunc), taken when it ended: a later
    # pass (DLight's schedules) may change the module object in place
    prim_funcs: dict | None = None


@define
class Recording:
    """One traced build as it was recorded: the functions of the first module with a
    Relax function (the *input*), the pass it went into, every pass since, the inputs
    of each of its entry functions, and what went wrong while recording.

    Why record first and track after: interleaved with TVM's own work, every pass's
    tracking started with cold caches, and cost a quarter more than the same work done
    in one go."""

    input: dict | None = None
    first_pass: str = ""
    passes: list[PassRecord] = field(factory=list)
    entries: tuple[str, ...] = ()  # the input's entry functions
    degraded: list[str] = field(factory=list)
    pass_count: int = 0  # every pass the instrument saw, recorded or not
    # passes begun and not ended, outermost first: while a build runs, those running now;
    # after one failed, the pass that raised is last (a pass that raises reports no end)
    running: list[str] = field(factory=list)

    def last_functions(self) -> dict:
        """The functions of the last recorded Relax module (the input's before any pass
        changed one; empty before the input was taken): what the VM runs, after the
        user's parameter passes too."""
        return next((p.functions for p in reversed(self.passes) if p.functions), self.input or {})


@tvm.ir.instrument.pass_instrument
class Recorder:
    """Records a build into ``self.recording``; ``progress(count, pass_name)`` is called
    after every pass; ``on_lowering(recording)`` once, when the Relax passes are done:
    as the first top-level pass over a module without a Relax function begins (TVM's
    TIR build), after the input was taken. Never raises into the build: a fault is
    written down instead; only the caller's ``progress`` may stop it, by raising
    (kept in ``progress_failure``, which ``trace()`` reports as the callback's)."""

    def __init__(self, progress=None, on_lowering=None):
        self.recording = Recording()
        self.progress = progress
        self.progress_failure: Exception | None = None  # what ``progress`` raised, if it did
        self.on_lowering = on_lowering
        # the top-level pass running now is over a module without a Relax function: the
        # passes it runs are recorded without reading their modules (see _record)
        self._tir_only = False
        # a pass begun with none running is one the user's code called (a pass that raises
        # never reports its end: after a failed build caught inside the block, no later pass
        # is at the top and a second build goes unnoticed)

    def run_before_pass(self, mod, info):
        """TVM's hook before a pass: it is pushed on ``running``; the first module with a
        Relax function is taken as the input, and a top-level pass given another module is
        checked to be of the same build, or to be over TIR alone. Nothing more once the
        recording is degraded."""
        rec = self.recording
        top = not rec.running
        rec.running.append(info.name)
        if rec.degraded:
            return
        if rec.input is None:
            self._guard(info.name, self._take_input, mod, info.name)
        elif (top or self._tir_only) and rec.passes and mod.__chandle__() != rec.passes[-1].module.__chandle__():
            self._guard(info.name, self._top_level, mod, info.name)

    def _top_level(self, mod, pass_name: str) -> None:
        """A top-level pass (one no other pass runs), or any pass while the module is
        TIR alone, given a module other than the last one recorded (in a sequence of
        passes each is given the module the one before it left: another module is
        another flow, e.g. a second build after a TIR pass raised and never ended).

        Over TIR alone: the Relax passes are done (``on_lowering`` is told, the first
        time). With Relax functions: the same build when it shares one with the last
        recorded module that had any (a TIR-only pass may run between), another build
        (a second ``tvm.compile`` in one traced block) when it shares none; that stops
        the recording, its passes are not this model's. A pass inside a Relax pass is
        not asked: it may see the outer pass's work in progress."""
        functions = ir.model_functions(ir.function_map(mod))
        self._tir_only = not functions
        if self._tir_only:
            if self.on_lowering is not None:
                tell, self.on_lowering = self.on_lowering, None
                tell(self.recording)
            return
        last = {f.__chandle__() for f in self.recording.last_functions().values()}
        if not any(f.__chandle__() in last for f in functions.values()):
            self.recording.degraded.append(
                f"another module entered the traced block at pass {pass_name} (two builds in one trace()?): "
                "the lineage is of the first build only; trace each build in its own block"
            )

    def run_after_pass(self, mod, info):
        """TVM's hook after a pass: it is popped off ``running`` and counted, ``progress``
        is told, and the module it left is recorded once the input is taken, unless the
        recording is degraded."""
        rec = self.recording
        rec.running.pop()
        rec.pass_count += 1
        if self.progress is not None:
            try:
                self.progress(rec.pass_count, info.name)
            except Exception as exc:  # the caller's own callback: its failure stops the build, said as its own
                self.progress_failure = exc
                raise
        if rec.input is not None and not rec.degraded:
            self._guard(info.name, self._record, mod, info.name)

    def _take_input(self, mod, pass_name: str) -> None:
        functions = ir.function_map(mod)
        if ir.model_functions(functions):
            rec = self.recording
            rec.entries, rec.input, rec.first_pass = tuple(ir.entry_functions(functions)), functions, pass_name

    def _record(self, mod, pass_name: str) -> None:
        """One ``PassRecord``. Under a top-level pass over TIR alone its functions are
        not read (none is Relax): reading a module from Python here waits for the lock
        the lineage's thread holds (``ahead``), and cost TVM's TIR passes a third more."""
        passes = self.recording.passes
        functions = {} if self._tir_only else ir.function_map(mod)
        prims = ir.prim_func_map(mod) if pass_name == FUSE_TIR else None
        passes.append(PassRecord(len(passes) + 1, pass_name, functions, mod, prims))

    def _guard(self, pass_name, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # tracing must never break the build
            self.recording.degraded.append(f"recording stopped at pass {pass_name}: {type(exc).__name__}: {exc}")
