"""What an instrumented copy of a build measured inside its fused kernels
(``profiling.inside``; ``relaytrace profile --inside``): for each call site, each of its
kernel's top-level statements (a loop nest: a member op's blocks) with the origins its
blocks compute there and its time in every run. Held by the ``Profile`` it was measured
with, and read by the ``measured`` attribution policy."""

from __future__ import annotations

import statistics

from attrs import frozen


@frozen
class InsidePart:
    """One top-level statement of a kernel at one call site: its blocks' names, the
    origins they compute there (none: blocks of no op; several: ops the statement runs
    together, which no stamp tells apart), its time in each run (µs). The kernel's time
    outside its statements (its buffers allocated and freed, its arguments unpacked) is
    a part of no blocks and no origins, its last."""

    blocks: tuple[str, ...]
    origins: tuple[str, ...]
    us: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return statistics.median(self.us) if self.us else 0.0


@frozen
class InsideOp:
    """The parts of a call site that compute the same origins (a conv's padding nest and
    its compute nest: one conv), their indices, and their time in each run, added."""

    origins: tuple[str, ...]
    parts: tuple[int, ...]
    us: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return statistics.median(self.us) if self.us else 0.0


@frozen
class InsideSite:
    """A call site (``kernel``'s ``call``-th call in the entry) timed inside: its parts
    in the order the kernel runs them, or none and why not (``note``: its ops run in
    one loop nest)."""

    kernel: str
    call: int
    parts: tuple[InsidePart, ...]
    note: str = ""

    @property
    def ops(self) -> tuple[InsideOp, ...]:
        """The parts grouped by the origins they compute, in the order each first runs:
        what every figure of the inside is made of (``analysis.inside``, the
        ``measured`` policy)."""
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, part in enumerate(self.parts):
            groups.setdefault(tuple(sorted(set(part.origins))), []).append(i)
        return tuple(
            InsideOp(origins, tuple(ids), tuple(sum(run) for run in zip(*(self.parts[i].us for i in ids))))
            for origins, ids in groups.items()
        )

    @property
    def median_us(self) -> float:
        """The instrumented kernel's time: its ops' medians added."""
        return sum(op.median_us for op in self.ops)
