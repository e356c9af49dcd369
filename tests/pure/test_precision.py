"""Precision on a lineage and profile built by hand (no TVM): each site's and op's dtypes
from its kernel's and members' counted work, casts billed to the layers they serve with
the time the policy gives them, time by compute dtype, the layers a float16 build left
in float32 and why (a policy of never, a follower of one, integer inputs, a model's cast)."""

import csv
import io
import json

import attrs
import pytest

from relaytrace.analysis.precision import CAST, MODEL
from relaytrace.analysis.report import make_report
from relaytrace.model.build_facts import BuildFacts
from relaytrace.model.lineage import CallSite, Lineage, Role
from relaytrace.model.origin import INSERTED, Origin
from relaytrace.model.profile import KERNEL, CallRecord, Profile
from relaytrace.model.verification import Member
from relaytrace.model.work import KernelWork
from relaytrace.render.export import attribution_json, kernels_csv, layers_csv
from relaytrace.render.page import page_data
from relaytrace.render.table import precision_summary

F16, F32 = "float16", "float32"
X, W, Y = (1, 4, 8, 8), (4, 4, 3, 3), (1, 4, 8, 8)
MP = "ToMixedPrecision"
# x -> cast (inserted, serves conv) -> conv (float16 in, float32 accumulate) + cast fused (for bn)
#   -> bn (never) + relu (follow) -> softmax (never) -> ids: an integer op (argmax -> take) -> a model cast -> add
ORIGINS = {
    "c0": Origin("c0", "conv", "relax.astype", "main", -1, kind=INSERTED, pass_name=MP, serves=("conv",)),
    "conv": Origin("conv", "conv", "relax.nn.conv2d", "main", 0, (X, W), (F32, F32), (Y,), (F32,)),
    "c1": Origin("c1", "bn", "relax.astype", "main", -1, kind=INSERTED, pass_name=MP, serves=("bn",)),
    "bn": Origin("bn", "bn", "relax.nn.batch_norm", "main", 1, (Y,), (F32,), (Y, (4,), (4,)), (F32, F32, F32)),
    "relu": Origin("relu", "act", "relax.nn.relu", "main", 2, (Y,), (F32,), (Y,), (F32,)),
    "soft": Origin("soft", "head.softmax", "relax.nn.softmax", "main", 3, (Y,), (F32,), (Y,), (F32,)),
    "idx": Origin("idx", "head.pick", "relax.take", "main", 4, ((8,), (2,)), ("int64", "int64"), ((2,),), ("int64",)),
    "mc": Origin("mc", "head.cast", "relax.astype", "main", 5, (Y,), (F16,), (Y,), (F32,)),
    "add": Origin("add", "head.add", "relax.add", "main", 6, (Y, Y), (F32, F32), (Y,), (F32,)),
}
EDGES = (("conv", "bn"), ("bn", "relu"), ("relu", "soft"), ("mc", "add"), ("soft", "add"))
SITES = (
    CallSite("cast", 0, 0, (Role("c0", "inserted"),), arguments=((X, F32), (X, F16))),
    CallSite(
        "fused_conv2d_cast1",
        0,
        1,
        (Role("conv", "anchor"), Role("c1", "inserted")),
        arguments=((X, F16), (W, F16), (Y, F32)),
    ),
    CallSite(
        "fused_batch_norm_relu",
        0,
        2,
        (Role("bn", "anchor"), Role("relu", "fused")),
        arguments=((Y, F32), ((4,), F32), (Y, F32)),
    ),
    CallSite("softmax", 0, 3, (Role("soft", "anchor"),), arguments=((Y, F32), (Y, F32))),
    CallSite("take", 0, 4, (Role("idx", "anchor"),), arguments=(((8,), "int64"), ((2,), "int64"), ((2,), "int64"))),
    CallSite("cast9", 0, 5, (Role("mc", "anchor"),), arguments=((Y, F16), (Y, F32))),
    CallSite("add", 0, 6, (Role("add", "anchor"),), arguments=((Y, F32), (Y, F32), (Y, F32))),
)
MEDIANS = {
    "cast": 5.0,
    "fused_conv2d_cast1": 100.0,
    "fused_batch_norm_relu": 20.0,
    "softmax": 10.0,
    "take": 1.0,
    "cast9": 4.0,
    "add": 2.0,
}
POLY = ((256, ()),)
WORK = {
    "cast": KernelWork(((X, F32), (X, F16)), ()),
    "fused_conv2d_cast1": KernelWork(
        ((X, F16), (W, F16), (Y, F32)), ((2 * 256 * 36, ()),), (), dtype=F32, accumulate=F32
    ),
    "conv2d": KernelWork(((X, F16), (W, F16), (Y, F32)), ((2 * 256 * 36, ()),), (), dtype=F32, accumulate=F32),
    "cast1": KernelWork(((Y, F32), (Y, F16)), ()),
    "fused_batch_norm_relu": KernelWork(((Y, F32), ((4,), F32), (Y, F32)), POLY, ()),
    "batch_norm": KernelWork(((Y, F32), ((4,), F32), (Y, F32), ((4,), F32), ((4,), F32)), POLY, ()),
    "relu": KernelWork(((Y, F32), (Y, F32)), POLY, ()),
    "softmax": KernelWork(((Y, F32), (Y, F32)), POLY, POLY, accumulate=F32),
    "take": KernelWork((((8,), "int64"), ((2,), "int64"), ((2,), "int64")), ()),
    "cast9": KernelWork(((Y, F16), (Y, F32)), ()),
    "add": KernelWork(((Y, F32), (Y, F32), (Y, F32)), POLY, ()),
}
MEMBERS = {
    "fused_conv2d_cast1": (Member("conv2d", ("relax.nn.conv2d",)), Member("cast1", ("relax.astype",))),
    "fused_batch_norm_relu": (Member("batch_norm", ("relax.nn.batch_norm",)), Member("relu", ("relax.nn.relu",))),
}
POLICIES = {
    "relax.nn.conv2d": "always",
    "relax.nn.batch_norm": "never",
    "relax.nn.relu": "follow",
    "relax.nn.softmax": "never",
    "relax.take": "follow",
    "relax.astype": "follow",
    "relax.add": "follow",
}


def lineage(accumulate=F32, policies=POLICIES) -> Lineage:
    build = BuildFacts(
        "hand16",
        "llvm",
        "fused",
        entries={"main": (("x", X, F32),)},
        kernel_members=MEMBERS,
        accumulate=accumulate,
        policies=dict(policies),
        work=WORK,
    )
    return Lineage(build, dict(ORIGINS), {s.kernel: (s,) for s in SITES}, edges=EDGES)


def profile() -> Profile:
    records, start = [], 0.0
    for site in SITES:
        records.append(CallRecord(site.kernel, 0, 0, start, MEDIANS[site.kernel], KERNEL))
        start += MEDIANS[site.kernel]
    return Profile("hand16", "llvm", "cpu(0)", "timeline", 1, tuple(records), e2e_us=(start + 1,))


def test_each_site_computes_in_its_kernels_dtype_and_stores_in_its_outputs():
    p = make_report(lineage(), profile()).precision
    sites = {s.label: s.dtypes for s in p.sites.values()}
    conv = sites["fused_conv2d_cast1#0"]
    assert (conv.compute, conv.accumulate, conv.inputs, conv.storage) == (F32, F32, (F16,), F32)
    assert sites["cast#0"].compute == F16 and sites["cast#0"].inputs == (F32,)  # data movement: its output's dtype
    assert sites["take#0"].compute == "int64" and sites["take#0"].inputs == ()
    assert sites["softmax#0"].accumulate == F32
    cast_only = {s.label for s in p.sites.values() if s.casts_only}
    assert cast_only == {"cast#0", "cast9#0"}
    assert p.mixed and p.build == "float16 through ToMixedPrecision, accumulating in float32"


def test_time_by_compute_dtype_adds_up_and_the_casts_are_apart():
    report = make_report(lineage(), profile())
    p = report.precision
    by = {d: us for d, us, _ in p.by_dtype}
    total = sum(MEDIANS.values())
    assert sum(by.values()) == pytest.approx(total) and sum(pc for _, _, pc in p.by_dtype) == pytest.approx(100)
    assert by[CAST] == pytest.approx(5 + 4)  # the inserted cast kernel and the model's own cast
    assert by["int64"] == pytest.approx(1) and by[F32] == pytest.approx(100 + 20 + 10 + 2)
    assert p.cast_us == pytest.approx(9) and p.cast_percent == pytest.approx(100 * 9 / total)


def test_casts_are_billed_to_the_layers_they_serve_with_who_inserted_them():
    p = make_report(lineage(), profile()).precision
    casts = {c.origin: c for c in p.casts}
    assert casts["c0"].layer == "conv" and casts["c0"].by == MP and casts["c0"].us == pytest.approx(5)
    assert (casts["c0"].source, casts["c0"].target) == (F32, F16) and not casts["c0"].fused
    fused = casts["c1"]  # fused into the conv's kernel: under anchor the conv has its time
    assert fused.layer == "bn" and fused.fused and fused.us == 0 and fused.sites == ("fused_conv2d_cast1#0",)
    assert (fused.source, fused.target) == (F32, F16)  # its member's parameters
    assert casts["mc"].by == MODEL and casts["mc"].layer == "head.cast"
    split = {c.origin: c for c in make_report(lineage(), profile(), policy="split").precision.casts}
    assert 0 < split["c1"].us < MEDIANS["fused_conv2d_cast1"]  # split: its member's share of the kernel
    assert p.layer("conv").cast_us == pytest.approx(5)


def test_the_layers_left_in_float32_and_why():
    p = make_report(lineage(), profile()).precision
    kept = {r.layer: r.why for r in p.float32_layers}
    assert "conv" not in kept and p.layer("conv").label == "float32 (reads float16)"
    assert kept["bn"] == "ToMixedPrecision never converts batch_norm (policy never)"
    assert kept["act"].startswith("relu follows its inputs (policy follow), float32 from bn: ToMixedPrecision never")
    assert kept["head.softmax"] == "ToMixedPrecision never converts softmax (policy never)"
    assert kept["head.pick"].startswith("take reads integers only (int64)")
    assert kept["head.add"] == "the model casts its input to float32 itself (head.cast)"
    assert "head.cast" not in kept and p.layer("head.cast").dtype == CAST  # it reads float16
    assert [r.layer for r in p.float32_layers][:2] == ["bn", "head.softmax"]  # slowest first
    unknown = make_report(lineage(policies={}), profile()).precision
    assert "not recorded" in unknown.layer("bn").why


def test_a_float32_build_has_no_layer_left_and_says_so():
    lin = lineage(accumulate=None)
    lin = attrs.evolve(
        lin,
        kernels={
            k: tuple(attrs.evolve(s, arguments=tuple((sh, F32 if d == F16 else d) for sh, d in s.arguments)) for s in v)
            for k, v in lin.kernels.items()
        },
        build=attrs.evolve(
            lin.build,
            work={
                k: attrs.evolve(w, params=tuple((sh, F32 if d == F16 else d) for sh, d in w.params))
                for k, w in WORK.items()
            },
        ),
    )
    p = make_report(lin, profile()).precision
    assert not p.mixed and p.build == "float32" and not p.float32_layers


def test_the_outputs_carry_the_precision():
    report = make_report(lineage(), profile())
    layers = {r["layer"]: r for r in csv.DictReader(io.StringIO(layers_csv(report)))}
    assert layers["conv"]["precision"] == F32 and layers["head.pick"]["precision"] == "int64"
    kernels = {r["name"]: r for r in csv.DictReader(io.StringIO(kernels_csv(report)))}
    assert kernels["cast"]["precision"] == F16 and kernels["fused_conv2d_cast1"]["precision"] == F32
    data = json.loads(json.dumps(attribution_json(report)))["precision"]
    assert {c["origin"]: c["inserted_by"] for c in data["casts"]}["c0"] == MP
    assert {r["layer"]: r["float32"] for r in data["layers"]}["bn"] is True
    page = dict(page_data(report).precision.layers)
    assert page["bn"].kind == "kept" and page["conv"].kind == "reads-half" and page["head.cast"].kind == "cast"
    text = precision_summary(report.precision)
    assert "casts: 3 (2 by ToMixedPrecision, 1 by model)" in text and "never converts batch_norm" in text


def test_a_lineage_keeps_its_policies_and_accumulate_through_a_save(tmp_path):
    lin = lineage()
    back = Lineage.load(lin.save(tmp_path / "lineage.json"))
    assert back.build.policies == POLICIES and back.build.work["conv2d"].accumulate == F32
