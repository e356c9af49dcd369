"""How a run of a Relax VM is timed, call by call (the same in ``profiling.vm`` and in a
bundle's run.py): a timeline run stamps the clock before and after every call the VM
makes (``set_instrument``); with ``sync_each`` (a GPU) the device is synchronised before
the after-stamp, so a call's time is its kernels' on the device, not the launch's.
Isolated mode times each kernel call site alone on the arguments a captured run gave
it (``isolated``, with a timer per kernel: TVM's time evaluator, which synchronises
after its calls, or the clock around a library call's function)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .gpu import CudaEvents, Nvtx, with_events

NO_OP = 0  # relax.VMInstrumentReturnKind.NO_OP: the instrument lets the call run


KERNEL, BUILTIN, CACHE = "kernel", "builtin", "cache"  # model.profile.CallKind's values


def numbering():
    """``number(kernel)``: this call's number among the kernel's calls, in run order,
    each kernel's from 0 (``SiteKey.call``: relaytrace's ``model.sitekey.Calls``, which
    this file, run alone where relaytrace is not, keeps its own copy of)."""
    made: dict[str, int] = {}

    def number(name: str) -> int:
        call = made.get(name, 0)
        made[name] = call + 1
        return call

    return number


def pair(stamps, run: int, t0: int, kernels, skip=frozenset(), cache=frozenset()) -> list[tuple]:
    """Before/after stamps ``(ns, name, before)`` of one run into rows ``(name, call,
    run, start_us, duration_us, kind, within)`` (``model.profile.CallRecord``'s
    fields); calls of ``skip`` (Relax subfunctions, whose time is their kernels' and
    builtins') are left out. A call of ``cache`` (a KV-cache kernel, stamped inside the
    VM call that ran it) is a row of its own, ``within`` that call, whose duration then
    leaves it out: every microsecond is in one row."""
    number = numbering()
    stack: list[list] = []  # [name, call, start, time of cache kernels inside]
    rows = []
    for t, name, before in stamps:
        if name in skip:
            continue
        if before:
            stack.append([name, number(name), t, 0])
            continue
        name, k, start, inner = stack.pop()
        kind = CACHE if name in cache else KERNEL if name in kernels else BUILTIN
        within = f"{stack[-1][0]}#{stack[-1][1]}" if kind == CACHE and stack else ""
        if kind == CACHE and stack:
            stack[-1][3] += t - start
        rows.append((name, k, run, (start - t0) / 1e3, (t - start - inner) / 1e3, kind, within))
    return rows


@dataclass(frozen=True)
class Sites:
    """Which of the VM's calls are sites of the entry: calls of ``kernels``; none of
    ``skip`` (Relax subfunctions: their kernels are); the KV cache's ``cache`` kernels,
    stamped by the server, records of their own."""

    kernels: frozenset
    skip: frozenset = frozenset()
    cache: frozenset = frozenset()


@dataclass(frozen=True)
class Stamping:
    """How a timeline run stamps each call: ``sync()`` waits for the device (after the
    run; with ``sync_each``, before each after-stamp too: a GPU, whose calls return at
    launch); ``ranges``, an ``Nvtx`` whose ranges wrap each call; ``events``, a
    ``CudaEvents`` marked with every stamp, whose times replace the clock's (each call's
    time on the device, no synchronisation between calls)."""

    sync: Callable[[], None]
    sync_each: bool = False
    ranges: Nvtx | None = None
    events: CudaEvents | None = None


def timeline_run(set_instrument, call, run: int, sites: Sites, stamping: Stamping, server=None) -> list[tuple]:
    """One run (``call()``) stamped call by call through ``set_instrument`` (the VM's)
    as ``stamping`` says; rows as ``pair`` makes them. ``server``: an object whose
    ``sink`` is given the stamp list while the run lasts (``serve.Server``: its KV-cache
    kernels stamp it too)."""
    sync, sync_each, ranges, events = stamping.sync, stamping.sync_each, stamping.ranges, stamping.events
    stamps: list = []
    append = stamps.append
    clock = time.perf_counter_ns

    if events is not None:
        mark = events.mark

        def stamp(func, name, before, ret, *call_args):
            mark()
            append((clock(), name, before))
            return NO_OP
    elif ranges is not None:
        push, pop, name_of = ranges.push, ranges.pop, ranges.name_of
        number = numbering()

        def stamp(func, name, before, ret, *call_args):
            if before:
                push(name_of(name, number(name)))
                append((clock(), name, True))
            else:
                if sync_each:
                    sync()
                append((clock(), name, False))
                pop()
            return NO_OP
    elif sync_each:

        def stamp(func, name, before, ret, *call_args):
            if not before:
                sync()
            append((clock(), name, before))
            return NO_OP
    else:

        def stamp(func, name, before, ret, *call_args):
            append((clock(), name, before))  # the hot path: a record, nothing else
            return NO_OP

    set_instrument(stamp)
    if server is not None:
        server.sink = stamps
    t0 = time.perf_counter_ns()
    try:
        call()
        sync()
    finally:
        set_instrument(do_nothing)
        if server is not None:
            server.sink = None
    if events is not None:
        stamps = with_events(stamps, events, t0)
    return pair(stamps, run, t0, sites.kernels, sites.skip, sites.cache)


def do_nothing(*_):
    """An instrument that lets every call run, and a device's sync where there is none to wait for."""
    return NO_OP


def capture(set_instrument, call, skip, kernels, copy=None) -> tuple[dict, list]:
    """One run (``call()``) noting every call's arguments: ``({(name, call): (shapes,
    dtypes, addresses)}, [(kernel, call, copies)])``; ``copy`` (a tensor -> a copy of
    it on its device) copies each kernel call's arguments for isolated timing (none
    without it). Calls of ``skip`` (Relax subfunctions) are no sites. A failure of the
    run is raised as it came."""
    number = numbering()
    info: dict[tuple[str, int], tuple] = {}
    captured: list[tuple[str, int, list]] = []

    def note(func, name, before, ret, *call_args):
        if before and name not in skip:
            k = number(name)
            tensors = [a for a in call_args if hasattr(a, "shape")]
            info[(name, k)] = (
                tuple(tuple(int(d) for d in a.shape) for a in tensors),
                tuple(str(a.dtype) for a in tensors),
                tuple(int(a.data_ptr()) for a in tensors),
            )
            if copy is not None and name in kernels:
                captured.append((name, k, [copy(a) for a in tensors]))
        return NO_OP

    set_instrument(note)
    try:
        call()
    finally:
        set_instrument(do_nothing)
    return info, captured


def ran_counts(sites, builtins) -> dict[str, int]:
    """kernel -> how many times it ran, from ``(name, call)`` sites; VM builtins and the
    external calls among ``builtins`` (they compute no model op) are left out."""
    ran: dict[str, int] = {}
    for name, call in sites:
        if not name.startswith("vm.builtin.") and name not in builtins:
            ran[name] = max(ran.get(name, 0), call + 1)
    return ran


def count_mismatches(expected: dict[str, int], ran: dict[str, int], subfunctions=()) -> list[str]:
    """How ``ran`` (kernel -> calls seen in a run) differs from ``expected`` (kernel ->
    its call sites in the lineage): the evidence that a lineage belongs to another build."""
    problems = [
        f"{k}: {n} call site(s) in the lineage, {ran.get(k, 0)} ran" for k, n in expected.items() if ran.get(k, 0) != n
    ]
    return problems + [
        f"{k}: ran, but is not in the lineage" for k in ran if k not in expected and k not in subfunctions
    ]


def clocked(func, sync, repeat: int, number: int):
    """A timer of the packed function ``func`` like ``time_evaluator``'s: per run, the
    mean seconds of ``number`` calls, ``sync()`` after them."""

    def run(*args) -> tuple[float, ...]:
        results = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                func(*args)
            sync()
            results.append((time.perf_counter() - start) / number)
        return tuple(results)

    return run


def isolated(captured, timer_of, say) -> list[tuple]:
    """Each captured site ``(name, call, tensors)`` timed alone by ``timer_of(name)``
    (a callable of the tensors -> seconds per run): ``(name, call, seconds)``."""
    timings = []
    for i, (name, k, tensors) in enumerate(captured):
        say(f"isolated {i + 1}/{len(captured)}: {name}#{k}")
        timings.append((name, k, tuple(timer_of(name)(*tensors))))
    return timings


def site_rows(timings, repeat: int) -> list[tuple]:
    """Rows (as ``pair``'s) of sites timed alone (``(kernel, call, seconds per run)``),
    laid end to end in each run."""
    rows = []
    clock = [0.0] * repeat
    for name, k, results in timings:
        for run, seconds in enumerate(results):
            rows.append((name, k, run, clock[run], seconds * 1e6, KERNEL, ""))
            clock[run] += seconds * 1e6
    return rows


@dataclass(frozen=True)
class Plan:
    """How one profile's timed runs go, after the capturing run: ``warmup - 1`` more
    untimed runs of ``call`` (one run of the entry), then ``repeat`` timed ones in
    ``mode``: ``timeline`` (every call of ``sites`` stamped through the VM's
    ``set_instrument`` as ``stamping`` says, a ``server``'s KV-cache kernels among them)
    or ``isolated`` (each captured site timed alone)."""

    call: Callable[[], Any]
    set_instrument: Callable
    sites: Sites
    stamping: Stamping
    mode: str = "timeline"
    repeat: int = 5
    warmup: int = 1
    server: Any = None


def timed_rows(plan: Plan, captured, timer_of, say) -> list[tuple]:
    """The rows (as ``pair``'s) of ``plan``'s timed runs: the one orchestration
    ``profiling.vm`` and a bundle's run.py share. Isolated mode times each site of
    ``captured`` (``capture``'s copies) by ``timer_of(name)`` (``isolated``)."""
    for _ in range(max(plan.warmup - 1, 0)):
        plan.call()
    if plan.mode != "timeline":
        return site_rows(isolated(captured, timer_of, say), plan.repeat)
    rows = []
    for run in range(plan.repeat):
        say(f"timeline run {run + 1}/{plan.repeat}")
        rows.extend(timeline_run(plan.set_instrument, plan.call, run, plan.sites, plan.stamping, plan.server))
    return rows
