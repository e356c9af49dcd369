"""How a fused kernel's time is cut among its ops under the ``split`` policy: by the
roofline bound of the member PrimFunc each op was lowered to.

A fused kernel (``fused_conv2d_add_relu``, or a conv2d with the layout transform
ConvertLayout put before it) is made of member PrimFuncs, each computing one op
(``BuildFacts.kernel_members``, matched to the site's origins one to one as
verification matches them). Each member's work was counted before FuseTIR merged
them (``BuildFacts.work``); at the shapes the call ran with, its least time on the
profile's peaks, ``max(FLOPs / peak, bytes / bandwidth)``, is its op's weight. So a
layout transform fused into a conv gets the time its bytes take, not nothing, and a
conv the time of its multiply-adds. Without peaks the bound is taken on a machine of
``FLOPS_PER_BYTE`` (a knee of 10 FLOPs per byte, a CPU's order). Where a figure is
missing (a lineage without work, a member no op is matched to, a symbolic dim the
call did not bind) the site's split falls back to ``ops.estimated_flops``. Pure.
"""

from __future__ import annotations

from ..model.lineage import CallSite, Lineage
from ..model.peaks import Peaks
from ..model.profile import ArgInfo
from ..model.verification import matching
from ..model.work import LIMIT, KernelWork, bind, concrete, evaluate, tensor_bytes

FLOPS_PER_BYTE = 10.0


def work_weights(lineage: Lineage, site: CallSite, origins: list, arg: ArgInfo | None,
                 peaks: Peaks | None) -> list[float] | None:
    """Each of ``origins`` (the site's, in order) its member's bound at the call's
    shapes (``arg``), or None when one cannot be weighed so (or none weighs anything:
    a call on empty tensors)."""
    kernel_work = lineage.build.work.get(site.kernel)
    members = [m for m in lineage.build.kernel_members.get(site.kernel, ()) if m.ops and not m.part]
    if kernel_work is None or arg is None or not members:
        return None
    env = bind(kernel_work, arg.shapes)
    match = matching(members, origins)
    if env is None or len(match) != len(origins):
        return None
    weights = [0.0] * len(origins)
    for i, j in match.items():
        weight = _bound(lineage.build.work.get(members[i].prim_func), env, peaks)
        if weight is None:
            return None
        weights[j] = weight
    return weights if sum(weights) > 0 else None


def _bound(work: KernelWork | None, env: dict[str, int], peaks: Peaks | None) -> float | None:
    if work is None or work.flops is None:
        return None
    try:
        flops = evaluate(work.flops, env)
    except KeyError:
        return None
    shapes = [concrete(dims, env) for dims, _ in work.params]
    moved = None if None in shapes else tensor_bytes(shapes, [dtype for _, dtype in work.params])
    if moved is None or not 0 <= flops <= LIMIT:
        return None
    if peaks is not None:
        return peaks.bound(flops, moved, work.dtype)[0]
    return max(flops, moved * FLOPS_PER_BYTE)
