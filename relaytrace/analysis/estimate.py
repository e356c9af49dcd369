"""An estimate for a build that cannot run here: each kernel's roofline lower bound.

A build for a GPU, or for another CPU without its device at hand, is traced but not
run. Its kernels' work (``BuildFacts.work``) at the shapes the compiled IR gives
each call site, against a named device's or the user's peaks, gives each site the
least time it can take: ``max(FLOPs / peak, bytes / bandwidth)``. ``estimated_profile``
makes of those a ``Profile`` of mode ``ESTIMATE``, so every table, file and report of
a measured profile shows the estimate too, each saying it is one. Pure: no TVM.
"""

from __future__ import annotations

from ..errors import RelaytraceError, UsageError
from ..model.lineage import Lineage
from ..model.peaks import Peaks
from ..model.profile import ESTIMATE, FROM_IR, KERNEL, ArgInfo, CallRecord, Profile
from ..model.shapes import bind
from ..model.work import concrete, work_at
from .roofline import lower_bound


def estimated_profile(lineage: Lineage, peaks: Peaks, entry: str | None = None,
                      shapes: dict[str, tuple[int, ...]] | None = None) -> Profile:
    """The ``ESTIMATE`` profile of ``entry`` (default main, or the only one) on the device
    of ``peaks``: one run in which each kernel site takes its roofline bound at the
    shapes its IR gives it, symbolic dims bound by ``shapes`` (input name -> concrete
    shape); a symbolic input without one is a ``UsageError`` naming it. A site whose
    work is not known takes 0 and is counted out (``Roofline.counted``)."""
    entry = lineage.entry(entry)
    lineage = lineage.for_entry(entry)
    signature = lineage.build.entries.get(entry) or ()
    given = dict(shapes or {})
    unknown = [name for name in given if name not in {n for n, _, _ in signature}]
    if unknown:
        raise UsageError(f"{lineage.build.model} has no input {unknown[0]!r}: its inputs are "
                         f"{', '.join(n for n, _, _ in signature)}")
    concrete = []
    for name, shape, dtype in signature:
        if name in given:
            concrete.append((tuple(given[name]), dtype))
        elif all(isinstance(d, int) for d in shape):
            concrete.append((tuple(shape), dtype))
        else:
            raise UsageError(f"input {name!r} has symbolic dims {list(shape)}: give its size with --input-shape "
                             f"{name}:{'x'.join(str(d) if isinstance(d, int) else '8' for d in shape)}")
    values = bind(signature, concrete, lineage.build.model)
    records, args, start = [], {}, 0.0
    for site in lineage.call_sites:
        site_shapes = tuple(_shape(shape, values, site.label) for shape, _ in site.arguments)
        dtypes = tuple(dtype for _, dtype in site.arguments)
        kernel_work = lineage.build.work.get(site.kernel)
        work = work_at(kernel_work, site_shapes, dtypes)
        bound, _ = lower_bound(work.flops, work.bytes, peaks, kernel_work.dtype if kernel_work else "float32")
        us = bound or 0.0
        records.append(CallRecord(site.kernel, site.key.call, 0, start, us, KERNEL))
        args[site.key.in_entry] = ArgInfo(site_shapes, dtypes)
        start += us
    return Profile(model=lineage.build.model, target=lineage.build.target, device=peaks.device, mode=ESTIMATE,
                   repeat=1, records=tuple(records), args=args, e2e_us=(start,), entry=entry,
                   inputs=tuple((name, shape, dtype) for (name, _, dtype), (shape, _) in zip(signature, concrete)),
                   arguments=FROM_IR, peaks=peaks)


def _shape(dims, values: dict[str, int], label: str) -> tuple[int, ...]:
    found = concrete(dims, values)
    if found is None:
        raise RelaytraceError(f"{label}: an argument of shape {list(dims)} is sized only at run time (not by the "
                              "inputs' sizes), so its work cannot be estimated")
    return found
