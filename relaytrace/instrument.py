"""The PassInstrument: thin. It hands each module to the tracker and makes sure that
nothing the tracker does can break or change the user's build."""

from __future__ import annotations

import contextlib
import gc
import traceback

import tvm

from . import ir
from .matching import Tracker
from .origins import LayerNamer, OriginTable, assign_origins, main_inputs


class TraceSession:
    """State of one traced build: origins of the input, the tracker, what went wrong."""

    def __init__(self, layer_of: LayerNamer | None = None, progress=None):
        self.table: OriginTable | None = None
        self.layer_of = layer_of
        self.tracker: Tracker | None = None
        self.degraded: list[str] = []
        self.passes = 0
        self.inputs: tuple = ()
        self.progress = progress

    def before(self, mod, pass_name: str) -> None:
        if self.tracker is not None or self.degraded:
            return
        self._guard(pass_name, self._start, mod)

    def after(self, mod, pass_name: str) -> None:
        self.passes += 1
        if self.progress is not None:
            self.progress(self.passes, pass_name)
        if self.tracker is None or self.degraded:
            return
        self._guard(pass_name, self.tracker.observe, mod, pass_name)

    def _start(self, mod) -> None:
        if next(ir.relax_functions(mod), None) is None:
            return
        self.inputs = main_inputs(mod)
        self.table = assign_origins(mod, self.layer_of)
        tracker = Tracker(self.table)
        tracker.start(mod)
        self.tracker = tracker

    def _guard(self, pass_name, fn, *args) -> None:
        try:
            with gc_paused():
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
    What tracking keeps is mostly atomic tuples, which the collector does not track."""
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
