"""Run an LLM's entry the way it is served: through its own KV cache.

An entry that takes a KV cache (``prefill``, ``decode``, as MLC-LLM writes them) cannot
run on arrays alone: the cache is made by another entry (``create_paged_kv_cache``), a
sequence is added to it, and each step is framed by ``begin_forward`` / ``end_forward``.
``Server`` does that with TVM's own runtime builtins, and makes the cache with each of
its kernels (the PrimFuncs handed to the create builtin) wrapped in a timer, so that a
timeline profile sees the attention kernels that run inside the builtin
``attention_with_fused_qkv``: the VM's instrument never sees them.

A ``prefill`` step runs ``tokens`` new tokens on a fresh sequence; a ``decode`` step runs
one token after ``context`` tokens, and is popped after, so that every timed run sees the
same context.
"""

from __future__ import annotations

import time

import numpy as np
from attrs import define

from ..errors import RelaytraceError, UsageError, describe
from ..model.entry import APPEND, ParamKind, cache_param, kernel_role, of_any_length

_DECODE_MARGIN = 8  # tokens the cache holds beyond the context and the step


@define(frozen=True)
class Serving:
    """How to serve an entry that takes a KV cache: ``tokens`` new tokens per step (a
    prefill's length; an entry whose inputs are static sizes, a decode, runs what they
    say), after ``context`` tokens already in the cache, in pages of ``page_size``."""

    tokens: int = 32
    context: int = 0
    page_size: int = 16


def takes_cache(lineage, entry: str) -> bool:
    """Whether ``entry`` of the lineage's build takes a KV cache (an object parameter)."""
    return cache_param(lineage.build.params.get(entry, ())) is not None


class Server:
    """One sequence of a KV cache made by the build's create entry, and the arguments of
    ``entry``: ``step()`` runs the entry once as served; ``sink`` (a list, or None) takes
    ``(clock_ns, kernel, before)`` stamps from the cache's kernels, as the timeline's
    instrument does for the VM's calls; ``pages``: each page tensor the cache's append
    kernel wrote to in an untimed step (one per layer), by address."""

    def __init__(self, vm, lineage, entry: str, serving: Serving, device, seed: int = 0, timed: bool = True):
        import tvm

        self.tvm, self.vm, self.entry = tvm, vm, entry
        facts = lineage.build.kv_cache
        if facts is None:
            raise RelaytraceError(f"{entry} takes a KV cache, but the build has no entry that makes one "
                                  "(a call of vm.builtin.*_kv_cache_create): relaytrace cannot serve it")
        self.sink: list | None = None
        self._sync = (lambda: None) if device.dlpack_device_type() == 1 else device.sync  # 1: kDLCPU
        self.pages: dict[int, tuple[tuple[int, ...], str]] = {}  # data address -> (shape, dtype)
        self._append = next((k for k in facts.kernels if kernel_role(facts, k) == APPEND), None)
        params = lineage.build.params[entry]
        length = self._length(params, serving)
        self.tokens, self.context = length, serving.context
        self.cache = self._create(facts, serving, length + serving.context + _DECODE_MARGIN, timed)
        self.inputs, self.args = _arguments(params, length, device, seed)
        self._builtin = {name: tvm.get_global_func(f"vm.builtin.kv_state_{name}")
                         for name in ("add_sequence", "remove_sequence", "begin_forward", "end_forward", "popn")}
        self._builtin["add_sequence"](self.cache, 0)
        if serving.context:
            prefill = self._prefill_entry(lineage)
            self._forward(serving.context, vm[prefill],
                          _arguments(lineage.build.params[prefill], serving.context, device, seed)[1])
        self._function = vm[entry]

    def step(self):
        """One run of the entry as served; returns what it returned. A step that adds
        to the context takes it back after (a decode), one that is the whole sequence
        starts it afresh (a prefill)."""
        if self.context:
            out = self._forward(self.tokens, self._function, self.args)
            self._builtin["popn"](self.cache, 0, self.tokens)
            return out
        self._builtin["remove_sequence"](self.cache, 0)
        self._builtin["add_sequence"](self.cache, 0)
        return self._forward(self.tokens, self._function, self.args)

    def _forward(self, length: int, function, args):
        shape = self.tvm.runtime.ShapeTuple
        self._builtin["begin_forward"](self.cache, shape([0]), shape([length]))
        try:
            return function(*[self.cache if a is _CACHE else a for a in args])
        finally:
            self._builtin["end_forward"](self.cache)

    @staticmethod
    def _prefill_entry(lineage) -> str:
        """The entry that fills the cache with a context: one whose token count is
        symbolic (a prefill)."""
        for name, params in lineage.build.params.items():
            if cache_param(params) is not None and of_any_length(params):
                return name
        raise RelaytraceError("the build has no entry that takes a KV cache and any number of tokens (a prefill): "
                              "a context cannot be filled; profile with context 0")

    @staticmethod
    def _length(params, serving: Serving) -> int:
        """The tokens a step runs: ``serving.tokens`` for an entry with a symbolic
        size, else its first tensor's second-to-last dim ((batch, tokens, hidden), as
        MLC-LLM's entries take embeddings)."""
        if of_any_length(params):
            return serving.tokens
        first = next((t for p in params if p.kind == ParamKind.TENSOR for t in p.tensors), None)
        return int(first.shape[-2]) if first is not None and len(first.shape) >= 2 else 1

    def _create(self, facts, serving: Serving, capacity: int, timed: bool):
        """The cache, made as the create entry makes it (its builtin's arguments, taken
        from a real call of the entry) with every kernel wrapped in ``self._timed``;
        not ``timed``: the one the entry made (``benchmarks/served_overhead.py``)."""
        import tvm_ffi
        from tvm import relax

        seen: dict = {}

        def note(func, name, before, ret, *args):
            if before and name == facts.builtin:
                seen["args"] = args
            return relax.VMInstrumentReturnKind.NO_OP

        shape = self.tvm.runtime.ShapeTuple
        sizes = (1, capacity, max(capacity, serving.tokens), serving.page_size, 0)
        self.vm.set_instrument(note)
        try:
            made = self.vm[facts.entry](*[shape([n]) for n in sizes])
        except Exception as exc:
            raise RelaytraceError(f"the KV cache could not be made by {facts.entry}: {describe(exc)}") from exc
        finally:
            self.vm.set_instrument(lambda *_: relax.VMInstrumentReturnKind.NO_OP)
        if not timed:
            return made
        names = iter(facts.kernels)

        def wrap(arg):
            if isinstance(arg, tvm_ffi.Function):
                return tvm_ffi.convert(self._timed(arg, next(names, "?")))
            if isinstance(arg, tvm_ffi.Array):
                return tvm_ffi.convert([wrap(a) for a in arg])
            return arg

        args = [wrap(a) for a in seen["args"]]
        if next(names, None) is not None:
            raise RelaytraceError(f"{facts.builtin} was given fewer kernels than the lineage names: the lineage is "
                                  "not of this executable")
        return self.tvm.get_global_func(facts.builtin)(*args)

    def _timed(self, kernel, name: str):
        """``kernel`` stamping its start and end into ``sink`` when one is set, the
        device synchronised first on a device that runs asynchronously (a GPU), so that
        each stamp is the kernel's own time, not its launch's; untimed, noting the page
        tensor the append kernel writes to."""
        clock = time.perf_counter_ns
        pages = self.pages if name == self._append else None
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


_CACHE = object()  # where the KV cache goes among an entry's arguments



def _arguments(params, length: int, device, seed: int):
    """(the entry's tensor inputs as numpy arrays, its arguments for the VM): seeded
    random data, every symbolic dim ``length`` (the step's tokens); a tuple parameter as
    a list of its fields; the KV cache's place marked."""
    import tvm

    rng = np.random.default_rng(seed)
    inputs, args = [], []
    for p in params:
        if p.kind == ParamKind.OBJECT:
            args.append(_CACHE)
            continue
        if p.kind not in (ParamKind.TENSOR, ParamKind.TUPLE):
            raise UsageError(f"{p.name} is a {p.kind} parameter: relaytrace serves entries that take tensors, "
                             "tuples of them and a KV cache")
        arrays = [_random(rng, tuple(d if isinstance(d, int) else length for d in t.shape), t.dtype) for t in p.tensors]
        if p.kind == ParamKind.TENSOR:
            inputs.append((p.name, arrays[0]))
            args.append(tvm.runtime.tensor(arrays[0], device))
        else:
            args.append([tvm.runtime.tensor(a, device) for a in arrays])
    return inputs, args


def _random(rng, shape, dtype: str) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.floating):
        return (rng.standard_normal(shape) * 0.1).astype(dtype)
    return np.zeros(shape, dtype)
