"""Follow a build while TVM generates its code: the tracking runs on a second thread
from the moment the Relax passes are done.

Why: once the last Relax pass has run, TVM lowers the kernels' TIR and compiles them
with LLVM, which takes a quarter to a third of a build and runs in C++ without the
interpreter lock; the recording of the Relax passes is complete by then. Following it
there costs the user little wall time on a machine with a spare core (on one core it
costs what following after the build does). The lineage is the same either way: the
thread follows a snapshot of the recording, and ``FollowAhead.result`` hands it over
only when nothing that matters to tracking was recorded after that snapshot;
otherwise the caller follows the whole recording as before.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Callable

import attrs

from ..model.lineage import Lineage
from .recorder import Recording

# While the thread runs, TVM's thread needs the interpreter lock for each pass
# instrument's call (the TIR passes'); Python's default 5 ms before the holder yields it
# is made a tenth of that, for that time only.
SWITCH_INTERVAL = 0.0005


class Cancelled(Exception):
    """The block the thread follows ended with an exception: its lineage is not wanted."""


class FollowAhead:
    """One build's follow on a thread. ``start(recording)`` (the recorder's
    ``on_lowering``: called once, in the build's thread, when the first top-level pass
    over a module without a Relax function of the model begins) snapshots the
    recording and follows the snapshot with ``follow(snapshot, on_step)``;
    ``result(recording)`` waits for it and returns its lineage, or None when there is
    none to trust: never started, the thread failed or met a fault the snapshot did not
    have, or the recording gained a Relax function or a fault after the snapshot (another
    build in the block, a Relax pass run after TIR-only ones). ``cancel()``: the thread
    stops at its next step."""

    def __init__(self, follow: Callable[[Recording, Callable[[str], None]], Lineage]):
        self._follow = follow
        self._thread: threading.Thread | None = None
        self._snapshot: Recording | None = None
        self._lineage: Lineage | None = None
        self._cancelled = False
        self._decided = False  # ``result`` answered, and let the snapshot go
        self._answer: Lineage | None = None

    def start(self, recording: Recording) -> None:
        """Snapshot ``recording`` and follow the snapshot on a daemon thread (a build
        interrupted by Ctrl-C does not wait for it at exit). A thread that cannot start
        leaves the follow to ``result``'s caller."""
        if self._thread is not None:
            return
        snapshot = self._snapshot = attrs.evolve(
            recording, passes=list(recording.passes), degraded=list(recording.degraded), running=list(recording.running)
        )
        thread = threading.Thread(target=self._run, args=(snapshot,), name="relaytrace-follow", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: follow after the build
            self._snapshot = None
            return
        self._thread = thread

    def cancel(self) -> None:
        """Stop the thread at its next step; its lineage is dropped."""
        self._cancelled = True

    def _step(self, name: str) -> None:
        if self._cancelled:
            raise Cancelled(name)

    def _run(self, snapshot: Recording) -> None:
        with _quiet_process():
            try:
                self._lineage = self._follow(snapshot, self._step)
            except BaseException:  # the caller follows the whole recording instead
                self._lineage = None

    def wait(self) -> None:
        """Wait for the thread, if one runs (before anything else reads the recording)."""
        if self._thread is not None:
            self._thread.join()

    def result(self, recording: Recording) -> Lineage | None:
        """The thread's lineage if it still describes ``recording`` (see the class), else
        None. Decided once: the snapshot (every module the build recorded) is let go then,
        and asked again, the answer is the same (a handle the user keeps keeps no IR)."""
        self.wait()
        if not self._decided:
            self._answer = self._describes(recording)
            self._decided, self._snapshot = True, None
        return self._answer

    def _describes(self, recording: Recording) -> Lineage | None:
        snap, lineage = self._snapshot, self._lineage
        if snap is None or lineage is None or self._cancelled or recording.degraded != snap.degraded:
            return None
        if len(lineage.journal.degraded) != len(snap.degraded):  # a fault on the thread: follow again, here
            return None
        if any(record.functions for record in recording.passes[len(snap.passes) :]):
            return None
        return lineage


_quiet = threading.Lock()
_quiet_count = 0
_quiet_saved: tuple[float, bool] = (0.0, True)


@contextlib.contextmanager
def _quiet_process():
    """The collector paused (as ``jsonio.gc_paused``) and the switch interval at
    ``SWITCH_INTERVAL`` while any follow thread runs; the first thread in saves both,
    the last one out restores them, so threads of builds traced at once (or nested
    ``trace()`` blocks) leave them as they found them."""
    global _quiet_count, _quiet_saved
    with _quiet:
        if _quiet_count == 0:
            _quiet_saved = (sys.getswitchinterval(), gc.isenabled())
            sys.setswitchinterval(SWITCH_INTERVAL)
            gc.disable()
        _quiet_count += 1
    try:
        yield
    finally:
        with _quiet:
            _quiet_count -= 1
            if _quiet_count == 0:
                sys.setswitchinterval(_quiet_saved[0])
                if _quiet_saved[1]:
                    gc.enable()
