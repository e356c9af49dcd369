"""Work, rates and the roofline on a lineage and profile built by hand (no TVM): formulas
bound to a site's shapes, the bound and what sets it, roll-ups cut as the time is, an
estimate without a run, peaks given, named and saved."""

import json

import attrs
import pytest

from relaytrace.analysis.estimate import estimated_profile
from relaytrace.analysis.report import make_report
from relaytrace.errors import RelaytraceError, UsageError
from relaytrace.model.lineage import Lineage
from relaytrace.model.peaks import DEVICES, Peaks, given, named
from relaytrace.model.profile import KERNEL, ArgInfo, CallRecord, Profile
from relaytrace.model.work import KernelWork, NotEvaluable, bind, evaluate, tensor_bytes, work_at

from .test_by_hand import SITES, lineage, profile

CONV = KernelWork(
    (((1, 3, 8, 8), "float32"), ((8, 3, 3, 3), "float32"), ((1, 8, 8, 8), "float32")),
    ((2 * 8 * 64 * 27 + 2 * 8 * 64, ()),),
)
LAYOUT = KernelWork((((1, 8, 8, 8), "float32"), ((1, 8, 8, 8), "float32")), ())
MATMUL = KernelWork(((("n", 64), "float32"), ((64, 16), "float32"), (("n", 16), "float32")), ((2048, ("n",)),))
ARGS = {
    "fused_conv2d_relu#0": ArgInfo(((1, 3, 8, 8), (8, 3, 3, 3), (1, 8, 8, 8)), ("float32",) * 3),
    "layout_transform#0": ArgInfo(((1, 8, 8, 8), (1, 8, 8, 8)), ("float32",) * 2),
    "matmul#0": ArgInfo(((4, 64), (64, 16), (4, 16)), ("float32",) * 3),
}
PEAKS = Peaks({"float32": 10.0}, 2.0, "given", "by hand", "a toy")  # 10 GFLOP/s = 1e4 FLOPs/us, 2 GB/s = 2e3 B/us


def worked() -> Lineage:
    lin = lineage()
    work = {"fused_conv2d_relu": CONV, "layout_transform": LAYOUT, "matmul": MATMUL}
    return attrs.evolve(lin, build=attrs.evolve(lin.build, work=work))


def measured(peaks=PEAKS) -> Profile:
    return attrs.evolve(profile(), args=dict(ARGS), peaks=peaks)


def test_a_formula_is_bound_by_the_shapes_a_call_ran_with():
    assert bind(MATMUL, ARGS["matmul#0"].shapes) == {"n": 4}
    assert bind(MATMUL, ((4, 64), (64, 16), (5, 16))) is None  # n cannot be 4 and 5
    assert bind(MATMUL, ((4, 64), (32, 16), (4, 16))) is None  # a static dim of another size
    assert evaluate(((3, ("n",)), (2, ("(n + 1) // 2",)), (1, ("min(n, 2)",))), {"n": 5}) == 15 + 6 + 2
    with pytest.raises(NotEvaluable, match="n"):  # its own class: a KeyError is a bug's
        evaluate(MATMUL.flops, {})
    work = work_at(MATMUL, ARGS["matmul#0"].shapes, ARGS["matmul#0"].dtypes)
    assert (work.flops, work.bytes) == (2 * 4 * 64 * 16, 4 * (4 * 64 + 64 * 16 + 4 * 16))
    unknown = work_at(None, ARGS["matmul#0"].shapes, ARGS["matmul#0"].dtypes)  # a lineage saved before work was counted
    assert unknown.flops is None and unknown.bytes == work.bytes
    assert "do not match" in work_at(MATMUL, ((4, 64),), ("float32",)).why
    # an estimate's argument that nothing sizes (its dims as the IR has them): no figure, and why
    unsized = work_at(MATMUL, ((4, 64), (64, 16), ("?", "?")), ("float32",) * 3)
    assert (unsized.flops, unsized.bytes) == (None, None) and "sized only at run time" in unsized.why
    assert tensor_bytes(((2, 3),), ("float16",)) == 12 and tensor_bytes(((2,),), ("complex",)) is None
    # a kernel of scalars alone (a host compute_symbolic_expr): nothing to move, its count as counted
    scalars = work_at(KernelWork((), ((1, ()),), ()), (), ())
    assert (scalars.flops, scalars.transcendentals, scalars.bytes) == (1, 0, 0)
    assert work_at(MATMUL, (), ()).flops is None  # a kernel with tensors, none recorded: unknown


def test_the_bound_is_the_slower_ceiling_and_the_rest_is_time_above_it():
    report = make_report(worked(), measured())
    sites = {r.name: r for r in report.roofline.sites.values()}
    conv = sites["fused_conv2d_relu#0"]
    flops, moved = 2 * 8 * 64 * 27 + 2 * 8 * 64, 4 * (192 + 216 + 512)
    assert (conv.flops, conv.bytes) == (flops, moved)
    assert conv.bound_by == "compute" and conv.bound_us == pytest.approx(max(flops / 1e4, moved / 2e3))
    assert conv.efficiency == pytest.approx(conv.bound_us / 100.0)
    assert conv.wasted_us == pytest.approx(100 - conv.bound_us)
    layout = sites["layout_transform#0"]
    assert layout.flops == 0 and layout.bound_by == "memory" and layout.bound_us == pytest.approx(2 * 2048 / 2e3)
    assert conv.gflops_s == pytest.approx(flops / 100 / 1e3) and layout.intensity == 0


def test_layers_get_the_work_of_the_shares_they_are_billed():
    report = make_report(worked(), measured())
    roof = report.roofline
    conv1, fc = roof.layer("conv1"), roof.layer("fc")
    layout = roof.sites[SITES[1].key]
    # the inserted transform serves conv1 and fc: each takes half its time and half its bytes
    assert conv1.bytes == pytest.approx(roof.sites[SITES[0].key].bytes + layout.bytes / 2)
    assert fc.bytes == pytest.approx(roof.sites[SITES[2].key].bytes + layout.bytes / 2)
    total = sum(r.bound_us for r in roof.sites.values())
    assert sum(r.bound_us for r in roof.layers) == pytest.approx(total)
    assert sum(r.bound_us for r in roof.op_types) == pytest.approx(total)
    wasted = [r.wasted_us for r in roof.layers]
    assert wasted == sorted(wasted, reverse=True)
    assert roof.counted == 3 and not roof.over_ceiling


def test_rates_without_peaks_have_no_bound_and_a_site_above_a_ceiling_is_named():
    report = make_report(worked(), measured(peaks=None))
    assert report.roofline.peaks is None and report.roofline.layer("conv1").bound_us is None
    assert report.roofline.layer("conv1").gflops_s is not None
    slow_memory = Peaks({"float32": 1e6}, 0.01, "measured", "by hand", "a toy")
    over = dict(make_report(worked(), measured(slow_memory)).roofline.over_ceiling)
    assert "stayed in cache" in over["fused_conv2d_relu#0"]
    fp16 = attrs.evolve(
        worked(),
        build=attrs.evolve(
            worked().build, work={**worked().build.work, "matmul": attrs.evolve(MATMUL, dtype="float16")}
        ),
    )
    fast = Peaks({"float32": 1e-3, "float16": 1e6}, 1e6, "given", "by hand", "a toy")  # float32 far too slow
    over = dict(make_report(fp16, measured(fast)).roofline.over_ceiling)
    assert "matmul#0" not in over and "count or the timer" in over["fused_conv2d_relu#0"]  # held to its dtype's


def test_an_estimate_is_each_sites_bound_at_the_ir_shapes_and_says_it_is_one():
    lin = worked()
    shapes = {s.kernel: tuple(zip(ARGS[s.label].shapes, ARGS[s.label].dtypes)) for s in SITES}
    sites = tuple(
        attrs.evolve(
            s,
            arguments=tuple(
                (tuple("n" if (d == 4 and s.kernel == "matmul" and i != 1) else d for d in shape), dtype)
                for i, (shape, dtype) in enumerate(shapes[s.kernel])
            ),
        )
        for s in SITES
    )
    build = attrs.evolve(lin.build, entries={"main": (("x", ("n", 64), "float32"),)})
    lin = attrs.evolve(lin, build=build, kernels={s.kernel: (s,) for s in sites})
    with pytest.raises(UsageError, match="--input-shape x:8x64"):
        estimated_profile(lin, PEAKS)
    with pytest.raises(UsageError, match="has no input named y; its inputs are x"):
        estimated_profile(lin, PEAKS, shapes={"y": (4, 64)})
    prof = estimated_profile(lin, PEAKS, shapes={"x": (4, 64)})
    assert prof.mode == "estimate" and prof.summary().startswith("ESTIMATE, not a measurement")
    report = make_report(lin, prof)
    for roof in report.roofline.sites.values():
        assert roof.us == pytest.approx(roof.bound_us) and roof.wasted_us == pytest.approx(0)
    again = Profile.from_json(prof.to_json())
    assert again.mode == "estimate" and again.peaks == PEAKS


def test_peaks_given_named_and_saved(tmp_path):
    with pytest.raises(RelaytraceError, match="from 0.001 to 1e"):
        given(0, 10)
    with pytest.raises(RelaytraceError, match="nvidia-a100"):
        named("no-such-gpu")
    a100 = named("nvidia-a100-sxm4-80gb")
    assert a100.for_dtype("float16") == 312_000 and a100.for_dtype("int8") == 19_500 and "datasheet" in a100.method
    assert all(d.source and d.gflops["float32"] > 0 and d.gbps > 0 for d in DEVICES.values())
    prof = measured()
    assert Profile.load(prof.save(tmp_path / "profile.json")).peaks == PEAKS
    old = {**prof.to_json(), "schema": "relaytrace.profile/1"}
    del old["peaks"]
    assert Profile.from_json(old).peaks is None  # a /1 file loads, without peaks


def test_a_lineage_keeps_its_work_through_a_save(tmp_path):
    lin = worked()
    back = Lineage.load(lin.save(tmp_path / "lineage.json"))
    assert back.build.work == lin.build.work


def test_split_cuts_a_fused_kernel_by_its_members_bounds():
    from relaytrace.model.verification import Member

    lin = worked()
    members = {"fused_conv2d_relu": (Member("conv2d", ("relax.nn.conv2d",)), Member("relu", ("relax.nn.relu",)))}
    relu = KernelWork((((1, 8, 8, 8), "float32"), ((1, 8, 8, 8), "float32")), ((512, ()),))
    conv = attrs.evolve(CONV, flops=((2 * 8 * 64 * 27, ()),))
    work = {**lin.build.work, "conv2d": conv, "relu": relu}
    lin = attrs.evolve(lin, build=attrs.evolve(lin.build, kernel_members=members, work=work))
    split = make_report(lin, measured(), policy="split")
    shares = {s.op: s.us for s in split.shares if s.site == "fused_conv2d_relu#0"}
    conv_us = PEAKS.bound(2 * 8 * 64 * 27, 4 * (192 + 216 + 512))[0]
    relu_us = PEAKS.bound(512, 4 * 1024)[0]  # memory-bound: its bytes, not its 512 FLOPs, weigh
    assert shares["conv2d"] / shares["relu"] == pytest.approx(conv_us / relu_us)
    assert sum(shares.values()) == pytest.approx(100.0)
    # without the members' work the split falls back to the ops' estimated FLOPs
    bare = attrs.evolve(lin, build=attrs.evolve(lin.build, work={}))
    fallback = {
        s.op: s.us for s in make_report(bare, measured(), policy="split").shares if s.site == "fused_conv2d_relu#0"
    }
    assert fallback["conv2d"] / fallback["relu"] != pytest.approx(conv_us / relu_us)


def test_figures_from_a_file_that_are_no_counts_are_refused_or_unknown(tmp_path):
    from relaytrace.errors import LineageFormatError

    data = measured().to_json()
    for bad in ({"gbps": 0.0}, {"gflops": {"float16": 5.0}}, {"gbps": -3.0}):
        path = tmp_path / "profile.json"
        path.write_text(json.dumps({**data, "peaks": {**data["peaks"], **bad}}))
        with pytest.raises(LineageFormatError, match="peak"):
            Profile.load(path)
    huge = attrs.evolve(MATMUL, flops=((10**400, ("n",)),))
    assert work_at(huge, ARGS["matmul#0"].shapes, ARGS["matmul#0"].dtypes).flops is None
    negative = attrs.evolve(MATMUL, flops=((-5, ()),))
    assert work_at(negative, ARGS["matmul#0"].shapes, ARGS["matmul#0"].dtypes).flops is None
    with pytest.raises(NotEvaluable):
        evaluate(((1, ("+".join(["n"] * 20000),)),), {"n": 1})  # too long to be a dim TVM wrote
    assert tensor_bytes(((2, 3), (4,)), ("float32",)) is None  # a dtype short
    assert tensor_bytes(((10**20, 10**20),), ("float32",)) is None


def test_a_split_over_empty_tensors_keeps_the_sites_time():
    from relaytrace.model.verification import Member

    lin = worked()
    members = {"fused_conv2d_relu": (Member("conv2d", ("relax.nn.conv2d",)), Member("relu", ("relax.nn.relu",)))}
    empty = KernelWork((((0,), "float32"),), ())
    work = {**lin.build.work, "conv2d": empty, "relu": empty}
    lin = attrs.evolve(lin, build=attrs.evolve(lin.build, kernel_members=members, work=work))
    split = make_report(lin, measured(), policy="split")
    assert sum(s.us for s in split.shares if s.site == "fused_conv2d_relu#0") == pytest.approx(100.0)


def test_each_layer_gets_its_own_ops_part_of_a_fused_kernels_flops_under_either_policy():
    from relaytrace.analysis.roofline import UNTIMED
    from relaytrace.model.verification import Member

    lin = worked()
    members = {"fused_conv2d_relu": (Member("conv2d", ("relax.nn.conv2d",)), Member("relu", ("relax.nn.relu",)))}
    relu = KernelWork((((1, 8, 8, 8), "float32"), ((1, 8, 8, 8), "float32")), ((512, ()),))
    conv = attrs.evolve(CONV, flops=((2 * 8 * 64 * 27, ()),))
    lin = attrs.evolve(
        lin,
        build=attrs.evolve(lin.build, kernel_members=members, work={**lin.build.work, "conv2d": conv, "relu": relu}),
    )
    kernel = 2 * 8 * 64 * 27 + 2 * 8 * 64  # the fused kernel's count: its parts are cut in its members' proportions
    for policy in ("anchor", "split"):
        roof = make_report(lin, measured(), policy=policy).roofline
        conv1, relu_layer = roof.layer("conv1"), roof.layer("relu")
        assert relu_layer.flops / conv1.flops == pytest.approx(512 / (2 * 8 * 64 * 27))  # not by time, not all to one
        assert conv1.flops + relu_layer.flops == pytest.approx(kernel)
        assert relu_layer.useful == relu_layer.flops and not relu_layer.excess  # no shapes: useful taken as executed
        assert roof.policy == policy
    anchor = make_report(lin, measured()).roofline.layer("relu")
    assert anchor.us == 0 and anchor.bound_by is None and UNTIMED in anchor.notes


def test_useful_flops_are_what_each_op_asks_at_its_shapes():
    from relaytrace.model.origin import Origin
    from relaytrace.model.work import DILATION, PADDING, excess_why, useful_flops

    def op(name, ins, out):
        return Origin("o", "l", f"relax.{name}", "main", 0, input_shapes=ins, output_shapes=(out,))

    up = op("nn.conv2d_transpose", (("n", 32, 16, 16), (32, 8, 2, 2)), ("n", 16, 32, 32))  # groups 2: weight I, O/g
    assert evaluate(useful_flops(up), {"n": 3}) == 2 * 3 * 16 * 16 * 32 * 8 * 4 and excess_why(up) == DILATION
    conv = op("nn.conv2d", ((1, 8, 9, 9), (16, 4, 3, 3)), (1, 16, 9, 9))  # groups 2: weight O, I/g
    assert evaluate(useful_flops(conv), {}) == 2 * 16 * 81 * 4 * 9 and excess_why(conv) == PADDING
    assert evaluate(useful_flops(op("matmul", ((2, 5, 7), (7, 3)), (2, 5, 3))), {}) == 2 * 2 * 5 * 3 * 7
    assert evaluate(useful_flops(op("add", ((4, 6), (6,)), (4, 6))), {}) == 24
    assert useful_flops(op("permute_dims", ((4, 6),), (6, 4))) == ()
    assert useful_flops(op("nn.softmax", ((4, 6),), (4, 6))) is None  # no formula: the executed count stands


def test_a_layer_that_asks_no_flops_and_executes_some_says_its_ratio_is_unknown():
    """A fused kernel's count cut by estimate (no member counts; the softmax has no
    useful formula) gives the transpose fused into it a part of the executed FLOPs of
    a layer that asks none: executed beyond useful, at no ratio. Every renderer says
    so, and none fails after the outputs were written (issue 53, item 6)."""
    import csv
    import io

    from relaytrace.model.lineage import CallSite, Role
    from relaytrace.model.origin import Origin
    from relaytrace.model.work import RECOMPUTED
    from relaytrace.render.export import layers_csv
    from relaytrace.render.page import page_data
    from relaytrace.render.table import roofline_summary

    origins = {
        "p": Origin("p", "perm", "relax.permute_dims", "main", 0, input_shapes=((4, 6),), output_shapes=((6, 4),)),
        "s": Origin("s", "soft", "relax.nn.softmax", "main", 1, input_shapes=((6, 4),), output_shapes=((6, 4),)),
    }
    site = CallSite("fused_transpose_softmax", 0, 0, (Role("s", "anchor"), Role("p", "fused")))
    work = KernelWork((((4, 6), "float32"), ((6, 4), "float32")), ((96, ()),), ((24, ()),))
    build = attrs.evolve(lineage().build, entries={"main": (("x", (4, 6), "float32"),)}, work={site.kernel: work})
    lin = Lineage(build, origins, {site.kernel: (site,)})
    prof = _one_call(site, ((4, 6), (6, 4)))
    report = make_report(lin, prof, policy="split")  # the transpose's layer gets time, and a row
    perm = report.roofline.layer("perm")
    # by estimate: the transpose half an op per element (12), the softmax one (24)
    assert (perm.flops, perm.useful, perm.excess) == (96 * 12 / 36, 0, (RECOMPUTED,))
    assert perm.executed_ratio is None
    assert "perm executes unknown the FLOPs it asks" in roofline_summary(report.roofline, 10)
    row = next(r for r in csv.DictReader(io.StringIO(layers_csv(report))) if r["layer"] == "perm")
    assert (row["flops"], row["useful_flops"], row["executed_over_useful"], row["excess"]) == (
        "32",
        "0",
        "",
        RECOMPUTED,
    )
    assert next(r for r in page_data(report).roofline.layers if r.layer == "perm").excess == RECOMPUTED


def test_a_kernels_count_cut_by_estimate_weighs_a_symbolic_dim_at_the_value_the_call_bound():
    """An LM head over a symbolic vocabulary fused with a norm, their members' counts
    unknown: the kernel's executed count is cut by the ops' estimates at the call's
    dims, the vocabulary at the 100 the call bound it to (weighing it as 1 gave the
    head 2/3 of the kernel and a ratio to its useful count that no count has)."""
    from relaytrace.model.lineage import CallSite, Role
    from relaytrace.model.origin import Origin

    origins = {
        "m": Origin(
            "m", "lm_head", "relax.matmul", "main", 0, input_shapes=((1, 64), (64, "v")), output_shapes=((1, "v"),)
        ),
        "n": Origin(
            "n", "norm", "relax.nn.rms_norm", "main", 1, input_shapes=((1, 64), (64,)), output_shapes=((1, 64),)
        ),
    }
    site = CallSite("fused_rms_norm_matmul", 0, 0, (Role("m", "anchor"), Role("n", "fused")))
    params = (((1, 64), "float32"), ((64,), "float32"), ((64, "v"), "float32"), ((1, "v"), "float32"))
    work = KernelWork(params, ((256, ()), (128, ("v",))), ((1, ()),))
    build = attrs.evolve(lineage().build, entries={"main": (("x", (1, 64), "float32"),)}, work={site.kernel: work})
    lin = Lineage(build, origins, {site.kernel: (site,)})
    prof = _one_call(site, ((1, 64), (64,), (64, 100), (1, 100)))
    head = make_report(lin, prof).roofline.layer("lm_head")
    kernel, useful = 256 + 128 * 100, 2 * 1 * 100 * 64  # 2·M·N·K at v = 100
    # estimates at v = 100: the head 2·100·64, the norm one per output element (64)
    assert head.useful == useful and head.flops == pytest.approx(kernel * useful / (useful + 64))
    assert not head.excess


def _one_call(site, shapes) -> Profile:
    """A profile of one 10 µs call of ``site`` with float32 arguments of ``shapes``."""
    return Profile(
        "hand",
        "llvm",
        "cpu(0)",
        "timeline",
        1,
        (CallRecord(site.kernel, 0, 0, 0.0, 10.0, KERNEL),),
        args={f"{site.kernel}#0": ArgInfo(shapes, ("float32",) * len(shapes))},
        e2e_us=(12.0,),
        peaks=PEAKS,
    )
