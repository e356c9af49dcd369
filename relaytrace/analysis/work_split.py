"""How a fused kernel's time and work are cut among its ops: its time under the
``split`` policy by the roofline bound of the member PrimFunc each op was lowered to;
its work, under every policy, by each op's own count.

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
call did not bind) the site's split falls back to ``ops.estimated_flops``.

The kernel's executed work (its TIR's count) is cut by each op's member's FLOPs (and
transcendental calls), falling back to the ops' useful FLOPs, then to
``ops.estimated_flops``; beside it each op's useful FLOPs (``model.work.useful_flops``,
what the model asks). Pure.
"""

from __future__ import annotations

from attrs import define

from ..model.lineage import CallSite, Lineage
from ..model.ops import estimated_flops, is_dequantize
from ..model.peaks import Peaks
from ..model.profile import ArgInfo
from ..model.verification import matching
from ..model.work import (
    LIMIT,
    KernelWork,
    NotEvaluable,
    bind,
    concrete,
    evaluate,
    excess_why,
    tensor_bytes,
    useful_flops,
)

FLOPS_PER_BYTE = 10.0
EXCESS = 0.05  # executed FLOPs beyond useful ones by more than this fraction are named, with why


@define(frozen=True)
class OpWork:
    """One op's part of one call site's work: ``flops`` and ``transcendentals`` its part
    of the kernel's executed count (its TIR's; None when not counted), ``useful`` the
    FLOPs the op asks (``model.work.useful_flops``) or, where relaytrace has no formula
    for it (``counted`` False), its executed FLOPs; ``excess``: why it executes more than
    ``EXCESS`` beyond what it asks (``""`` when it does not)."""

    origin: str
    flops: float | None
    transcendentals: float | None
    useful: float | None
    counted: bool = True
    excess: str = ""


def work_weights(
    lineage: Lineage, site: CallSite, origins: list, arg: ArgInfo | None, peaks: Peaks | None
) -> list[float] | None:
    """Each of ``origins`` (the site's, in order) its member's bound at the call's
    shapes (``arg``), or None when one cannot be weighed so (or none weighs anything:
    a call on empty tensors)."""
    matched = _members(lineage, site, origins, arg)
    if matched is None:
        return None
    env, works = matched
    weights = [_bound(work, env, peaks) for work in works]
    known = [w for w in weights if w is not None]
    return known if len(known) == len(weights) and sum(known) > 0 else None


def op_works(
    lineage: Lineage, site: CallSite, arg: ArgInfo | None, flops: float | None, transcendentals: float | None
) -> tuple[OpWork, ...]:
    """Each origin of ``site`` (in order) its ``OpWork``: the site's executed ``flops``
    and ``transcendentals`` cut by each op's member's own count at the call's shapes
    (``arg``), else by the ops' useful FLOPs, else by ``ops.estimated_flops`` at the
    call's dims (a symbolic dim at the integer the call bound it to, never taken as 1;
    a dequantize, which asks none, by its estimate);
    so the parts add up to the kernel's count and each op keeps its own."""
    origins = [lineage.origins[r.origin] for r in site.roles]
    env = call_dims(lineage, site, arg)
    useful = [_useful(o, env) for o in origins]
    asked_all = [u for u in useful if u is not None]
    own = _own_counts(lineage, site, origins, arg)
    asked_split = [estimated_flops(o, env) if is_dequantize(o.op) else (u or 0.0) for o, u in zip(origins, useful)]
    by_flops = (
        [f for f, _ in own]
        if own and sum(f for f, _ in own) > 0
        else asked_split  # a dequantize asks nothing and executes its share: weighed by its estimate
        if len(asked_all) == len(useful) and sum(asked_all) > 0
        else [estimated_flops(o, env) for o in origins]
    )
    by_trans = [t for _, t in own] if own and sum(t for _, t in own) > 0 else by_flops
    out = []
    for origin, asked, wf, wt in zip(origins, useful, by_flops, by_trans):
        done = _part(flops, wf, by_flops)
        counted = asked is not None
        why = excess_why(origin) if asked is not None and done is not None and done > asked * (1 + EXCESS) else ""
        asked = asked if asked is not None else done
        out.append(OpWork(origin.id, done, _part(transcendentals, wt, by_trans), asked, counted, why))
    return tuple(out)


def call_dims(lineage: Lineage, site: CallSite, arg: ArgInfo | None) -> dict[str, int]:
    """Each symbolic dim of the site's kernel at the integer its call's argument shapes
    (``arg``) bind it to (``model.work.bind``); empty when they bind none."""
    kernel_work = lineage.build.work.get(site.kernel)
    return (bind(kernel_work, arg.shapes) if kernel_work is not None and arg is not None else None) or {}


def _part(total: float | None, weight: float, weights: list[float]) -> float | None:
    return None if total is None else total * weight / (sum(weights) or 1.0)


def _useful(origin, env: dict[str, int]) -> float | None:
    """An op's ``useful_flops`` at the call's dims, None without a formula or a dim."""
    poly = useful_flops(origin)
    try:
        return None if poly is None else evaluate(poly, env)
    except NotEvaluable:
        return None


def _own_counts(lineage: Lineage, site: CallSite, origins: list, arg: ArgInfo | None):
    """Each of ``origins`` its member's (FLOPs, transcendental calls) at the call's
    shapes, None when one is not known. Origins one member computes together (an
    ``NT_matmul`` made of a permute_dims and a matmul) share its count by what each
    asks (``useful_flops``; evenly when none asks any), so it is counted once."""
    matched = _members(lineage, site, origins, arg)
    if matched is None:
        return None
    env, works = matched
    counts = []
    for work in works:
        if work is None or work.flops is None or work.transcendentals is None:
            return None
        try:
            counts.append((evaluate(work.flops, env), evaluate(work.transcendentals, env)))
        except NotEvaluable:
            return None
    asks = [_useful(o, env) or 0.0 for o in origins]
    out = []
    for i, (flops, trans) in enumerate(counts):
        sharing = [j for j, w in enumerate(works) if w is works[i]]
        weights = [asks[j] for j in sharing]
        share = asks[i] / sum(weights) if sum(weights) > 0 else 1 / len(sharing)
        out.append((flops * share, trans * share))
    return out


def _members(lineage: Lineage, site: CallSite, origins: list, arg: ArgInfo | None):
    """(the call's dims, each of ``origins`` the ``KernelWork`` of the member PrimFunc
    it was lowered to), None when the kernel's work or members are not known, the call
    did not bind its dims or an origin has no member."""
    kernel_work = lineage.build.work.get(site.kernel)
    members = [m for m in lineage.build.kernel_members.get(site.kernel, ()) if m.ops and not m.part]
    if kernel_work is None or arg is None or not members:
        return None
    env = bind(kernel_work, arg.shapes)
    match = matching(members, origins)
    if env is None or len(match) != len(origins):
        return None
    works: list[KernelWork | None] = [None] * len(origins)
    for i, j in match.items():
        works[j] = lineage.build.work.get(members[i].prim_func)
    return env, works


def _bound(work: KernelWork | None, env: dict[str, int], peaks: Peaks | None) -> float | None:
    if work is None or work.flops is None:
        return None
    try:
        flops = evaluate(work.flops, env)
    except NotEvaluable:
        return None
    shapes = [concrete(dims, env) for dims, _ in work.params]
    moved = None if None in shapes else tensor_bytes(shapes, [dtype for _, dtype in work.params])
    if moved is None or not 0 <= flops <= LIMIT:
        return None
    if peaks is not None:
        return peaks.bound(flops, moved, work.dtype)[0]
    return max(flops, moved * FLOPS_PER_BYTE)
