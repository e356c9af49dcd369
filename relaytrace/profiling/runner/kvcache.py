"""An entry that takes a KV cache, served with TVM's runtime builtins alone (``Server``:
the cache its build's create entry makes, filled to a context in prefill chunks, then
the step timed), and the checks that a served step fits the cache and the machine
(``serving_problem``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BundleError
from .timing import NO_OP, do_nothing

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
            set_instrument(do_nothing)
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
