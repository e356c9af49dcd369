"""The Report: every figure derived from one (lineage, profile, policy), computed once.

Every renderer and the CLI read a Report instead of recomputing roll-ups, so the
terminal, the CSVs, the graphs and the HTML report cannot disagree.
"""

from __future__ import annotations

import attrs
from attrs import define

from ..errors import expect
from ..model.lineage import Coverage, Lineage
from ..model.profile import KERNEL, Profile
from ..model.run_spec import PolicyName
from . import attribution
from .advice import Finding, advise
from .inside import InsideRow, inside_rows
from .memory import Memory, profiled_memory
from .precision import Precision, precision
from .roofline import Roofline, roofline


@define(frozen=True)
class Report:
    """``lineage`` is the lineage as the profiled entry's run sees it
    (``Lineage.for_entry``); ``build_lineage`` the whole build's, every entry."""

    lineage: Lineage
    profile: Profile
    policy: PolicyName
    shares: tuple[attribution.Share, ...]
    layers: tuple[attribution.LayerRow, ...]  # slowest first; they add up to the kernel time
    kernels: tuple[attribution.KernelRow, ...]
    op_types: tuple[attribution.OpTypeRow, ...]
    categories: attribution.Categories
    coverage: Coverage
    site_us: dict[str, float]  # call-site label -> median time over runs
    build_lineage: Lineage
    roofline: Roofline  # work, achieved rates and the bound per site, layer, op type, kernel
    precision: Precision  # dtypes per site and layer, casts and their time, layers left in float32 and why
    memory: Memory | None = None  # the entry's memory plan at the dims it ran with (None: the lineage has none)
    advice: tuple[Finding, ...] = ()  # what to change, each with its evidence and estimated saving (``advice``)
    inside: tuple[InsideRow, ...] = ()  # each fused kernel's parts as timed inside (profile --inside) and as modelled

    def modules(self, depth: int) -> tuple[tuple[str, float, float], ...]:
        """(module prefix, time, percent) at a module depth (``layer3`` at depth 1)."""
        return attribution.by_prefix(self.layers, depth)


def make_report(lineage: Lineage, profile: Profile, policy: PolicyName | str = PolicyName.ANCHOR) -> Report:
    """The report of a lineage and a profile of its build (refused when they do not
    match), about the entry function the profile ran (``Lineage.for_entry``); its
    roofline against the profile's peaks, its precision cut by the same shares; its memory at
    the dims the profile ran with; the advice its rules give on all of that."""
    expect("make_report's lineage", lineage, Lineage, "a Lineage (relaytrace.build's, or Lineage.load)")
    expect("make_report's profile", profile, Profile, "a Profile (relaytrace.profile's, or Profile.load)")
    build_lineage, lineage = lineage, lineage.for_entry(profile.entry)
    policy = attribution.policy_named(policy)
    parts = attribution.shares(lineage, profile, policy)
    times = profile.by_site(KERNEL)
    site_us = {s.key: times[s.key] for s in lineage.call_sites}
    report = Report(
        lineage=lineage,
        profile=profile,
        policy=policy,
        shares=parts,
        layers=attribution.layers_from(parts),
        kernels=attribution.by_kernel(lineage, profile),
        op_types=attribution.op_types_from(lineage, parts),
        categories=attribution.categories_from(parts, profile, lineage),
        coverage=lineage.coverage(),
        site_us={s.label: times[s.key] for s in lineage.call_sites},
        build_lineage=build_lineage,
        roofline=roofline(lineage, profile, parts, policy),
        precision=precision(lineage, parts, site_us),
        memory=profiled_memory(build_lineage, profile),
        inside=inside_rows(lineage, profile),
    )
    return attrs.evolve(report, advice=advise(report))
