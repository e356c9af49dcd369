"""An estimate for a build that cannot run here: each kernel's roofline lower bound.

A build for a GPU, or for another CPU without its device at hand, is traced but not
run. Its kernels' work (``BuildFacts.work``) at the shapes the compiled IR gives
each call site, against a named device's or the user's peaks, gives each site the
least time it can take: ``max(FLOPs / peak, bytes / bandwidth)``. ``estimated_profile``
makes of those a ``Profile`` of mode ``ESTIMATE``, so every table, file and report of
a measured profile shows the estimate too, each saying it is one. Pure: no TVM.
"""

from __future__ import annotations

from ..errors import UsageError
from ..model.entry import (
    APPEND,
    MERGE,
    PAGED_DECODE,
    PAGED_PREFILL,
    RAGGED_PREFILL,
    ROPE,
    cache_param,
    default_context,
    kernel_role,
    runs_attention,
    step_shape,
)
from ..model.lineage import Lineage
from ..model.peaks import Peaks
from ..model.profile import CACHE, ESTIMATE, FROM_IR, KERNEL, ArgInfo, CallRecord, Profile
from ..model.shapes import bind, match_input_names
from ..model.sitekey import Calls
from ..model.work import KernelWork, cache_work, concrete, work_at
from .roofline import lower_bound


def estimated_profile(  # noqa: PLR0913 - public API: keyword options, checked and then held in records
    lineage: Lineage,
    peaks: Peaks,
    entry: str | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
    context: int | None = None,
    sequences: int = 1,
    bound: tuple[tuple[str, int, str], ...] = (),
) -> Profile:
    """The ``ESTIMATE`` profile of ``entry`` (default main, or the only one) on the device
    of ``peaks``: one run in which each kernel site takes its roofline bound at the
    shapes its IR gives it, symbolic dims bound by ``shapes`` (input name -> concrete
    shape); a symbolic input without one is a ``UsageError`` naming it. A site whose
    work is not known takes 0 and is counted out (``Roofline.counted``), with the
    reason in its notes: among them a site given an argument the inputs' sizes do not
    size (a shape function's heap), which keeps that dim as the IR has it. An entry that
    takes a KV cache is a served step after ``context`` tokens (default 0 for an entry
    of symbolic length, a prefill, else 32): each attention builtin call runs the KV
    cache's kernels for it (``cache_calls``), each at its bound, for each of
    ``sequences`` sequences (a batch entry's); ``bound`` says the dims sized by the
    model or the user (``Profile.bound``)."""
    entry = lineage.entry(entry)
    lineage = lineage.for_entry(entry)
    signature = lineage.build.entries.get(entry) or ()
    given = match_input_names(shapes or {}, [n for n, _, _ in signature], lineage.build.model)
    concrete = []
    for name, shape, dtype in signature:
        if name in given:
            concrete.append((tuple(given[name]), dtype))
        elif all(isinstance(d, int) for d in shape):
            concrete.append((tuple(shape), dtype))
        else:
            raise UsageError(
                f"input {name!r} has symbolic dims {list(shape)}: give its size with --input-shape "
                f"{name}:{'x'.join(str(d) if isinstance(d, int) else '8' for d in shape)}"
            )
    values = bind(signature, concrete, lineage.build.model)
    records, args, start = [], {}, 0.0
    for site in lineage.call_sites:
        kernel_work = lineage.build.work.get(site.kernel)
        site_shapes = _shapes(site.arguments, kernel_work, values)
        dtypes = tuple(dtype for _, dtype in site.arguments)
        work = work_at(kernel_work, site_shapes, dtypes)
        least, _ = lower_bound(work.flops, work.bytes, peaks, kernel_work.dtype if kernel_work else "float32")
        us = least or 0.0
        records.append(CallRecord(site.kernel, site.key.call, 0, start, us, KERNEL))
        args[site.key.in_entry] = ArgInfo(site_shapes, dtypes)
        start += us
    step: tuple[int, ...] = ()
    params = lineage.build.params.get(entry, ())
    if lineage.build.kv_cache is not None and cache_param(params) is not None:
        first = next(t for p in params if not p.weight for t in p.tensors)
        shape = next(s for (n, _, _), (s, _) in zip(signature, concrete) if n == first.name)
        tokens = shape[-2] if len(shape) >= 2 else 1
        if step_shape(params).packed:  # every sequence's tokens in one row
            tokens //= sequences
        step = (tokens, context if context is not None else default_context(params))
        calls = cache_calls(lineage, peaks, *step, start=start, sequences=sequences)
        records.extend(calls)
        start += sum(r.duration_us for r in calls)
    elif context is not None:
        raise UsageError(f"--context is for an entry that takes a KV cache; {entry} takes none")
    return Profile(
        model=lineage.build.model,
        target=lineage.build.target,
        device=peaks.device,
        mode=ESTIMATE,
        repeat=1,
        records=tuple(records),
        args=args,
        e2e_us=(start,),
        entry=entry,
        inputs=tuple((name, shape, dtype) for (name, _, dtype), (shape, _) in zip(signature, concrete)),
        arguments=FROM_IR,
        peaks=peaks,
        step=step,
        sequences=sequences,
        bound=bound,
    )


def cache_calls(
    lineage: Lineage, peaks: Peaks, tokens: int, context: int, start: float = 0.0, sequences: int = 1
) -> list[CallRecord]:
    """The KV-cache kernel calls of one served step of ``tokens`` new tokens after
    ``context`` (``lineage`` as one entry sees it), each at its roofline bound
    (``model.work.cache_work``): inside each attention builtin call, what TVM's paged
    KV cache runs for such a step — RoPE over the new tokens' queries and keys, the
    append of their keys and values, then one token after a context is a decode
    (``PAGED_DECODE``), else a ragged prefill over the new tokens and, when there is a
    context, a paged prefill over it and the merge of the two."""
    cache = lineage.build.kv_cache
    if cache is None:
        return []
    roles = [ROPE, APPEND] + (
        [PAGED_DECODE] if tokens == 1 and context else [RAGGED_PREFILL] + ([PAGED_PREFILL, MERGE] if context else [])
    )
    names = [k for role in roles for k in cache.kernels if kernel_role(cache, k) == role]
    calls = Calls()
    records = []
    for site in sorted((b for b in lineage.builtins if runs_attention(b.name)), key=lambda b: b.position):
        within = calls.key(site.name).in_entry
        for name in names:
            work = cache_work(cache, name, tokens, context, sequences=sequences)
            us = lower_bound(work.flops, work.bytes, peaks, "float32")[0] or 0.0
            records.append(CallRecord(name, calls.key(name).call, 0, start, us, CACHE, within))
            start += us
    return records


def _shapes(arguments, kernel_work: KernelWork | None, values: dict[str, int]) -> tuple[tuple, ...]:
    """A site's argument shapes at the inputs' sizes (``values``). An argument the
    compiled IR does not size (an allocation a symbolic entry sizes from the shape heap
    is typed by its rank alone; the heap itself) takes its kernel's parameter shape
    (``KernelWork.params``), bound by the inputs' sizes and the site's other arguments;
    one still not sized keeps its dims as the IR has them, so its site's work says it
    is left out of the bound (``work.work_at``)."""
    found = [concrete(dims, values) for dims, _ in arguments]
    params = kernel_work.params if kernel_work is not None and len(kernel_work.params) == len(found) else None
    if params is not None and None in found:
        env = dict(values)
        for (dims, _), shape in zip(params, found):
            if shape is not None and len(dims) == len(shape):
                env.update((d, n) for d, n in zip(dims, shape) if isinstance(d, str) and d.isidentifier())
        found = [
            shape if shape is not None or len(own) != len(dims) else concrete(own, env)
            for (dims, _), (own, _), shape in zip(arguments, params, found)
        ]
    return tuple(shape if shape is not None else tuple(dims) for shape, (dims, _) in zip(found, arguments))
