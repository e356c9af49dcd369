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

import sys
import threading
from collections.abc import Callable

import attrs

from ..model.lineage import Lineage
from .recorder import Recording, gc_paused

# While the thread runs, TVM's thread needs the interpreter lock for each pass
# instrument's call (the TIR passes'); Python's default 5 ms before the holder yields it
# is made a tenth of that, for that time only.
SWITCH_INTERVAL = 0.0005


class FollowAhead:
    """One build's follow on a thread. ``start(recording)`` (the recorder's
    ``on_lowering``: called once, in the build's thread, when the first top-level pass
    over a module without a Relax function begins) snapshots the recording and follows
    the snapshot with ``follow(snapshot)``; ``result(recording)`` waits for it and
    returns its lineage, or None when there is none to trust: never started, the
    thread failed, or the recording gained a Relax function or a fault after the
    snapshot (another build in the block, a Relax pass run after TIR-only ones)."""

    def __init__(self, follow: Callable[[Recording], Lineage]):
        self._follow = follow
        self._thread: threading.Thread | None = None
        self._snapshot: Recording | None = None
        self._lineage: Lineage | None = None

    def start(self, recording: Recording) -> None:
        """Snapshot ``recording`` and follow the snapshot on a daemon thread (a build
        interrupted by Ctrl-C does not wait for it at exit)."""
        if self._thread is not None:
            return
        self._snapshot = attrs.evolve(recording, passes=list(recording.passes), degraded=list(recording.degraded),
                                      running=list(recording.running))
        self._thread = threading.Thread(target=self._run, name="relaytrace-follow", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        try:
            with gc_paused():
                self._lineage = self._follow(self._snapshot)
        except BaseException:  # the caller follows the whole recording instead
            self._lineage = None
        finally:
            sys.setswitchinterval(interval)

    def wait(self) -> None:
        """Wait for the thread, if one runs (before anything else reads the recording)."""
        if self._thread is not None:
            self._thread.join()

    def result(self, recording: Recording) -> Lineage | None:
        """The thread's lineage if it still describes ``recording`` (see the class), else None."""
        self.wait()
        snap = self._snapshot
        if snap is None or self._lineage is None or recording.degraded != snap.degraded:
            return None
        if any(record.functions for record in recording.passes[len(snap.passes):]):
            return None
        return self._lineage
