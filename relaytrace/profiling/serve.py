"""Run an LLM's entry the way it is served: through its own KV cache.

An entry that takes a KV cache (``prefill``, ``decode``, as MLC-LLM writes them) cannot
run on arrays alone: the cache is made by another entry (``create_paged_kv_cache``), a
sequence is added to it, and each step is framed by ``begin_forward`` / ``end_forward``.
``runner.kvcache.Server`` does that with TVM's runtime builtins alone (a bundle's run.py serves
the same way), and makes the cache with each of its kernels (the PrimFuncs handed to
the create builtin) wrapped in a timer, so that a timeline profile sees the attention
kernels that run inside the builtin ``attention_with_fused_qkv``: the VM's instrument
never sees them. This module says what to serve from a lineage (``served_spec``).
"""

from __future__ import annotations

from attrs import define, field

from ..errors import RelaytraceError, UsageError, describe
from ..model.codec import encode
from ..model.entry import (
    APPEND,
    ParamKind,
    batched,
    cache_param,
    kernel_role,
    of_any_length,
    runs_attention,
    step_dims,
    step_tokens,
)
from ..model.work import itemsize
from .manifest import CacheSpec, PrefillSpec, ServedParam, ServeSpec
from .runner import kvcache


@define(frozen=True)
class Serving:
    """How to serve an entry that takes a KV cache: ``tokens`` new tokens per sequence per
    step (a prefill's length; an entry whose token count is static, a decode, runs what it
    says), for each of ``sequences`` sequences (an entry of any batch size,
    ``batch_decode``; others serve one), after ``context`` tokens already in each
    sequence's cache, in pages of ``page_size``; ``bind``: the value of a symbolic dim
    the model does not give (``--bind NAME=VALUE``; it overrides the model's own). The
    context is filled through the prefill entry in chunks of at most ``fill_chunk``
    tokens, as an engine fills a prompt (MLC-LLM's ``prefill_chunk_size``): a long
    context neither allocates a prefill's activations for all of it at once nor runs
    without a word."""

    tokens: int = 32
    context: int = 0
    page_size: int = 16
    sequences: int = 1
    bind: dict[str, int] = field(factory=dict)
    fill_chunk: int = kvcache.FILL_CHUNK


def takes_cache(lineage, entry: str) -> bool:
    """Whether ``entry`` of the lineage's build takes a KV cache (an object parameter)."""
    return cache_param(lineage.build.params.get(entry, ())) is not None


def served_spec(lineage, entry: str, serving: Serving) -> ServeSpec:
    """What ``runner.kvcache.Server`` needs to serve ``entry`` of the lineage's build (its JSON
    is what a bundle's manifest carries and the runner reads): the entry's and the prefill's parameters, the
    cache's create entry, builtin and kernels, and the step's tokens and context. A
    build without a create entry, an entry taking a shape or scalar, or a context with
    no prefill to fill it is a one-line error."""
    facts = lineage.build.kv_cache
    if facts is None:
        raise RelaytraceError(
            f"{entry} takes a KV cache, but the build has no entry that makes one "
            "(a call of vm.builtin.*_kv_cache_create): relaytrace cannot serve it"
        )
    if not isinstance(serving.fill_chunk, int) or isinstance(serving.fill_chunk, bool) or serving.fill_chunk < 1:
        raise UsageError(
            f"Serving(fill_chunk=) must be a whole number of tokens at least 1, not {serving.fill_chunk!r}"
        )
    params = lineage.build.params[entry]
    model_sizes = {**(lineage.program.sizes if lineage.program is not None else {}), **serving.bind}
    sequences = serving.sequences if batched(params) else 1
    if serving.sequences != 1 and sequences == 1:
        raise UsageError(
            f"{entry} serves one sequence (no input dim counts sequences): --batch {serving.sequences} applies to "
            "a batch entry (MLC-LLM's batch_decode, batch_prefill)"
        )
    tokens = step_tokens(params, serving.tokens)
    prefill = _prefill_entry(lineage) if serving.context else None
    declared = lineage.program.sizes if lineage.program is not None else {}
    dims, bound = step_dims(entry, params, tokens, sequences, model_sizes, declared)
    spec = ServeSpec(
        entry=entry,
        params=_params(params),
        tokens=tokens,
        sequences=sequences,
        dims=dims,
        bound=tuple(tuple(b) for b in bound),
        context=serving.context,
        page_size=serving.page_size,
        kv_bytes_per_token=kv_bytes_per_token(lineage, entry),
        cache=CacheSpec(
            facts.entry,
            facts.builtin,
            tuple(facts.kernels),
            next((k for k in facts.kernels if kernel_role(facts, k) == APPEND), None),
        ),
        prefill=PrefillSpec(
            prefill,
            _params(lineage.build.params[prefill]),
            tuple(
                (n, step_dims(prefill, lineage.build.params[prefill], n, 1, model_sizes, declared)[0])
                for n in kvcache.fill_chunks(serving.context, serving.fill_chunk)
            ),
        )
        if prefill
        else None,
    )
    problem = kvcache.serving_problem(encode(spec))
    if problem:
        raise UsageError(problem)
    return spec


def Server(vm, device, spec: ServeSpec, timed: bool = True, say=None):  # noqa: N802
    """``runner.kvcache.Server`` of ``spec`` (``served_spec``) on relaytrace's ``vm`` (a
    ``relax.VirtualMachine`` on ``device``); on a CPU, a cache beyond this machine's
    memory is refused before it is made. Not ``timed``: the cache the create entry made
    itself (``benchmarks/served_overhead.py``). The cache that cannot be made is a
    one-line error naming the create entry."""
    import tvm
    import tvm_ffi

    cpu = device.dlpack_device_type() == 1  # kDLCPU
    given = encode(spec)  # the runner reads the spec as a bundle's run.py does: its JSON
    problem = kvcache.serving_problem(given, kvcache.machine_memory() if cpu else None)
    if problem:
        raise UsageError(problem)
    sync = (lambda: None) if cpu else device.sync
    try:
        host = kvcache.Host(vm, vm.set_instrument, tvm_ffi, lambda a: tvm.runtime.tensor(a, device), sync)
        return kvcache.Server(host, given, timed=timed, say=say)
    except Exception as exc:
        raise RelaytraceError(
            f"{spec.entry} could not be served through the KV cache {spec.cache.entry} makes: {describe(exc)}"
        ) from exc


def kv_bytes_per_token(lineage, entry: str) -> int:
    """The bytes of keys and values one token slot of the build's KV cache holds: keys
    and values of each attention layer (an attention builtin ``entry`` calls), each
    ``kv_heads`` x ``head_dim`` elements of the model's float type (its first floating
    weight's); 0 when the build does not say them."""
    facts = lineage.build.kv_cache
    layers = sum(1 for b in lineage.builtins if b.function == entry and runs_attention(b.name))
    floats = [
        t.dtype
        for p in lineage.build.params.get(entry, ())
        if p.weight
        for t in p.tensors
        if t.dtype.startswith(("float", "bfloat"))
    ]
    size = itemsize(floats[0]) if floats else None
    if facts is None or not (facts.kv_heads and facts.head_dim and layers and size):
        return 0
    return 2 * layers * facts.kv_heads * facts.head_dim * size


def _params(params) -> tuple[ServedParam, ...]:
    """An entry's parameters as ``runner.kvcache.Server`` takes them; a shape or scalar
    parameter is a UsageError (relaytrace serves tensors, tuples of them and a cache)."""
    out = []
    for p in params:
        if p.kind not in (ParamKind.TENSOR, ParamKind.TUPLE, ParamKind.OBJECT):
            raise UsageError(
                f"{p.name} is a {p.kind} parameter: relaytrace serves entries that take tensors, "
                "tuples of them and a KV cache"
            )
        out.append(ServedParam(p.name, p.kind, tuple((tuple(t.shape), t.dtype) for t in p.tensors)))
    return tuple(out)


def _prefill_entry(lineage) -> str:
    """The entry that fills one sequence's cache with a context: one that takes a KV
    cache and any number of tokens of one sequence (a prefill; ``prefill`` itself first)."""
    fills = [
        name
        for name, params in lineage.build.params.items()
        if cache_param(params) is not None and of_any_length(params) and not batched(params)
    ]
    if not fills:
        raise RelaytraceError(
            "the build has no entry that takes a KV cache and any number of tokens of one sequence (a prefill): "
            "a context cannot be filled; profile with context 0"
        )
    return "prefill" if "prefill" in fills else fills[0]
