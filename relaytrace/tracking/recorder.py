"""The PassInstrument: thin. During the build it only records what each pass left;
origins are followed through the record once the build is done, so nothing the
tracker does can break, change or slow the user's build while it runs."""

from __future__ import annotations

import contextlib
import gc
import traceback
from typing import Iterator

import tvm

from . import reader
from . import ir
from .tracker import Tracker
from .origins import LayerNamer, OriginTable, assign_origins, main_inputs
from .truth import kernel_members


class TraceSession:
    """State of one traced build: the recorded passes, the origins of the input, the
    tracker, what went wrong.

    Why record first and track after: interleaved with TVM's own work, every pass's
    tracking started with cold caches, and cost a quarter more than the same work
    done in one go. A pass's record is its module's Relax functions (``ir.function_map``),
    taken when the pass ran: functions never change, a module object may."""

    def __init__(self, layer_of: LayerNamer | None = None, progress=None):
        self.table: OriginTable | None = None
        self.layer_of = layer_of
        self.tracker: Tracker | None = None
        self.degraded: list[str] = []
        self.passes = 0
        self.inputs: tuple = ()
        self.progress = progress
        self.input: dict | None = None  # the functions of the first module seen
        self._first_pass = ""  # the pass that module went into
        self.recorded: list[tuple[dict, str]] = []  # (functions, pass name) after each pass since
        self.modules: list = []  # the module each recorded pass returned, for its PrimFuncs' attributes
        self.members: dict = {}  # kernel -> the PrimFuncs it is made of (``truth.kernel_members``)
        self.reads = reader.SharedReads()  # what the tracker read, read again by verification

    def before(self, mod, pass_name: str) -> None:
        if self.input is None and not self.degraded:
            self._guard(pass_name, self._take_input, mod, pass_name)

    def after(self, mod, pass_name: str) -> None:
        self.passes += 1
        if self.progress is not None:
            self.progress(self.passes, pass_name)
        if self.input is not None and not self.degraded:
            self._guard(pass_name, self._record, mod, pass_name)

    def tracking(self) -> Iterator[str]:
        """Follow origins through what was recorded, naming each step once it is done
        (``benchmarks/tracking_breakdown.py`` times them)."""
        if self.input is None or self.tracker is not None:
            return
        self._guard(self._first_pass, self._start)
        yield "origins + input walk"
        for functions, pass_name in self.recorded:
            if self.degraded:
                break
            self._guard(pass_name, self.tracker.observe, functions, pass_name)
            yield pass_name
        if not self.degraded:
            self._guard("verification", self._read_members)
            yield "kernel members (verification)"
        self.recorded, self.modules = [], []

    def _read_members(self) -> None:
        """What each kernel is made of, from the recorded IR alone (``verify``)."""
        self.members = kernel_members(self.input, self.recorded, self.reads.read, self.modules)

    def track(self) -> None:
        for _ in self.tracking():
            pass

    def _take_input(self, mod, pass_name: str) -> None:
        functions = ir.function_map(mod)
        if ir.model_functions(functions):
            self.inputs = main_inputs(mod)
            self.input, self._first_pass = functions, pass_name

    def _record(self, mod, pass_name: str) -> None:
        self.recorded.append((ir.function_map(mod), pass_name))
        self.modules.append(mod)

    def _start(self) -> None:
        self.table = assign_origins(self.input, self.layer_of, self.reads.read)
        tracker = Tracker(self.table, self.reads.read)
        tracker.start(self.input)
        self.tracker = tracker

    def _guard(self, pass_name, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # tracing must never break the build
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.degraded.append(
                f"tracking stopped at pass {pass_name}: {type(exc).__name__}: {exc} "
                f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
            )


@contextlib.contextmanager
def gc_paused():
    """Tracking allocates many small, short-lived objects; each collection they would
    set off walks TVM's and torch's large heaps, and would cost more than the tracking.
    What tracking keeps is mostly atomic tuples, which the collector does not track.
    One pause around all of it: a pause per step let a collection of everything the
    step made run at each step's end."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@tvm.ir.instrument.pass_instrument
class TracingInstrument:
    def __init__(self, session: TraceSession):
        self.session = session

    def run_before_pass(self, mod, info):
        self.session.before(mod, info.name)

    def run_after_pass(self, mod, info):
        self.session.after(mod, info.name)
