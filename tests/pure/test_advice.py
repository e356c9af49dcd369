"""Each advice rule on reports built by hand (no TVM): it fires where its case is, with
its evidence, saving and change, and stays silent on a clean report."""

import attrs

from relaytrace.analysis import advice as A
from relaytrace.analysis.report import make_report
from relaytrace.model.build_facts import BuildFacts, BuildOptions
from relaytrace.model.lineage import CallSite, Lineage, Role
from relaytrace.model.origin import Origin
from relaytrace.model.peaks import Peaks
from relaytrace.model.profile import BUILTIN, KERNEL, CallRecord, Profile

from .test_by_hand import lineage, profile
from .test_roofline import measured, worked


def _timed(sites, us: dict, origins, e2e: float, pipeline="fused", tuned=(), edges=(), builtin_us=0.0, target="llvm"):
    build = BuildFacts("hand", target, pipeline, entries={"main": (("x", (1,), "float32"),)}, tuned=tuned)
    lin = Lineage(
        build,
        origins,
        {k: tuple(s for s in sites if s.kernel == k) for k in {s.kernel for s in sites}},
        site_edges=edges,
    )
    records = [CallRecord(s.kernel, s.call, 0, 0.0, us[s.label], KERNEL) for s in sites]
    if builtin_us:
        records.append(CallRecord("vm.builtin.reshape", 0, 0, 0.0, builtin_us, BUILTIN))
    return make_report(lin, Profile("hand", "llvm", "cpu(0)", "timeline", 1, tuple(records), e2e_us=(e2e,)))


CONV_BN = {
    "c": Origin("c", "conv1", "relax.nn.conv2d", "main", 0),
    "b": Origin("b", "bn1", "relax.nn.batch_norm", "main", 1),
}


def test_a_batch_norm_after_its_conv_is_told_to_fold_and_one_fused_with_it_is_not():
    sites = (
        CallSite("conv2d", 0, 0, (Role("c", "anchor"),)),
        CallSite("fused_batch_norm", 0, 1, (Role("b", "anchor"),)),
    )
    report = _timed(sites, {"conv2d#0": 900.0, "fused_batch_norm#0": 100.0}, CONV_BN, 1000.0, edges=((0, 1),))
    (found,) = A.SeparateBatchNorm().find(report)
    assert found.layers == ("bn1",) and found.sites == ("fused_batch_norm#0",) and found.saving_us == 100.0
    assert found.change.rebuild == A.Rebuild.FOLD_BATCH_NORM and "FoldBatchnormToConv2D" in found.change.how
    fused = (CallSite("fused_conv2d_batch_norm", 0, 0, (Role("c", "anchor"), Role("b", "fused"))),)
    assert A.SeparateBatchNorm().find(_timed(fused, {"fused_conv2d_batch_norm#0": 1000.0}, CONV_BN, 1000.0)) == ()
    unfed = _timed(sites, {"conv2d#0": 900.0, "fused_batch_norm#0": 100.0}, CONV_BN, 1000.0)  # no data flow between
    assert A.SeparateBatchNorm().find(unfed) == ()


def test_a_batch_norm_after_a_convs_bias_add_is_not_told_to_fold_which_would_not_match():
    """conv -> add (the conv's bias) -> batch_norm: FoldBatchnormToConv2D matches conv2d ->
    batch_norm only, so the fold would leave the build as it was."""
    origins = {**CONV_BN, "a": Origin("a", "conv1", "relax.add", "main", 2)}
    sites = (
        CallSite("fused_conv2d_add", 0, 0, (Role("c", "anchor"), Role("a", "fused"))),
        CallSite("fused_batch_norm", 0, 1, (Role("b", "anchor"),)),
    )
    report = _timed(sites, {"fused_conv2d_add#0": 900.0, "fused_batch_norm#0": 100.0}, origins, 1000.0, edges=((0, 1),))
    assert A.SeparateBatchNorm().find(report) == ()


def test_inserted_layout_transforms_are_billed_to_their_pass_with_the_layers_that_caused_them():
    report = make_report(lineage(), profile())  # ConvertLayout's transform: 10 of 150 us, serving conv1 and fc
    (found,) = A.InsertedOverhead().find(report)
    assert found.title.startswith("ops ConvertLayout inserted take 0.010 ms")
    assert set(found.layers) == {"conv1", "fc"} and found.sites == ("layout_transform#0",)
    assert found.saving_us == 10.0 and found.change.rebuild == A.Rebuild.LAYOUT_NCHW
    clean = attrs.evolve(
        lineage(),
        origins={
            **lineage().origins,
            "t1": attrs.evolve(lineage().origins["t1"], kind="op", layer="conv1", pass_name=""),
        },
    )
    assert A.InsertedOverhead().find(make_report(clean, profile())) == ()


def test_untuned_kernels_of_a_tuned_build_are_named_with_their_share():
    lin = lineage()
    build = attrs.evolve(lin.build, options=BuildOptions("fused", "db"), tuned=("fused_conv2d_relu",))
    tuned = attrs.evolve(lin, build=build)
    (found,) = A.UntunedKernels().find(make_report(tuned, profile()))
    assert found.sites == ("layout_transform#0", "matmul#0") and "2 kernel(s) had no tuning record" in found.title
    assert "33.3% of the kernel time" in found.title and "--tune" in found.change.how
    assert A.UntunedKernels().find(make_report(lin, profile())) == ()  # no database applied: not this rule's case


def test_layers_far_below_their_roofline_are_told_to_tune_and_none_without_peaks():
    slow = make_report(worked(), measured(Peaks({"float32": 1e6}, 1e6, "given", "by hand", "a fast device")))
    (found,) = A.FarBelowRoofline().find(slow)
    assert "conv1" in found.layers and found.saving_us > 0 and "efficient" in found.evidence[0]
    assert A.FarBelowRoofline().find(make_report(worked(), measured(None))) == ()
    # -mcpu is told only where the GENERIC CODE line is printed: the native build's ceiling
    # over twice the generic's (a new user was sent to a line that was not there at 1.6x)
    for native, told in ((1.6e6, False), (2.5e6, True)):
        peaks = Peaks({"float32": 1e6}, 1e6, "given", "by hand", "a fast device", native_gflops=native)
        (found,) = A.FarBelowRoofline().find(make_report(worked(), measured(peaks)))
        assert ("-mcpu" in found.change.how) is told and (peaks.native_gain is not None) is told


def test_many_tiny_calls_are_told_to_fuse_or_graph_for_the_target_saving_only_the_dispatch_gap():
    origins = {f"o{i}": Origin(f"o{i}", f"l{i}", "relax.add", "main", i) for i in range(12)}
    sites = tuple(CallSite(f"add{i}", 0, i, (Role(f"o{i}", "anchor"),)) for i in range(12))
    us = {s.label: 2.0 for s in sites}
    unfused = _timed(sites, us, origins, 100.0, pipeline="unfused", builtin_us=30.0)
    (found,) = A.VmOverhead().find(unfused)
    assert len(found.sites) == 12 and found.change.rebuild == A.Rebuild.FUSED
    assert found.saving_us == 46.0  # the dispatch gap: the builtins (30) and the tiny calls' compute (24) stay
    assert "take 0.024 ms of their own compute, which the change keeps" in found.evidence[0]
    assert A.VmOverhead().find(_timed(sites, us, origins, 100.0, builtin_us=30.0)) == ()  # fused, on a CPU: no change
    cuda = _timed(sites, us, origins, 100.0, builtin_us=30.0, target='{"kind":"cuda","keys":["cuda","gpu"]}')
    (graphed,) = A.VmOverhead().find(cuda)
    assert "RewriteCUDAGraph" in graphed.change.how and graphed.saving_us == 46.0 and "(cuda)" in graphed.evidence[1]
    big = _timed(sites, {s.label: 50.0 for s in sites}, origins, 610.0, pipeline="unfused")
    assert A.VmOverhead().find(big) == ()


def test_a_measured_difference_is_a_saving_only_beyond_the_runs_scatter_and_never_when_not_applied():
    assert A.Measured((100.0, 102.0, 104.0), (99.0, 101.0, 103.0)).verdict() == (
        "no measurable change (+0.001 ms, within the runs' scatter 0.008 ms)"
    )
    assert A.Measured((100.0, 102.0, 104.0), (50.0, 51.0, 53.0)).verdict() == (
        "measured saving 0.051 ms (beyond the runs' scatter 0.007 ms)"
    )
    assert A.Measured((100.0, 102.0, 104.0), (150.0, 151.0, 152.0)).verdict().startswith("measured slowdown 0.049 ms")
    assert A.Measured((100.0, 102.0, 104.0), (50.0, 51.0, 53.0), "the rebuild's kernels are the same").verdict() == (
        "did not apply: the rebuild's kernels are the same, so it saves nothing"
    )


def test_a_change_applied_only_where_the_rebuild_moved_the_findings_ops():
    sites = (
        CallSite("conv2d", 0, 0, (Role("c", "anchor"),)),
        CallSite("fused_batch_norm", 0, 1, (Role("b", "anchor"),)),
    )
    report = _timed(sites, {"conv2d#0": 900.0, "fused_batch_norm#0": 100.0}, CONV_BN, 1000.0, edges=((0, 1),))
    (found,) = A.SeparateBatchNorm().find(report)
    before = report.lineage
    assert A.not_applied(found, before, before) == "the rebuild's kernels are the same as before"
    folded = (CallSite("fused_conv2d_add", 0, 0, (Role("c", "anchor"), Role("b", "fused"))),)
    after = _timed(folded, {"fused_conv2d_add#0": 900.0}, CONV_BN, 900.0).lineage
    assert A.not_applied(found, before, after) == ""
    renamed = tuple(attrs.evolve(s, kernel=s.kernel + "_1") for s in sites)  # other kernels, the norm still alone
    moved = _timed(renamed, {"conv2d_1#0": 900.0, "fused_batch_norm_1#0": 100.0}, CONV_BN, 1000.0).lineage
    assert A.not_applied(found, before, moved) == "batch norm(s) bn1 still run without their conv"


def test_the_report_lists_every_rules_findings_largest_saving_first():
    report = make_report(lineage(), profile())
    assert report.advice == A.advise(report) and [f.rule for f in report.advice] == ["inserted-overhead"]
    assert {type(r).__name__ for r in A.RULES} == {
        "SeparateBatchNorm",
        "InsertedOverhead",
        "UntunedKernels",
        "FarBelowRoofline",
        "VmOverhead",
        "WeightOnlyCompute",
    }


def test_kernels_on_weights_alone_are_told_to_be_computed_once_and_one_fed_by_the_step_is_not():
    from relaytrace.model.memory import MemoryPlan, Weight

    origins = {
        "t": Origin("t", "fc", "relax.permute_dims", "main", 0),
        "m": Origin("m", "fc", "relax.matmul", "main", 1),
    }
    vec, mat = (((1, 8), "float32"),), (((8, 8), "float32"),)
    sites = (
        CallSite("transpose", 0, 0, (Role("t", "anchor"),), arguments=mat + mat),
        CallSite("matmul", 0, 1, (Role("m", "anchor"),), arguments=vec + mat + vec),
    )
    plan = MemoryPlan("main", ("transpose#0", "matmul#0"), weights=(Weight("w", (8, 8), "float32", ("transpose#0",)),))
    report = _timed(sites, {"transpose#0": 300.0, "matmul#0": 700.0}, origins, 1000.0, edges=((0, 1),))
    report = make_report(attrs.evolve(report.lineage, build=attrs.evolve(report.lineage.build, memory={"main": plan})),
                         report.profile)  # fmt: skip
    (found,) = A.WeightOnlyCompute().find(report)
    assert found.sites == ("transpose#0",) and found.layers == ("fc",) and found.saving_us == 300.0
    assert "LiftTransformParams" in found.change.how and found.change.rebuild == A.Rebuild.LIFT_PARAMS
    unplanned = _timed(sites, {"transpose#0": 300.0, "matmul#0": 700.0}, origins, 1000.0, edges=((0, 1),))
    assert A.WeightOnlyCompute().find(unplanned) == ()  # no memory plan: which tensors are weights is not known
