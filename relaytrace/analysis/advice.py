"""What to change, and what it should save: rules over one report, each a small class.

A rule reads a ``Report`` (lineage, times, roofline, categories) and returns
``Finding``s: what (the layers and call sites), the evidence, an estimated saving in
microseconds per run, and the concrete ``Change`` — the TVM API or relaytrace option
that makes it, and, where relaytrace can make it itself, the name of the rebuild
(``Change.rebuild``: ``commands.advise`` rebuilds with it alone, profiles it as the
original was and diffs the two layer by layer, so the advice is measured, not trusted).

Adding a rule: a class with a ``name`` and ``find(report) -> tuple[Finding, ...]``,
listed in ``RULES``, with a test that fires on a hand-built report and one that stays
silent on a clean one (``tests/pure/test_advice.py``). Pure: no TVM.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol

from attrs import define

from ..model.origin import INSERTED, OP

FOLD_BATCH_NORM, LAYOUT_NCHW, FUSED, FLOAT32 = "fold-batch-norm", "layout NCHW", "pipeline fused", "precision fp32"
REBUILDS = (FOLD_BATCH_NORM, LAYOUT_NCHW, FUSED, FLOAT32)  # the changes relaytrace can rebuild with itself
SHARE = 0.002  # a finding below this share of the end-to-end time is not worth a line
FAR_BELOW = 0.10  # a layer at under this roofline efficiency is far below its bound
TINY_US = 5.0  # a kernel call under this many microseconds is dominated by the VM's dispatch


@define(frozen=True)
class Change:
    """What to change: in words (``what``), the TVM API or relaytrace option that does it
    (``how``), and the rebuild relaytrace makes to measure it (one of ``REBUILDS``; ""
    when it cannot, e.g. tuning, which takes its own time budget)."""

    what: str
    how: str
    rebuild: str = ""


@define(frozen=True)
class Finding:
    """One piece of advice: the ``rule`` that found it, a one-line ``title``, the
    ``layers`` and call ``sites`` it is about, the ``evidence`` (lines of figures from
    the report), ``saving_us`` (the estimated saving per run: an upper bound where the
    rule says so) and the ``change``."""

    rule: str
    title: str
    layers: tuple[str, ...]
    sites: tuple[str, ...]
    evidence: tuple[str, ...]
    saving_us: float
    change: Change


class Rule(Protocol):
    """A rule: its ``name`` and the findings it makes of a report (none when it has
    nothing to say)."""

    name: str

    def find(self, report) -> tuple[Finding, ...]:
        ...


class SeparateBatchNorm:
    """A batch norm run as its own kernel right after the conv that feeds it (Relax's
    default CPU pipeline does not fuse them): folding the norm into the conv's weights
    and bias (``relax.transform.FoldBatchnormToConv2D``) leaves the conv with a bias add
    in its epilogue, and the norm's kernel goes. Saving: the norm kernels' time."""

    name = "separate-batch-norm"

    def find(self, report) -> tuple[Finding, ...]:
        lineage = report.lineage
        by_position = {s.position: s for s in lineage.call_sites}
        feeds = defaultdict(set)
        for a, b in lineage.site_edges:
            feeds[b].add(a)
        norms = []
        for site in lineage.call_sites:
            ops = {lineage.origins[o].short_op for o in site.origin_ids if lineage.origins[o].kind == OP}
            if "batch_norm" not in ops or "conv2d" in ops:
                continue
            producers = [by_position[p] for p in feeds[site.position] if p in by_position]
            if any(_has_op(lineage, p, "conv2d") for p in producers):
                norms.append(site)
        if not norms:
            return ()
        us = sum(report.site_us.get(s.label, 0.0) for s in norms)
        if us < SHARE * _e2e(report):
            return ()
        layers = tuple(dict.fromkeys(lineage.origins[o].layer for s in norms for o in s.origin_ids
                                     if lineage.origins[o].short_op == "batch_norm"))
        return (Finding(
            self.name, f"{len(norms)} batch norm(s) run as kernels of their own after their conv",
            layers, tuple(s.label for s in norms),
            (f"{len(norms)} call sites ({', '.join(s.label for s in norms[:3])}{' ...' if len(norms) > 3 else ''}) "
             f"run a batch norm fed by a conv's kernel: {us / 1e3:.3f} ms per run, "
             f"{100 * us / _e2e(report):.1f}% of the end-to-end time",),
            us, Change("fold each batch norm into the conv before it",
                       "relax.transform.FoldBatchnormToConv2D() before the pipeline (relaytrace: --fold-batch-norm)",
                       FOLD_BATCH_NORM)),)


class InsertedOverhead:
    """Ops a pass inserted (layout transforms, casts) whose kernels take a share of the
    time, grouped by the pass, with the layers that caused them and every call site that
    runs one; the change undoes the pass's choice where relaytrace can rebuild without it
    (ConvertLayout's layout, the float16 of ToMixedPrecision). Saving: the inserted ops'
    time as the report's policy bills it (under ``anchor`` one fused into another op's
    kernel is billed with that op: the rebuild measures the rest)."""

    name = "inserted-overhead"
    CHANGES = {
        "ConvertLayout": Change("build in the model's own layout (NCHW), or convert only the ops that gain",
                                "drop relax.transform.ConvertLayout (relaytrace: --layout NCHW)", LAYOUT_NCHW),
        "ToMixedPrecision": Change("compute in float32, or cast fewer ops (the ops it keeps in float32 need casts)",
                                   "drop relax.transform.ToMixedPrecision (relaytrace: --precision fp32)", FLOAT32),
        "AlterOpImpl": Change("keep the default operator implementation for these ops",
                              "drop relax.transform.AlterOpImpl from the pipeline"),
    }

    def find(self, report) -> tuple[Finding, ...]:
        lineage = report.lineage
        us: dict[str, float] = defaultdict(float)
        layers: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        sites: dict[str, dict[str, None]] = defaultdict(dict)
        for site in lineage.call_sites:  # every site that runs one, fused into another op's kernel or not
            for oid in site.origin_ids:
                origin = lineage.origins[oid]
                if origin.kind == INSERTED and origin.pass_name:
                    sites[origin.pass_name][site.label] = None
        for share in report.shares:  # the time the report's policy bills them
            origin = lineage.origins.get(share.origin)
            if share.category != "inserted" or origin is None or origin.kind != INSERTED:
                continue
            us[origin.pass_name] += share.us
            layers[origin.pass_name][share.layer] += share.us
        out = []
        for pass_name, spent in sorted(us.items(), key=lambda kv: -kv[1]):
            if spent < SHARE * _e2e(report):
                continue
            worst = sorted(layers[pass_name].items(), key=lambda kv: -kv[1])
            change = self.CHANGES.get(pass_name, Change(f"build without {pass_name}", f"drop {pass_name}"))
            out.append(Finding(
                self.name, f"ops {pass_name} inserted take {spent / 1e3:.3f} ms per run",
                tuple(name for name, _ in worst), tuple(sites[pass_name]),
                (f"{len(sites[pass_name])} call sites run ops {pass_name} inserted; their time "
                 f"({report.policy} policy): {spent / 1e3:.3f} ms per run, {100 * spent / _e2e(report):.1f}% of the "
                 "end-to-end time (those fused into another op's kernel are billed with it)",
                 "most for: " + ", ".join(f"{name} ({t / 1e3:.3f} ms)" for name, t in worst[:3])),
                spent, change))
        return tuple(out)


class UntunedKernels:
    """In a build that applied a tuning database, the kernels it had no record of run
    on TVM's default schedule, silently: named with their share of the time (a library
    call is no TVM kernel: no tuning applies to it). Saving: not
    estimated from the report (0); tuning them is the change, measured by tuning."""

    name = "untuned-kernels"

    def find(self, report) -> tuple[Finding, ...]:
        lineage = report.lineage
        if "tuned" not in lineage.build.pipeline:
            return ()
        tuned = set(lineage.build.tuned)
        rows = [k for k in report.kernels if k.name not in tuned and not k.library]
        if not rows:
            return ()
        us = sum(k.us for k in rows)
        total = sum(k.us for k in report.kernels) or 1.0
        rows.sort(key=lambda k: -k.us)
        return (Finding(
            self.name, f"{len(rows)} kernel(s) had no tuning record: {100 * us / total:.1f}% of the kernel time",
            tuple(dict.fromkeys(layer for k in rows for layer in k.layers)),
            tuple(s.label for s in lineage.call_sites if s.kernel not in tuned and not s.library),
            tuple(f"{k.name}: {k.us / 1e3:.3f} ms ({k.percent:.1f}%), {k.count} call(s)" for k in rows[:5]),
            0.0, Change("tune these tasks into the database", "relaytrace tasks DIR --tune N --db DIR")),)


class FarBelowRoofline:
    """Layers that run far below their roofline bound (under ``FAR_BELOW`` efficiency)
    and spend a share of the time above it: their schedule holds them back. Saving: the
    time above the bound (an upper bound: no schedule reaches the roof)."""

    name = "far-below-roofline"

    def find(self, report) -> tuple[Finding, ...]:
        if report.roofline.peaks is None:
            return ()
        slow = [r for r in report.roofline.layers if r.efficiency is not None and r.efficiency < FAR_BELOW
                and r.wasted_us is not None and r.wasted_us >= SHARE * _e2e(report)]
        if not slow:
            return ()
        wasted = sum(r.wasted_us for r in slow)
        return (Finding(
            self.name, f"{len(slow)} layer(s) under {FAR_BELOW:.0%} of their roofline bound",
            tuple(r.name for r in slow), (),
            tuple(f"{r.name}: {r.efficiency:.1%} efficient, {r.bound_by}-bound, {r.wasted_us / 1e3:.3f} ms above "
                  "the bound" for r in slow[:5]),
            wasted, Change("schedule these kernels (tune them), and build for this CPU's instructions",
                           "relaytrace tasks DIR --tune N --db DIR; --target with -mcpu (see the GENERIC CODE line)")),)


class VmOverhead:
    """Many tiny kernel calls and the VM's dispatch between them: the time outside the
    kernels (builtins and the gap) and the calls under ``TINY_US``. An unfused build is
    told to fuse (relaytrace rebuilds it fused); a fused one is told where its calls go.
    Saving: the gap and the tiny calls' time (an upper bound)."""

    name = "vm-overhead"

    def find(self, report) -> tuple[Finding, ...]:
        profile = report.profile
        tiny = [label for label, us in report.site_us.items() if us < TINY_US]
        tiny_us = sum(report.site_us[label] for label in tiny)
        outside = max(profile.gap_us, 0.0) + profile.builtin_us
        spent = outside + tiny_us
        if spent < 0.1 * _e2e(report) or len(tiny) < 10:
            return ()
        fused = report.lineage.build.pipeline.startswith("fused")
        change = (Change("fewer, larger calls: move shape work off the VM, or batch more work per call",
                         "relax.transform.FuseOps / FuseTIR already ran; consider a larger batch or CUDA graphs "
                         "(relax.transform.RewriteCUDAGraph) on a GPU") if fused
                  else Change("fuse the ops into fewer kernels", "relax.get_default_pipeline (relaytrace: "
                              "--pipeline fused)", FUSED))
        return (Finding(
            self.name, f"{len(tiny)} kernel calls under {TINY_US:g} µs and {outside / 1e3:.3f} ms outside kernels",
            (), tuple(tiny),
            (f"VM builtins {profile.builtin_us / 1e3:.3f} ms and dispatch gap {max(profile.gap_us, 0) / 1e3:.3f} ms "
             f"per run; {len(tiny)} calls under {TINY_US:g} µs take {tiny_us / 1e3:.3f} ms: together "
             f"{100 * spent / _e2e(report):.1f}% of the end-to-end time",),
            spent, change),)


RULES: tuple[Rule, ...] = (SeparateBatchNorm(), InsertedOverhead(), UntunedKernels(), FarBelowRoofline(),
                           VmOverhead())


def advise(report, rules: tuple[Rule, ...] = RULES) -> tuple[Finding, ...]:
    """Every rule's findings on ``report``, the largest estimated saving first."""
    found = [f for rule in rules for f in rule.find(report)]
    return tuple(sorted(found, key=lambda f: -f.saving_us))


def _has_op(lineage, site, op: str) -> bool:
    return any(lineage.origins[o].short_op == op for o in site.origin_ids if o in lineage.origins)


def _e2e(report) -> float:
    return report.profile.e2e_median_us or sum(report.site_us.values()) or 1.0
