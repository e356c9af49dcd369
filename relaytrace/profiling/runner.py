"""How a run of a Relax VM is timed, call by call, with TVM's runtime alone: the one
copy of relaytrace's timing, used by ``profiling.vm`` here and copied whole as the
``run.py`` of a bundle (``relaytrace bundle``), which profiles a build where no
compiler, no ``tvm`` package and no relaytrace are installed.

So this module imports nothing of relaytrace and, at the top, nothing but the
standard library and numpy; run as a script it also imports ``tvm_ffi`` and loads the
bundle's ``libtvm_runtime.so`` (ctypes, global), then the exported library
(``vm_load_executable``, ``vm_initialization``), as TVM's own ``VirtualMachine`` does.
What it writes is ``profile.json`` in relaytrace's format: the bundle carries a
template of it (every field relaytrace knows before the run: model, target, entry,
inputs, schema) and the runner fills in the records, each site's arguments and the
end-to-end times; ``relaytrace report DIR`` reads it back with the lineage.

Timing (the same here and in ``profiling.vm``): a timeline run stamps the clock before
and after every call the VM makes (``set_instrument``); with ``sync_each`` (a GPU) the
device is synchronised before the after-stamp, so a call's time is its kernels' on
the device, not the launch's. Isolated mode times each kernel call site alone on the
arguments a captured run gave it (TVM's ``RPCTimeEvaluator``, which synchronises
after its calls), a library call by the clock around its function. ``--nvtx`` wraps
each call in an NVTX range named after its layer and site (Nsight Systems and
Nsight Compute show layers), through ``libnvToolsExt`` found by ctypes.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import hashlib
import json
import os
import platform
import signal
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NO_OP = 0  # relax.VMInstrumentReturnKind.NO_OP: the instrument lets the call run
KERNEL, BUILTIN, CACHE = "kernel", "builtin", "cache"  # model.profile.CallKind's values
BUNDLE_SCHEMA = "relaytrace.bundle/3"  # /2: the peak kernels (peaks.so); /3: each file sealed ("files")
DEVICE_TYPES = {"cpu": 1, "cuda": 2}  # DLPack device types
POOLED = 2  # the VM's pooled allocator
TIMED_CHUNK = 50  # timings per call of the runtime's time evaluator (a Ctrl-C waits for one call)


# -- the timing both relaytrace and the bundle's run.py use ----------------------------


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
        set_instrument(_no_op)
        if server is not None:
            server.sink = None
    if events is not None:
        stamps = with_events(stamps, events, t0)
    return pair(stamps, run, t0, sites.kernels, sites.skip, sites.cache)


def _no_op(*_):
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
        set_instrument(_no_op)
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


# -- NVTX ranges ------------------------------------------------------------------------

_NVTX_NAMES = ("libnvToolsExt.so.1", "libnvToolsExt.so")


class Nvtx:
    """NVTX ranges through ``libnvToolsExt`` (``nvtxRangePushA``/``nvtxRangePop``), each
    named ``layer [kernel#call]`` (``names``: site -> layer). Found by ctypes: the path
    in ``RELAYTRACE_NVTX``, the loader's search, a CUDA toolkit's, or the pip package
    ``nvidia-nvtx-cu*`` (PyTorch's) on ``sys.path``; ``Nvtx.find`` returns None without
    one."""

    def __init__(self, lib, names: dict[str, str]):
        self._push, self._pop = lib.nvtxRangePushA, lib.nvtxRangePop
        self._push.argtypes = [ctypes.c_char_p]
        self._names = names

    def name_of(self, kernel: str, call: int) -> bytes:
        site = f"{kernel}#{call}"
        layer = self._names.get(site)
        return (f"{layer} [{site}]" if layer else site).encode("utf-8", "replace")

    def push(self, name: bytes) -> None:
        self._push(name)

    def pop(self) -> None:
        self._pop()

    @classmethod
    def find(cls, names: dict[str, str]) -> Nvtx | None:
        for path in _nvtx_candidates():
            try:
                return cls(ctypes.CDLL(path), names)
            except (OSError, AttributeError):
                continue
        return None


def _nvtx_candidates() -> list[str]:
    found = [os.environ["RELAYTRACE_NVTX"]] if os.environ.get("RELAYTRACE_NVTX") else []
    by_loader = ctypes.util.find_library("nvToolsExt")
    found += [by_loader] if by_loader else []
    found += list(_NVTX_NAMES)
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"] + [str(Path(p) / "nvidia" / "nvtx") for p in sys.path]
    found += [str(Path(r) / lib / n) for r in roots if r for lib in ("lib", "lib64") for n in _NVTX_NAMES]
    return found


class CudaEvents:
    """CUDA events on the default stream (TVM's), through the CUDA runtime library by
    ctypes (``runtime.timer.cuda`` gives Python no start or stop): ``mark()`` records
    one, ``offsets_ns()`` (after a synchronisation) each mark's time after the first, on
    the device's clock."""

    def __init__(self, lib):
        self._lib = lib
        self._events: list = []
        self._used = 0

    def mark(self) -> None:
        if self._used == len(self._events):
            event = ctypes.c_void_p()
            self._check(self._lib.cudaEventCreate(ctypes.byref(event)), "cudaEventCreate")
            self._events.append(event)
        self._lib.cudaEventRecord(self._events[self._used], None)
        self._used += 1

    def offsets_ns(self) -> list[int]:
        """Each mark's nanoseconds after the first; the marks are then reused."""
        ms = ctypes.c_float()
        out = []
        for event in self._events[: self._used]:
            self._check(
                self._lib.cudaEventElapsedTime(ctypes.byref(ms), self._events[0], event), "cudaEventElapsedTime"
            )
            out.append(int(ms.value * 1e6))
        self._used = 0
        return out

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code:
            raise BundleError(f"{what} failed with CUDA error {code}")

    @classmethod
    def find(cls) -> CudaEvents | None:
        for path in ("libcudart.so.13", "libcudart.so"):
            try:
                return cls(ctypes.CDLL(path))
            except OSError:
                continue
        return None


def with_events(stamps, events: CudaEvents, t0: int) -> list:
    """Stamps whose times are the events recorded with them (one per stamp, in order),
    placed on the clock at the first stamp: each call's duration is then the device's."""
    offsets = events.offsets_ns()
    first = stamps[0][0] if stamps else t0
    return [(first + offset, name, before) for offset, (_, name, before) in zip(offsets, stamps)]


# -- serving an entry through its KV cache ------------------------------------------------

DECODE_MARGIN = 8  # tokens the cache holds beyond the context and the step
FILL_CHUNK = 2048  # tokens a context is filled with per prefill call (MLC-LLM's usual prefill_chunk_size)


def fill_chunks(context: int, chunk: int = FILL_CHUNK) -> list[int]:
    """The lengths of the prefill calls that fill a ``context`` of tokens, at most
    ``chunk`` each, in order (none for no context)."""
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise BundleError(f"a context is filled in chunks of a whole number of tokens at least 1, not {chunk!r}")
    return [chunk] * (context // chunk) + ([context % chunk] if context % chunk else [])


_CACHE = object()  # where the KV cache goes among an entry's arguments


MAX_CACHE_TOKENS = 2**31 - 1  # the runtime's paged KV cache counts its token slots in int32


def cache_capacity(spec: dict) -> int:
    """The token slots the cache of a served ``spec`` is made with: whole pages of each
    sequence's context and step, and a margin."""
    page = spec["page_size"]
    return spec.get("sequences", 1) * -(-(spec["tokens"] + spec["context"] + DECODE_MARGIN) // page) * page


def serving_problem(spec: dict, memory: int | None = None) -> str | None:
    """What makes a served ``spec`` unservable, in words, or None: its counts must be
    whole numbers (``tokens``, ``sequences``, ``page_size`` at least 1, ``context`` at
    least 0, filled by prefill chunks that add up to it) whose cache fits the runtime's
    int32 slot count and, given the ``memory`` (bytes) of the device it runs on, whose
    keys and values fit in it (``kv_bytes_per_token``: 0 when not known)."""
    least = {"tokens": 1, "sequences": 1, "page_size": 1, "context": 0}
    for key, low in least.items():
        value = spec.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            return f"the served step's {key} is {value!r}: a whole number at least {low}"
    chunks = (spec.get("prefill") or {}).get("chunks")
    if spec.get("prefill") and (
        not isinstance(chunks, list)
        or not all(isinstance(c, list) and len(c) == 2 and isinstance(c[0], int) and c[0] >= 1 for c in chunks)
        or sum(c[0] for c in chunks) != spec["context"]
    ):
        return f"the served step's prefill chunks do not fill its context of {spec['context']} tokens"
    slots, each = cache_capacity(spec), spec.get("kv_bytes_per_token", 0)
    what = f"a KV cache for {spec.get('sequences', 1)} sequence(s) of {spec['context']} + {spec['tokens']} tokens"
    if slots > MAX_CACHE_TOKENS:
        return (
            f"{what} needs {slots} token slots, more than the runtime counts ({MAX_CACHE_TOKENS}): "
            "give a smaller --context, --tokens or --batch"
        )
    if memory and isinstance(each, int) and slots * each > memory:
        return (
            f"{what} needs {slots} token slots of {each} bytes of keys and values each, "
            f"{slots * each / 2**30:.1f} GiB, more than the device's {memory / 2**30:.1f} GiB: "
            "give a smaller --context, --tokens or --batch"
        )
    return None


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (what a CPU's KV cache lives in), or
    None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class Host:
    """What a ``Server`` serves on: the ``vm`` (its functions by name) and its
    ``set_instrument``, ``ffi`` (``tvm_ffi``), ``tensor`` (a numpy array to a tensor on
    the device), ``sync()`` (waits for the device) and the device's ``memory`` in bytes
    (None: not known, a cache's size not checked against it)."""

    vm: Any
    set_instrument: Callable
    ffi: Any
    tensor: Callable
    sync: Callable[[], None]
    memory: int | None = None


class Server:
    """Sequences of a KV cache made by the build's create entry, and the arguments of an
    entry that takes it, with TVM's runtime alone (``tvm_ffi`` and the runtime's
    ``vm.builtin.kv_state_*``): relaytrace's ``profiling.serve`` makes one from a lineage,
    a bundle's runner from its manifest. ``spec`` (JSON-ready) says: the ``entry`` and
    its ``params`` (``[{name, kind, tensors: [[shape, dtype], ...]}]``, a symbolic dim as
    its name), the value of each symbolic dim (``dims``; a manifest without it gives
    every one the step's tokens), the ``cache`` (its create ``entry``, ``builtin``,
    ``kernels`` in the order the builtin takes them, the ``append`` kernel), the
    ``prefill`` entry, params and the ``[length, dims]`` of each chunk that fills one
    sequence's context (or None; ``_fill``),
    ``tokens`` each sequence runs in a step, ``sequences`` served at once (one when
    absent), ``context`` tokens of each before it, ``page_size`` and the bytes of keys
    and values a token slot holds (``kv_bytes_per_token``, 0 when not known: a cache
    beyond the device's ``memory`` is refused before it is made; ``serving_problem``);
    ``say`` is told when a context is filled (a long one takes a while). ``step()`` runs the
    entry once as served; ``sink`` (a list, or None) takes ``(clock_ns, kernel, before)``
    stamps from the cache's kernels, as the timeline's instrument does for the VM's
    calls; ``pages``: each page tensor the cache's append kernel wrote to in an untimed
    step (one per layer), by address.

    A prefill step (no context) runs ``tokens`` new tokens of each sequence on fresh
    sequences; a decode step runs after ``context`` tokens of each (filled one sequence
    at a time through the prefill entry) and is popped after, so that every timed run
    sees the same context. The cache is told each sequence's own length, so that a batch
    of one-token steps runs its decode kernels, as an engine's ``batch_decode`` does."""

    def __init__(self, host: Host, spec: dict, seed: int = 0, timed: bool = True, say=None):
        vm = host.vm
        self.vm, self.ffi, self.spec = vm, host.ffi, spec
        self.sink: list | None = None
        self._sync, self._tensor = host.sync, host.tensor
        self.pages: dict[int, tuple[tuple[int, ...], str]] = {}  # data address -> (shape, dtype)
        problem = serving_problem(spec, host.memory)
        if problem:
            raise BundleError(problem)
        self.tokens, self.context = spec["tokens"], spec["context"]
        self.sequences = spec.get("sequences", 1)
        capacity = cache_capacity(spec)
        self.cache = self._create(spec["cache"], host.set_instrument, capacity, timed)
        self.inputs, self.args = self._arguments(spec["params"], spec.get("dims"), self.tokens, seed)
        self._builtin = {
            name: host.ffi.get_global_func(f"vm.builtin.kv_state_{name}")
            for name in ("add_sequence", "remove_sequence", "begin_forward", "end_forward", "popn")
        }
        self._ids = list(range(self.sequences))
        for i in self._ids:
            self._builtin["add_sequence"](self.cache, i)
        if self.context:
            self._fill(vm, spec["prefill"], seed, say or (lambda message: None))
        self._function = vm[spec["entry"]]

    def _fill(self, vm, prefill: dict, seed: int, say) -> None:
        """Each sequence's context filled through the ``prefill`` entry, chunk by chunk
        (``prefill["chunks"]``: ``[length, dims]`` in order), one sequence at a time:
        forked ones would share pages, and the cache would then run its cascade of
        shared-prefix attention and a merge, not a batch's decode. Said before it starts,
        and as it goes when it takes more than one call."""
        chunks = prefill["chunks"]
        function = vm[prefill["entry"]]
        made = {n: self._arguments(prefill["params"], dims, n, seed)[1] for n, dims in chunks}
        calls = len(chunks) * self.sequences
        each = f" in {len(chunks)} chunks of up to {chunks[0][0]}" if len(chunks) > 1 else ""
        say(f"filling a context of {self.context} tokens for each of {self.sequences} sequence(s){each}")
        done, every = 0, max(1, calls // 10)
        for i in self._ids:
            filled = 0
            for n, _ in chunks:
                self._forward([i], n, function, made[n])
                filled, done = filled + n, done + 1
                if calls > 1 and (done % every == 0 or done == calls):
                    say(f"filled {filled} of {self.context} tokens of sequence {i + 1} of {self.sequences}")

    def describe(self) -> str:
        """What a step serves, in one line: its tokens, sequences, context and each dim
        bound to a value the step's size does not give (with where it came from)."""
        each = f" for each of {self.sequences} sequences" if self.sequences != 1 else ""
        bound = "".join(f"; {d}={v} ({where})" for d, v, where in self.spec.get("bound", ()))
        return f"serving {self.spec['entry']}: {self.tokens} token(s){each} after a context of {self.context}{bound}"

    def step(self):
        """One run of the entry as served; returns what it returned."""
        if self.context:
            out = self._forward(self._ids, self.tokens, self._function, self.args)
            for i in self._ids:
                self._builtin["popn"](self.cache, i, self.tokens)
            return out
        for i in self._ids:
            self._builtin["remove_sequence"](self.cache, i)
            self._builtin["add_sequence"](self.cache, i)
        return self._forward(self._ids, self.tokens, self._function, self.args)

    def _forward(self, ids: list[int], length: int, function, args):
        shape = self.ffi.Shape
        self._builtin["begin_forward"](self.cache, shape(ids), shape([length] * len(ids)))
        try:
            return function(*[self.cache if a is _CACHE else a for a in args])
        finally:
            self._builtin["end_forward"](self.cache)

    def _create(self, cache: dict, set_instrument, capacity: int, timed: bool):
        """The cache, made as the create entry makes it (its builtin's arguments, taken
        from a real call of the entry) with every kernel wrapped in ``self._timed``;
        not ``timed``: the one the entry made."""
        seen: dict = {}

        def note(func, name, before, ret, *args):
            if before and name == cache["builtin"]:
                seen["args"] = args
            return NO_OP

        shape = self.ffi.Shape
        sizes = (self.sequences, capacity, capacity, self.spec["page_size"], 0)  # a prefill chunk of it all
        set_instrument(note)
        try:
            made = self.vm[cache["entry"]](*[shape([n]) for n in sizes])
        finally:
            set_instrument(_no_op)
        if not timed:
            return made
        names = iter(cache["kernels"])

        def wrap(arg):
            if isinstance(arg, self.ffi.Function):
                name = next(names, None)
                if name is None:
                    raise BundleError(
                        f"{cache['builtin']} takes more kernels than the {len(cache['kernels'])} the lineage names: "
                        "the lineage is not of this executable"
                    )
                return self.ffi.convert(self._timed(arg, name, cache["append"]))
            if isinstance(arg, self.ffi.Array):
                return self.ffi.convert([wrap(a) for a in arg])
            return arg

        if "args" not in seen:
            raise BundleError(
                f"{cache['entry']} did not call {cache['builtin']}: the lineage is not of this executable"
            )
        args = [wrap(a) for a in seen["args"]]
        if next(names, None) is not None:
            raise BundleError(
                f"{cache['builtin']} was given fewer kernels than the lineage names: the lineage is not "
                "of this executable"
            )
        return self.ffi.get_global_func(cache["builtin"])(*args)

    def _timed(self, kernel, name: str, append: str | None):
        """``kernel`` stamping its start and end into ``sink`` when one is set, the
        device synchronised first (a GPU runs asynchronously), so that each stamp is the
        kernel's own time, not its launch's; untimed, noting the page tensor the append
        kernel writes to."""
        clock = time.perf_counter_ns
        pages = self.pages if name == append else None
        sync = self._sync

        def timed(*args):
            sink = self.sink
            if sink is None:
                if pages is not None and args and hasattr(args[0], "shape"):  # the layer's page tensor
                    pages[args[0].data_ptr()] = (tuple(int(d) for d in args[0].shape), str(args[0].dtype))
                return kernel(*args)
            sync()
            sink.append((clock(), name, True))
            try:
                return kernel(*args)
            finally:
                sync()
                sink.append((clock(), name, False))

        return timed

    def _arguments(self, params: list, dims: dict | None, length: int, seed: int):
        """(the entry's tensor inputs as ``(name, numpy array)``, its arguments for the
        VM): seeded random data (integers zeros, valid token ids), each symbolic dim its
        value in ``dims`` (``length`` when there are none); a tuple parameter as a list
        of its fields; the KV cache's place marked."""
        rng = np.random.default_rng(seed)
        inputs, args = [], []
        for p in params:
            if p["kind"] == "object":
                args.append(_CACHE)
                continue
            arrays = [
                _random(
                    rng, tuple(d if isinstance(d, int) else (length if dims is None else dims[d]) for d in shape), dtype
                )
                for shape, dtype in p["tensors"]
            ]
            if p["kind"] == "tensor":
                inputs.append((p["name"], arrays[0]))
                args.append(self._tensor(arrays[0]))
            else:
                args.append(self.ffi.convert([self._tensor(a) for a in arrays]))
        return inputs, args


def _random(rng, shape, dtype: str) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.floating):
        return (rng.standard_normal(shape) * 0.1).astype(dtype)
    return np.zeros(shape, dtype)


# -- the bundle's runner ----------------------------------------------------------------


class Runtime:
    """TVM's runtime reached through ``tvm_ffi`` alone, for one device: tensors to and
    from it, copies, synchronisation, the time evaluator."""

    def __init__(self, ffi, device: str):
        self.ffi = ffi
        self.device = ffi.device(device, 0)
        self.kind = device
        get = ffi.get_global_func
        self._alloc, self._from_bytes = get("runtime.TVMTensorAllocWithScope"), get("runtime.TVMTensorCopyFromBytes")
        self._copy, self._sync = get("runtime.TVMTensorCopyFromTo"), get("runtime.Device_StreamSync")
        self._evaluator = get("runtime.RPCTimeEvaluator")

    def tensor(self, array: np.ndarray):
        array = np.ascontiguousarray(array)
        out = self._alloc(tuple(array.shape), str(array.dtype), self.device, None)
        self._from_bytes(out, ctypes.c_void_p(array.ctypes.data), array.nbytes)
        return out

    def copy(self, tensor):
        out = self._alloc(tuple(tensor.shape), str(tensor.dtype), tensor.device, None)
        self._copy(tensor, out)
        return out

    def sync(self) -> None:
        self._sync(self.device, 0)

    def time_evaluator(self, module, name: str, number: int, repeat: int):
        """``f(*args)``: the ``repeat`` timings of the kernel ``name``, each the mean of
        ``number`` calls, measured in calls of the runtime's evaluator of at most
        ``TIMED_CHUNK`` timings each, so that a Ctrl-C is seen between them."""

        def evaluator(n: int):
            feval = self._evaluator(module, name, DEVICE_TYPES[self.kind], 0, number, n, 0, 100, 0, 1, 0, "")
            return lambda *args: struct.unpack("@" + "d" * n, feval(*args))

        chunks = [TIMED_CHUNK] * (repeat // TIMED_CHUNK) + [repeat % TIMED_CHUNK] * bool(repeat % TIMED_CHUNK)
        made = {n: evaluator(n) for n in set(chunks)}
        return lambda *args: tuple(t for n in chunks for t in made[n](*args))


class BundleError(Exception):
    """A bundle that cannot run here, said in one line."""


FIELDS = {  # what run.py reads of bundle.json, each checked for its kind before the run
    "library": str,
    "runtime": list,
    "device": str,
    "entry": str,
    "inputs": list,
    "kernels": dict,
    "library_calls": list,
    "subfunctions": list,
    "builtins": list,
    "layers": dict,
    "profile": dict,
    "peaks": dict,
    "files": dict,
}


def check_seal(bundle: Path, manifest: dict) -> None:
    """Refuse, in one ``BundleError`` line, a bundle whose files are not the ones
    ``relaytrace bundle`` wrote, before any of them is loaded: each of ``FIELDS`` of
    its kind, a served step's counts servable (``serving_problem``), every file
    ``bundle.json`` names and every file it seals as sealed (``check_files``: a copy cut
    short would die by SIGBUS when loaded)."""
    for key, kind in FIELDS.items():
        if not isinstance(manifest.get(key), kind):
            raise BundleError(f"bundle.json's {key!r} is missing or no {kind.__name__}: bundle the model again")
    named = [manifest["library"], *manifest["runtime"], manifest["peaks"]["library"]]
    named += [name for param in manifest["inputs"] for name in param["files"]]  # a damaged one: KeyError
    problem = serving_problem(manifest["serve"]) if manifest.get("serve") else None
    if problem:
        raise BundleError(problem)
    check_files(bundle, manifest["files"], list(dict.fromkeys([*named, *manifest["files"]])))


def check_files(bundle: Path, files: dict, names: list) -> None:
    """Refuse, in one ``BundleError`` line, any of ``names`` that is not sealed in
    ``files`` (``bundle.json``'s ``{path: {bytes, sha256}}``) or not the file sealed:
    missing, outside the bundle once links are resolved, of another size or sha256."""
    root = bundle.resolve()
    for name in names:
        seal = files.get(name) if isinstance(name, str) else None
        if not isinstance(seal, dict):
            raise BundleError(f"bundle.json names {name!r}, not among its sealed files: bundle the model again")
        path = inside(root, name)
        if not path.is_file():
            raise BundleError(f"{name} is missing from the bundle: copy the whole bundle again")
        size = path.stat().st_size
        if size != seal["bytes"]:
            raise BundleError(
                f"{name} has {size} bytes, not the {seal['bytes']} bundled (a copy cut short?): copy the bundle again"
            )
        if file_sha256(path) != seal["sha256"]:
            raise BundleError(f"{name} is not the file bundled (its sha256 differs): copy the bundle again")


def inside(root: Path, name) -> Path:
    """``root / name`` resolved, for a ``name`` that is a relative path without ``..``
    whose resolved path (links followed) stays inside ``root``; else a ``BundleError``."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise BundleError(f"bundle.json names {name!r}: a bundle's files are relative paths inside it")
    path = (root / name).resolve()
    if path != root and root not in path.parents:
        raise BundleError(f"{name} leads out of the bundle (a link to {path}): a bundle's files are inside it")
    return path


def file_sha256(path: Path) -> str:
    """The sha256 of the file at ``path``, as hex (what ``bundle.json`` seals)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_runtime(bundle: Path, manifest: dict, device: str):
    """``tvm_ffi`` with the bundle's runtime libraries loaded (global, so the exported
    library finds TVM's symbols); the device's runtime (``libtvm_runtime_cuda.so``)
    needs its driver."""
    try:
        import tvm_ffi
    except ImportError as exc:
        raise BundleError(
            f"tvm_ffi cannot be imported ({exc}): pip install apache-tvm-ffi=={manifest.get('tvm_ffi', '?')}"
        ) from None
    for name in manifest["runtime"]:
        if device == "cpu" and "cuda" in name:
            continue
        try:
            ctypes.CDLL(str(bundle / name), ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise BundleError(
                f"cannot load {name}: {exc}"
                + (" (the CUDA runtime needs the NVIDIA driver's libcuda.so.1)" if "cuda" in name else "")
            ) from None
    return tvm_ffi


def check_library(library, manifest: dict) -> list[str]:
    """The compiled kernels of the lineage that the exported library does not hold."""
    return [
        k
        for k in manifest["kernels"]
        if k not in manifest["library_calls"] and not library.implements_function(k, True)
    ]


def _inputs(bundle: Path, manifest: dict, runtime: Runtime, ffi) -> list:
    args = []
    for param in manifest["inputs"]:
        arrays = [runtime.tensor(np.load(bundle / f, allow_pickle=False)) for f in param["files"]]
        args.append(ffi.convert(arrays) if param["tuple"] else arrays[0])
    return args


def _external(library, ffi, name: str):
    for lib in library.imports:
        if lib.implements_function(name, True):
            return lib.get_function(name, query_imports=True)
    return ffi.get_global_func(name)


def peak_rates(kernels: list[dict], best_s: dict[str, float]) -> tuple[dict[str, float], float]:
    """(GFLOP/s per dtype, the best lane width's; GB/s) from each peak kernel's best time
    (``kernels``: ``{name, dtype, flops, bytes}`` each, as ``profiling.peaks`` describes
    its fixed-size kernels); the one copy of this arithmetic, for RPC and bundles."""
    gflops: dict[str, float] = {}
    gbps = 0.0
    for kernel in kernels:
        seconds = best_s[kernel["name"]]
        if kernel["flops"]:
            gflops[kernel["dtype"]] = max(gflops.get(kernel["dtype"], 0.0), kernel["flops"] / seconds / 1e9)
        else:
            gbps = max(gbps, kernel["bytes"] / seconds / 1e9)
    return gflops, gbps


MAX_GFLOPS, MAX_GBPS = 1e7, 1e5  # 10 PFLOP/s, 100 TB/s: beyond any one device, a timer's fault


def implausible(gflops: dict[str, float], gbps: float) -> str:
    """Why measured peaks cannot be a device's (a rate of 0, or beyond ``MAX_GFLOPS`` /
    ``MAX_GBPS``: a kernel timed at 0 s), in words; "" when they can."""
    if not 0 < gbps <= MAX_GBPS:
        return f"{gbps:.3g} GB/s"
    wrong = [f"{rate:.3g} GFLOP/s ({dtype})" for dtype, rate in gflops.items() if not 0 < rate <= MAX_GFLOPS]
    return ", ".join(wrong)


def measure_peaks(bundle: Path, manifest: dict, runtime: Runtime, ffi, say) -> dict | None:
    """The device's peaks, measured by the bundle's peak kernels (``peaks.so``:
    ``profiling.peaks.fixed_kernels``) each timed by the time evaluator, best of 5: the
    profile's ``peaks`` (``model.peaks.Peaks``' fields, ``peak_rates``' figures); None,
    said, when they cannot be a device's (``implausible``)."""
    spec = manifest["peaks"]
    say(f"measuring the peak rates of {runtime.kind} ({len(spec['kernels'])} kernels)")
    library = ffi.load_module(str(bundle / spec["library"]))
    module = next(
        (lib for lib in library.imports if lib.implements_function(spec["kernels"][0]["name"], True)), library
    )
    best: dict[str, float] = {}
    for kernel in spec["kernels"]:
        array = np.ones(kernel["shape"], kernel["dtype"])
        args = (runtime.tensor(array), runtime.tensor(np.zeros_like(array)))
        best[kernel["name"]] = min(runtime.time_evaluator(module, kernel["name"], 3, 5)(*args))
    gflops, gbps = peak_rates(spec["kernels"], best)
    wrong = implausible(gflops, gbps)
    if wrong:
        say(f"peak rates not recorded: {wrong} cannot be this device's (give them to report: --device or --peak-*)")
        return None
    where = f"{runtime.device} of {platform.node() or 'an unnamed host'} (a bundle's run.py)"
    return {
        "gflops": gflops,
        "gbps": gbps,
        "source": "measured",
        "device": where,
        "method": f"TVM kernels built for {spec['built_for']}, run on {where}, {spec['method']}",
    }


@dataclass(frozen=True)
class RunOptions:
    """How run.py profiles a bundle: ``repeat`` timed runs in ``mode`` (``timeline`` or
    ``isolated``) after ``warmup`` untimed ones, ``number`` calls averaged per isolated
    timing, on ``device`` (None: the bundle's), with NVTX ranges (``nvtx``), timed by
    CUDA events (``events``), the device's peak rates measured (``peaks``)."""

    mode: str = "timeline"
    repeat: int = 5
    warmup: int = 1
    number: int = 3
    device: str | None = None
    nvtx: bool = False
    events: bool = False
    peaks: bool = True


def run_bundle(bundle: Path, options: RunOptions, say) -> dict:
    """Profile the bundle's entry here as ``profiling.vm.profile`` does: the profile's
    JSON (the bundle's template filled in)."""
    manifest, ffi, library, device = _open_bundle(bundle, options.device, say)
    mode, repeat = options.mode, options.repeat
    vm = library["vm_load_executable"]()
    vm["vm_initialization"](DEVICE_TYPES[device], 0, POOLED, *(() if device == "cpu" else (1, 0, POOLED)))
    runtime = Runtime(ffi, device)
    set_instrument = vm["set_instrument"]
    sites = Sites(frozenset(manifest["kernels"]), frozenset(manifest["subfunctions"]))
    spec, server = manifest.get("serve"), None
    if spec:  # an entry that takes a KV cache: served through the cache the build's create entry makes
        if mode != "timeline" or options.events:
            raise BundleError(
                f"{manifest['entry']} takes a KV cache: it is profiled in timeline mode, its cache's "
                "kernels timed with a synchronisation around each (not --mode isolated, not --events)"
            )
        sync, memory = (_no_op, machine_memory()) if device == "cpu" else (runtime.sync, None)
        server = Server(Host(vm, set_instrument, ffi, runtime.tensor, sync, memory), spec, say=say)
        sites = Sites(sites.kernels, sites.skip, frozenset(spec["cache"]["kernels"]))
        say(server.describe())
        call = server.step
    else:
        function, args = vm[manifest["entry"]], _inputs(bundle, manifest, runtime, ffi)

        def call():
            return function(*args)

    say("capturing argument shapes")
    info, captured = capture(
        set_instrument, call, sites.skip, sites.kernels, runtime.copy if mode == "isolated" else None
    )
    problems = count_mismatches(manifest["kernels"], ran_counts(info, frozenset(manifest["builtins"])), sites.skip)
    if problems:
        raise BundleError("the lineage does not match this library: " + "; ".join(problems[:8]))
    for _ in range(max(options.warmup - 1, 0)):
        call()
    stamping, how = _stamping(options, runtime, manifest["layers"], say)
    if mode == "timeline":
        rows = []
        for run in range(repeat):
            say(f"timeline run {run + 1}/{repeat}")
            rows.extend(timeline_run(set_instrument, call, run, sites, stamping, server))
    else:
        how = "each site timed alone"
        rows = _isolated_rows(library, runtime, manifest, captured, options, say)
    say("end-to-end timing")
    e2e = []
    for _ in range(max(repeat, 3)):
        start = time.perf_counter()
        call()
        runtime.sync()
        e2e.append((time.perf_counter() - start) * 1e6)
    found = measure_peaks(bundle, manifest, runtime, ffi, say) if options.peaks else None
    measured: dict[str, object] = {"peaks": found} if found else {}
    if server is not None:
        measured.update(
            step=[server.tokens, server.context],
            sequences=server.sequences,
            bound=server.spec.get("bound", []),
            inputs=[[name, list(a.shape), str(a.dtype)] for name, a in server.inputs],
            kv_pages=[[list(shape), dtype] for shape, dtype in server.pages.values()],
        )
    return {
        **manifest["profile"],
        "device": str(runtime.device),
        "mode": mode,
        "repeat": repeat,
        "records": [list(r[:6]) + ([r[6]] if r[6] else []) for r in rows],
        "args": {f"{n}#{k}": {"shapes": s, "dtypes": d, "addresses": a} for (n, k), (s, d, a) in info.items()},
        "e2e_us": e2e,
        "remote": f"host {platform.node() or '(unnamed)'} (a bundle's run.py; {how})",
        **measured,
    }


def _open_bundle(bundle: Path, device: str | None, say):
    """(its manifest, ``tvm_ffi``, its library loaded, the device) of a bundle checked:
    of this runner's schema, sealed, built for ``device`` (None: the one it was built
    for), each of its kernels in its library; else a ``BundleError`` saying what to do."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    if manifest.get("schema") != BUNDLE_SCHEMA:
        raise BundleError(
            f"{bundle / 'bundle.json'} is not a relaytrace bundle of this runner ({BUNDLE_SCHEMA}): "
            "bundle the model again"
        )
    check_seal(bundle, manifest)
    device = device or manifest["device"]
    if device != manifest["device"]:
        raise BundleError(
            f"this bundle was built for {manifest['device']}, not {device}: bundle a build for "
            f"{device} (relaytrace bundle --target ...)"
        )
    ffi = load_runtime(bundle, manifest, device)
    say(f"loading {manifest['library']} on {device}")
    library = ffi.load_module(str(bundle / manifest["library"]))
    missing = check_library(library, manifest)
    if missing:
        raise BundleError(
            f"the lineage does not belong to this library: {len(missing)} of its kernels are not "
            f"compiled in it ({', '.join(missing[:6])}); bundle the model again"
        )
    return manifest, ffi, library, device


def _stamping(options: RunOptions, runtime: Runtime, layers: dict, say) -> tuple[Stamping, str]:
    """How a timeline run stamps each call on this device, and how the profile says it
    was timed: a GPU's calls each synchronised, or timed by CUDA events (``--events``,
    never with ``--nvtx``); NVTX ranges named by ``layers`` when ``--nvtx`` finds the
    library."""
    sync_each = runtime.kind != "cpu"
    timer = None
    if options.events:
        if runtime.kind == "cpu" or options.mode != "timeline" or options.nvtx:
            raise BundleError(
                "--events times a timeline run on a GPU, without --nvtx (whose calls would sit between "
                "the events): give --device cuda and --mode timeline, and --nvtx in another run"
            )
        timer = CudaEvents.find()
        if timer is None:
            raise BundleError("--events needs the CUDA runtime library (libcudart.so.13), which did not load")
        sync_each = False
    ranges = None
    if options.nvtx:
        ranges = Nvtx.find(layers)
        say(
            "NVTX ranges per call site"
            if ranges
            else "--nvtx: no libnvToolsExt found (set RELAYTRACE_NVTX to its "
            "path, or pip install nvidia-nvtx-cu12); running without ranges"
        )
    how = (
        "each call timed by CUDA events around it"
        if timer is not None
        else "each call timed with a device synchronisation after it"
        if sync_each
        else "each call timed by the clock around it"
    )
    return Stamping(runtime.sync, sync_each, ranges, timer), how


def _isolated_rows(library, runtime: Runtime, manifest: dict, captured, options: RunOptions, say) -> list:
    """Each captured site timed alone: a kernel by the runtime's time evaluator on the
    library that holds the kernels, a library call by the clock around it."""
    kernel_lib = next(
        (lib for lib in library.imports if any(lib.implements_function(k, True) for k in manifest["kernels"])), library
    )
    repeat, number = options.repeat, options.number
    externals = {
        name: clocked(_external(library, runtime.ffi, name), runtime.sync, repeat, number)
        for name in manifest["library_calls"]
    }

    def timer_of(name):
        return externals[name] if name in externals else runtime.time_evaluator(kernel_lib, name, number, repeat)

    return site_rows(isolated(captured, timer_of, say), repeat)


def main(argv=None) -> int:
    """``python run.py [--mode timeline|isolated] [--repeat N] [--device cpu|cuda]
    [--nvtx]``: profile the bundle beside this file into its ``profile.json``."""
    p = argparse.ArgumentParser(
        description="profile the relaytrace bundle beside this file into its profile.json; "
        "read it back with `relaytrace report DIR`"
    )
    p.add_argument("--mode", choices=["timeline", "isolated"], default="timeline")
    p.add_argument("--repeat", type=int, default=3, help="timed runs (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first, the capturing run among them")
    p.add_argument("--number", type=int, default=3, help="isolated: calls averaged per timing (default 3)")
    p.add_argument("--device", choices=sorted(DEVICE_TYPES), help="default: the device the bundle was built for")
    p.add_argument("--nvtx", action="store_true", help="an NVTX range per call, named after its layer and site")
    p.add_argument(
        "--events",
        action="store_true",
        help="cuda timeline: time each call by CUDA events (default: a synchronisation after each call)",
    )
    p.add_argument(
        "--no-peaks",
        action="store_true",
        help="do not measure the device's peak rates (the roofline then needs them given to report)",
    )
    p.add_argument("--bundle", default=str(Path(__file__).resolve().parent), help="the bundle DIR (default: here)")
    p.add_argument("--out", help="where to write the profile (default: DIR/profile.json)")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.number < 1 or args.warmup < 1:
        p.error("--repeat, --number and --warmup are whole numbers at least 1")
    bundle = Path(args.bundle)
    out = Path(args.out) if args.out else bundle / "profile.json"

    # A Ctrl-C is noted as well as raised, and acted on again at the next progress line:
    # raised inside the VM's instrument (a callback from TVM's runtime) it is lost there
    interrupted: list[int] = []

    def on_interrupt(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)

    def say(message: str) -> None:
        if interrupted:
            raise KeyboardInterrupt
        print(f"run.py: {message}", file=sys.stderr, flush=True)

    try:
        if not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
            raise BundleError(f"cannot write {out}: {out.parent} is no writable directory (give --out FILE)")
        options = RunOptions(
            args.mode, args.repeat, args.warmup, args.number, args.device, args.nvtx, args.events, not args.no_peaks
        )
        data = run_bundle(bundle, options, say)
        say("writing the profile")
        partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(data))
        os.replace(partial, out)
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - every failure is one line, never a traceback
        if interrupted or isinstance(exc, KeyboardInterrupt):  # the runtime's error for a callback's interrupt
            print("run.py: interrupted", file=sys.stderr)
            return 130
        print(f"run.py: error: {exc if isinstance(exc, BundleError) else _failure(exc)}", file=sys.stderr)
        return 1
    say(f"wrote {out}: read it back with `relaytrace report {bundle}`")
    return 0


def _failure(exc: Exception) -> str:
    """A failure ``run_bundle`` did not foresee, in one line: a ``bundle.json`` field
    missing or of the wrong kind names the bundle as damaged."""
    if isinstance(exc, (KeyError, TypeError, ValueError, IndexError, AttributeError)):
        return f"the bundle is damaged ({type(exc).__name__}: {exc}): bundle the model again"
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else 'no message'}"


if __name__ == "__main__":
    sys.exit(main())
