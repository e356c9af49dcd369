"""What to change, and what it should save: rules over one report, each a small class.

A rule reads a ``Report`` (lineage, times, roofline, categories) and returns
``Finding``s: what (the layers and call sites), the evidence, an estimated saving in
microseconds per run, and the concrete ``Change`` — the TVM API or relaytrace option
that makes it, and, where relaytrace can make it itself, the name of the rebuild
(``Change.rebuild``: ``commands.advise`` rebuilds with it alone, profiles it as the
original was and diffs the two layer by layer, so the advice is measured, not trusted).

A rule fires only where its change applies (a conv whose bias add stands between it
and its norm is not told to fold: ``FoldBatchnormToConv2D`` does not match that form),
for the build's target (CUDA graphs only on CUDA), and its saving counts only what the
change removes. A rebuild is first checked to have applied where the finding said
(``not_applied``: the rule's ``left``), and a measured difference is a saving only
outside the runs' own scatter, measured in the same sitting (``Measured``).

Adding a rule: a class with a ``name``, ``find(report) -> tuple[Finding, ...]`` and
``left(finding, after) -> str``, listed in ``RULES``, with a test that fires on a
hand-built report and one that stays silent on a clean one
(``tests/pure/test_advice.py``). Pure: no TVM.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Protocol

from attrs import define

from ..model.names import Name
from ..model.origin import INSERTED, OP
from ..model.run_spec import Layout, Precision
from .attribution import Category


class Rebuild(Name):
    """A change relaytrace can rebuild with itself (``advise --verify``), and the run.json
    option and value that make it (``option``)."""

    FOLD_BATCH_NORM = "fold-batch-norm"
    LAYOUT_NCHW = "layout NCHW"
    FUSED = "pipeline fused"
    FLOAT32 = "precision fp32"
    LIFT_PARAMS = "lift-params"

    @property
    def option(self) -> tuple[str, object]:
        """``(RunSpec field, value)``: how the rebuild is made."""
        return _OPTIONS[self]


_OPTIONS: dict[Rebuild, tuple[str, object]] = {
    Rebuild.FOLD_BATCH_NORM: ("fold_batch_norm", True),
    Rebuild.LAYOUT_NCHW: ("layout", Layout.NCHW),
    Rebuild.FUSED: ("pipeline", "fused"),
    Rebuild.FLOAT32: ("precision", Precision.FP32),
    Rebuild.LIFT_PARAMS: ("lift_params", True),
}
SHARE = 0.002  # a finding below this share of the end-to-end time is not worth a line
FAR_BELOW = 0.10  # a layer at under this roofline efficiency is far below its bound
TINY_US = 5.0  # a kernel call under this many microseconds is dominated by the VM's dispatch


@define(frozen=True)
class Change:
    """What to change: in words (``what``), the TVM API or relaytrace option that does it
    (``how``), and the rebuild relaytrace makes to measure it (None when it cannot,
    e.g. tuning, which takes its own time budget)."""

    what: str
    how: str
    rebuild: Rebuild | None = None


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


class AdviceRule(Protocol):
    """A rule: its ``name`` and the findings it makes of a report (none when it has
    nothing to say)."""

    name: str

    def find(self, report) -> tuple[Finding, ...]: ...

    def left(self, finding: Finding, before, after) -> str:
        """What of ``finding`` the rebuild with its change (``after``, a Lineage; ``before``
        the build as it was) still has, in words; "" when the change took it away (or
        relaytrace makes no rebuild for it)."""
        ...


class SeparateBatchNorm:
    """A batch norm run as its own kernel right after a kernel that is only a conv
    (Relax's default CPU pipeline does not fuse them): folding the norm into the conv's
    weights and bias (``relax.transform.FoldBatchnormToConv2D``) leaves the conv with a
    bias add in its epilogue, and the norm's kernel goes. A conv whose kernel computes
    more (its own bias add: conv → add → norm) is not told: the pass matches only
    conv2d → batch_norm, and the rebuild would be the same. Saving: the norm kernels'
    time."""

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
            if any(_only_conv(lineage, p) for p in producers):
                norms.append(site)
        if not norms:
            return ()
        us = sum(report.site_us.get(s.label, 0.0) for s in norms)
        if us < SHARE * _e2e(report):
            return ()
        layers = tuple(
            dict.fromkeys(
                lineage.origins[o].layer
                for s in norms
                for o in s.origin_ids
                if lineage.origins[o].short_op == "batch_norm"
            )
        )
        return (
            Finding(
                self.name,
                f"{len(norms)} batch norm(s) run as kernels of their own after their conv",
                layers,
                tuple(s.label for s in norms),
                (
                    f"{_listed(norms)} run a batch norm fed by a conv's kernel: {us / 1e3:.3f} ms per run, "
                    f"{100 * us / _e2e(report):.1f}% of the end-to-end time",
                ),
                us,
                Change(
                    "fold each batch norm into the conv before it",
                    "relax.transform.FoldBatchnormToConv2D() before the pipeline (relaytrace: --fold-batch-norm)",
                    Rebuild.FOLD_BATCH_NORM,
                ),
            ),
        )

    def left(self, finding: Finding, before, after) -> str:
        """The finding's norms still in a kernel without a conv."""
        alone = dict.fromkeys(
            after.origins[o].layer
            for s in after.call_sites
            if not _has_op(after, s, "conv2d")
            for o in s.origin_ids
            if after.origins[o].short_op == "batch_norm" and after.origins[o].layer in finding.layers
        )
        return f"batch norm(s) {', '.join(list(alone)[:3])} still run without their conv" if alone else ""


class InsertedOverhead:
    """Ops a pass inserted (layout transforms, casts) whose kernels take a share of the
    time, grouped by the pass, with the layers that caused them and every call site that
    runs one; the change undoes the pass's choice where relaytrace can rebuild without it
    (ConvertLayout's layout, the float16 of ToMixedPrecision). Saving: the inserted ops'
    time as the report's policy bills it (under ``anchor`` one fused into another op's
    kernel is billed with that op: the rebuild measures the rest)."""

    name = "inserted-overhead"
    CHANGES = {
        "ConvertLayout": Change(
            "build in the model's own layout (NCHW), or convert only the ops that gain",
            "drop relax.transform.ConvertLayout (relaytrace: --layout NCHW)",
            Rebuild.LAYOUT_NCHW,
        ),
        "ToMixedPrecision": Change(
            "compute in float32, or cast fewer ops (the ops it keeps in float32 need casts)",
            "drop relax.transform.ToMixedPrecision (relaytrace: --precision fp32)",
            Rebuild.FLOAT32,
        ),
        "AlterOpImpl": Change(
            "keep the default operator implementation for these ops",
            "drop relax.transform.AlterOpImpl from the pipeline",
        ),
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
            if share.category != Category.INSERTED or origin is None or origin.kind != INSERTED:
                continue
            us[origin.pass_name] += share.us
            layers[origin.pass_name][share.layer] += share.us
        out = []
        for pass_name, spent in sorted(us.items(), key=lambda kv: -kv[1]):
            if spent < SHARE * _e2e(report):
                continue
            worst = sorted(layers[pass_name].items(), key=lambda kv: -kv[1])
            change = self.CHANGES.get(pass_name, Change(f"build without {pass_name}", f"drop {pass_name}"))
            out.append(
                Finding(
                    self.name,
                    f"ops {pass_name} inserted take {spent / 1e3:.3f} ms per run",
                    tuple(name for name, _ in worst),
                    tuple(sites[pass_name]),
                    (
                        f"{len(sites[pass_name])} call sites run ops {pass_name} inserted; their time "
                        f"({report.policy} policy): {spent / 1e3:.3f} ms per run, "
                        f"{100 * spent / _e2e(report):.1f}% of the "
                        "end-to-end time (those fused into another op's kernel are billed with it)",
                        "most for: " + ", ".join(f"{name} ({t / 1e3:.3f} ms)" for name, t in worst[:3]),
                    ),
                    spent,
                    change,
                )
            )
        return tuple(out)

    def left(self, finding: Finding, before, after) -> str:
        """Sites of the rebuild still running ops the finding's pass inserted."""
        pass_name = next((p for p, change in self.CHANGES.items() if change == finding.change), "")
        sites = [
            s.label
            for s in after.call_sites
            if any(after.origins[o].kind == INSERTED and after.origins[o].pass_name == pass_name for o in s.origin_ids)
        ]
        return f"{len(sites)} call site(s) still run ops {pass_name} inserted" if sites else ""


class UntunedKernels:
    """In a build that applied a tuning database, the kernels it had no record of run
    on TVM's default schedule, silently: named with their share of the time (a library
    call is no TVM kernel: no tuning applies to it). Saving: not
    estimated from the report (0); tuning them is the change, measured by tuning."""

    name = "untuned-kernels"

    def find(self, report) -> tuple[Finding, ...]:
        lineage = report.lineage
        if not lineage.build.options.database:
            return ()
        tuned = set(lineage.build.tuned)
        rows = [k for k in report.kernels if k.name not in tuned and not k.library]
        if not rows:
            return ()
        us = sum(k.us for k in rows)
        total = sum(k.us for k in report.kernels) or 1.0
        rows.sort(key=lambda k: -k.us)
        return (
            Finding(
                self.name,
                f"{len(rows)} kernel(s) had no tuning record: {100 * us / total:.1f}% of the kernel time",
                tuple(dict.fromkeys(layer for k in rows for layer in k.layers)),
                tuple(s.label for s in lineage.call_sites if s.kernel not in tuned and not s.library),
                tuple(f"{k.name}: {k.us / 1e3:.3f} ms ({k.percent:.1f}%), {k.count} call(s)" for k in rows[:5]),
                0.0,
                Change("tune these tasks into the database", "relaytrace tasks DIR --tune N --db DIR"),
            ),
        )

    def left(self, finding: Finding, before, after) -> str:
        """Tuning is not rebuilt: nothing to check."""
        return ""


class FarBelowRoofline:
    """Layers that run far below their roofline bound (under ``FAR_BELOW`` efficiency)
    and spend a share of the time above it: their schedule holds them back; on a CPU
    (an ``llvm`` target) whose own instructions lift the ceiling past ``NATIVE_GAIN``
    (``Peaks.native_gain``: the GENERIC CODE line) the build is also told to use them.
    Saving: the time above the bound (an upper bound: no schedule reaches the roof)."""

    name = "far-below-roofline"

    def find(self, report) -> tuple[Finding, ...]:
        if report.roofline.peaks is None:
            return ()
        slow = [
            r
            for r in report.roofline.layers
            if r.efficiency is not None
            and r.efficiency < FAR_BELOW
            and r.wasted_us is not None
            and r.wasted_us >= SHARE * _e2e(report)
        ]
        if not slow:
            return ()
        wasted = sum(r.wasted_us for r in slow)
        peaks = report.roofline.peaks
        native = peaks.native_gain if _target_kind(report.lineage.build.target) == "llvm" else None
        return (
            Finding(
                self.name,
                f"{len(slow)} layer(s) under {FAR_BELOW:.0%} of their roofline bound",
                tuple(r.name for r in slow),
                (),
                tuple(
                    f"{r.name}: {r.efficiency:.1%} efficient, {r.bound_by}-bound, {r.wasted_us / 1e3:.3f} ms above "
                    "the bound"
                    for r in slow[:5]
                ),
                wasted,
                Change(
                    "schedule these kernels (tune them), and build for this CPU's instructions",
                    "relaytrace tasks DIR --tune N --db DIR; --target with -mcpu (see the GENERIC CODE line: "
                    f"{native:.1f}x the ceiling)",
                )
                if native is not None
                else Change("schedule these kernels (tune them)", "relaytrace tasks DIR --tune N --db DIR"),
            ),
        )

    def left(self, finding: Finding, before, after) -> str:
        """Tuning is not rebuilt: nothing to check."""
        return ""


class VmOverhead:
    """Many tiny kernel calls and the VM's dispatch between them, where a change takes
    that dispatch away: an unfused build is told to fuse (relaytrace rebuilds it fused),
    a fused CUDA build to capture its calls in a CUDA graph; a fused build for another
    target is told nothing (no change of its build removes the calls). Saving: the
    dispatch gap (the time outside kernels and VM builtins; an upper bound): the tiny
    kernels' own compute and the builtins stay whatever the change."""

    name = "vm-overhead"

    def find(self, report) -> tuple[Finding, ...]:
        profile = report.profile
        tiny = [label for label, us in report.site_us.items() if us < TINY_US]
        tiny_us = sum(report.site_us[label] for label in tiny)
        gap = max(profile.gap_us, 0.0)
        if gap < 0.1 * _e2e(report) or len(tiny) < 10:
            return ()
        build = report.lineage.build
        kind = _target_kind(build.target)
        if build.options.pipeline != "fused":
            change = Change(
                "fuse the ops into fewer kernels",
                "relax.get_default_pipeline (relaytrace: --pipeline fused)",
                Rebuild.FUSED,
            )
        elif kind == "cuda":
            change = Change(
                "capture the kernel launches in CUDA graphs",
                "relax.transform.RewriteCUDAGraph (PassContext config relax.backend.use_cuda_graph=True)",
            )
        else:
            return ()
        return (
            Finding(
                self.name,
                f"{len(tiny)} kernel calls under {TINY_US:g} µs and a {gap / 1e3:.3f} ms dispatch gap",
                (),
                tuple(tiny),
                (
                    f"dispatch gap {gap / 1e3:.3f} ms per run "
                    f"({100 * gap / _e2e(report):.1f}% of the end-to-end time), "
                    f"VM builtins {profile.builtin_us / 1e3:.3f} ms; {len(tiny)} calls under {TINY_US:g} µs take "
                    f"{tiny_us / 1e3:.3f} ms of their own compute, which the change keeps",
                    f"the change is for this build's target ({kind or build.target})",
                ),
                gap,
                change,
            ),
        )

    def left(self, finding: Finding, before, after) -> str:
        """The rebuild makes no fewer kernel calls than the build as it was."""
        return (
            f"{len(after.call_sites)} kernel calls, no fewer than before ({len(before.call_sites)})"
            if len(after.call_sites) >= len(before.call_sites)
            else ""
        )


class WeightOnlyCompute:
    """Kernels that compute on weights alone, in every run of the entry: no other kernel
    feeds them and every tensor they read is a weight (``MemoryPlan.weights``: a
    parameter after the entry's ``num_input``, or a constant) — a Linear's weight
    transposed by ``permute_dims`` before its matmul (how ``nn.Linear`` and TVM's default
    pipeline leave it), a quantized weight dequantized whole. Their result is the same in
    every step: computed once when the weights are loaded, the step saves their time.
    The change is TVM's ``LiftTransformParams`` (the computation moved into a
    ``transform_params`` function run once; relaytrace's rebuild ``--lift-params``) or a
    fusion that folds the transpose into the matmul's kernel (MLC-LLM's
    ``FuseTransposeMatmul``). Saving: those kernels' time."""

    name = "weight-only-compute"

    def find(self, report) -> tuple[Finding, ...]:
        lineage = report.lineage
        plan = lineage.build.memory.get(report.profile.entry)
        if plan is None:
            return ()
        reads: dict[str, int] = defaultdict(int)
        for weight in plan.weights:
            for label in weight.sites:
                reads[label] += 1
        fed = {b for _, b in lineage.site_edges}
        sites = [
            s
            for s in lineage.call_sites
            if s.position not in fed and 0 < len(s.arguments) - 1 <= reads.get(s.label, 0)  # its inputs, all weights
        ]
        us = sum(report.site_us.get(s.label, 0.0) for s in sites)
        if not sites or us < SHARE * _e2e(report):
            return ()
        ops = dict.fromkeys(lineage.origins[o].short_op for s in sites for o in s.origin_ids)
        layers = tuple(dict.fromkeys(lineage.origins[o].layer for s in sites for o in s.origin_ids))
        return (
            Finding(
                self.name,
                f"{len(sites)} kernel call(s) compute on weights alone in every run ({', '.join(ops)})",
                layers,
                tuple(s.label for s in sites),
                (
                    f"{_listed(sites)} read only weights and no other kernel's output: "
                    f"{us / 1e3:.3f} ms per run, {100 * us / _e2e(report):.1f}% of the end-to-end time, "
                    "the same result each time",
                ),
                us,
                Change(
                    "compute them once, when the weights are loaded, not in every run",
                    "relax.transform.LiftTransformParams() (moves them into a transform_params function run once), "
                    "or store the weights transposed / fuse the transpose into the matmul (MLC-LLM's "
                    "FuseTransposeMatmul)",
                    Rebuild.LIFT_PARAMS,
                ),
            ),
        )

    def left(self, finding: Finding, before, after) -> str:
        """Which of the finding's ops the rebuild still runs in its entry, at every call:
        those ``LiftTransformParams`` did not move out ("" when it moved them all)."""
        sites = [s for s in before.call_sites if s.label in set(finding.sites)]
        moved = {o for s in sites for o in s.origin_ids}
        entry = {s.function for s in sites}
        still = {o for s in after.call_sites if s.function in entry for o in s.origin_ids} & moved
        if not still:
            return ""
        ops = ", ".join(dict.fromkeys(after.origins[o].short_op for o in sorted(still)))
        return f"{len(still)} of its {len(moved)} op(s) still run in every call ({ops})"


RULES: tuple[AdviceRule, ...] = (
    SeparateBatchNorm(),
    InsertedOverhead(),
    UntunedKernels(),
    FarBelowRoofline(),
    VmOverhead(),
    WeightOnlyCompute(),
)


def advise(report, rules: tuple[AdviceRule, ...] = RULES) -> tuple[Finding, ...]:
    """Every rule's findings on ``report``, the largest estimated saving first."""
    found = [f for rule in rules for f in rule.find(report)]
    return tuple(sorted(found, key=lambda f: -f.saving_us))


@define(frozen=True)
class Measured:
    """A change measured in one sitting: the end-to-end runs of the build as it was
    (``before_us``: ``advise --verify`` gives the runs made just before and just after
    the change's, so the machine's drift between them counts as scatter, not as a
    saving) and of the rebuild with the change (``after_us``), all made now,
    and ``not_applied`` ("" when the change applied where its finding said, else why
    not: ``not_applied``)."""

    before_us: tuple[float, ...]
    after_us: tuple[float, ...]
    not_applied: str = ""

    @property
    def noise_us(self) -> float:
        """The runs' own scatter: each side's max - min, added (as ``diff`` takes a layer's)."""
        return sum(max(runs) - min(runs) for runs in (self.before_us, self.after_us) if runs)

    @property
    def saving_us(self) -> float:
        """Before's median minus after's: positive when the change made it faster."""
        return statistics.median(self.before_us) - statistics.median(self.after_us)

    def verdict(self) -> str:
        """In words: "did not apply: WHY", "no measurable change" (the difference within
        the noise), or the measured saving (or slowdown) beside the noise."""
        if self.not_applied:
            return f"did not apply: {self.not_applied}, so it saves nothing"
        noise = f"the runs' scatter {self.noise_us / 1e3:.3f} ms"
        if abs(self.saving_us) <= self.noise_us:
            return f"no measurable change ({self.saving_us / 1e3:+.3f} ms, within {noise})"
        if self.saving_us > 0:
            return f"measured saving {self.saving_us / 1e3:.3f} ms (beyond {noise})"
        return f"measured slowdown {-self.saving_us / 1e3:.3f} ms (beyond {noise})"


def not_applied(finding: Finding, before, after, rules: tuple[AdviceRule, ...] = RULES) -> str:
    """Why ``finding``'s change did not apply in the rebuild ``after`` (a Lineage; ``before``:
    the build as it was, rebuilt in the same sitting): its kernels are the same (each call
    site its kernel and origins), or what of the finding it still has (the rule's ``left``);
    "" when it applied."""
    if _kernels(before) == _kernels(after):
        return "the rebuild's kernels are the same as before"
    rule = next((r for r in rules if r.name == finding.rule), None)
    return rule.left(finding, before, after) if rule is not None else ""


def _listed(sites) -> str:
    """``N call sites (a#0, b#0, c#0 ...)``: how many, and the first three by label."""
    return f"{len(sites)} call sites ({', '.join(s.label for s in sites[:3])}{' ...' if len(sites) > 3 else ''})"


def _kernels(lineage) -> list:
    return sorted((s.kernel, s.call, tuple(sorted(s.origin_ids))) for s in lineage.call_sites)


def _target_kind(target: str) -> str:
    """A target's kind ("llvm", "cuda") from its text: TVM's JSON or its command-line form."""
    try:
        return str(json.loads(target).get("kind", ""))
    except (ValueError, AttributeError):
        return target.split(maxsplit=1)[0] if target.strip() else ""


def _has_op(lineage, site, op: str) -> bool:
    return any(lineage.origins[o].short_op == op for o in site.origin_ids if o in lineage.origins)


def _only_conv(lineage, site) -> bool:
    """Whether the model's ops ``site`` runs are convs alone (ops a pass inserted aside)."""
    ops = [
        lineage.origins[o].short_op for o in site.origin_ids if o in lineage.origins and lineage.origins[o].kind == OP
    ]
    return bool(ops) and set(ops) == {"conv2d"}


def _e2e(report) -> float:
    return report.profile.e2e_median_us or sum(report.site_us.values()) or 1.0
