"""The pure layer on lineages and profiles built by hand: no TVM, torch or ONNX (run so
by ``tests/test_data_layer.py``), so a TVM upgrade cannot break what they check:
how kernel time becomes layer time, what the indexes answer, what survives a save."""

import attrs
import pytest

from relaytrace.analysis.report import make_report
from relaytrace.errors import RelaytraceError
from relaytrace.model.build_facts import BuildFacts
from relaytrace.model.lineage import CallSite, Lineage, Role
from relaytrace.model.origin import INSERTED, Origin
from relaytrace.model.profile import BUILTIN, KERNEL, CallRecord, Profile
from relaytrace.model.sitekey import SiteKey

# conv1 -> relu -> fc; a layout transform inserted for conv1 and fc; conv and relu fused
ORIGINS = {
    "o1": Origin("o1", "conv1", "relax.nn.conv2d", "main", 0),
    "o2": Origin("o2", "relu", "relax.nn.relu", "main", 1),
    "o3": Origin("o3", "fc", "relax.matmul", "main", 2),
    "t1": Origin(
        "t1",
        "conv1",
        "relax.layout_transform",
        "main",
        3,
        kind=INSERTED,
        pass_name="ConvertLayout",
        serves=("o1", "o3"),
    ),
}
SITES = (
    CallSite("fused_conv2d_relu", 0, 0, (Role("o1", "anchor"), Role("o2", "fused"))),
    CallSite("layout_transform", 0, 1, (Role("t1", "inserted"),)),
    CallSite("matmul", 0, 2, (Role("o3", "anchor"),)),
)
MEDIANS = {"fused_conv2d_relu": 100.0, "layout_transform": 10.0, "matmul": 40.0}


def lineage() -> Lineage:
    build = BuildFacts("hand", "llvm", "fused", entries={"main": (("x", (1, 3, 8, 8), "float32"),)})
    return Lineage(build, dict(ORIGINS), {s.kernel: (s,) for s in SITES}, edges=(("o1", "o2"), ("o2", "o3")))


def profile(e2e=(160.0, 170.0, 180.0), hiccup: float = 0.0) -> Profile:
    records = []
    for run in range(3):
        start = 0.0
        for site in SITES:
            us = MEDIANS[site.kernel] * (1.0 + 0.01 * (run - 1)) + (hiccup if run == 2 and site.position == 0 else 0)
            records.append(CallRecord(site.kernel, 0, run, start, us, KERNEL))
            start += us + 1.0
        records.append(CallRecord("vm.builtin.alloc_storage", 0, run, start, 2.0, BUILTIN))
    return Profile("hand", "llvm", "cpu(0)", "timeline", 3, tuple(records), e2e_us=e2e)


def test_kernel_time_becomes_layer_time_and_every_microsecond_is_billed_once():
    report = make_report(lineage(), profile())
    layers = {r.layer: r for r in report.layers}
    # anchor policy: the fused kernel is conv1's; the inserted transform is split over the layers it serves
    assert layers["conv1"].us == pytest.approx(100 + 5) and layers["conv1"].inserted_us == pytest.approx(5)
    assert layers["fc"].us == pytest.approx(40 + 5) and "relu" not in layers
    assert sum(r.us for r in report.layers) == pytest.approx(sum(MEDIANS.values()))
    c = report.categories
    assert (c.compute_us, c.inserted_us, c.builtin_us) == pytest.approx((140, 10, 2))
    assert c.gap_us == pytest.approx(170 - 150 - 2)
    split = {r.layer: r.us for r in make_report(lineage(), profile(), policy="split").layers}
    assert sum(split.values()) == pytest.approx(150) and split["relu"] > 0  # fused ops get their estimated part


def test_the_indexes_answer_by_layer_origin_and_kernel():
    lin = lineage()
    assert [s.label for s in lin.kernels_of("conv1")] == ["fused_conv2d_relu#0", "layout_transform#0"]
    assert [s.label for s in lin.kernels_of("fc")] == ["layout_transform#0", "matmul#0"]  # the transform serves it
    assert [o.id for o in lin.origins_of("fused_conv2d_relu")] == ["o1", "o2"]
    assert [s.position for s in lin.call_sites] == [0, 1, 2]
    with pytest.raises(RelaytraceError):
        lin.kernels_of("no_such_layer")


def test_a_lineage_and_a_profile_come_back_equal_from_their_files(tmp_path):
    lin, prof = lineage(), profile()
    back = Lineage.load(lin.save(tmp_path / "lineage.json"))
    assert back.origins == lin.origins and back.call_sites == lin.call_sites and back.edges == lin.edges
    again = Profile.load(prof.save(tmp_path / "profile.json"))
    assert again.by_site() == prof.by_site() and again.e2e_us == prof.e2e_us


def test_a_profile_of_another_build_is_refused_and_a_hiccup_is_named_not_counted():
    other = attrs.evolve(
        profile(), records=tuple(attrs.evolve(r, name="other") if r.name == "matmul" else r for r in profile().records)
    )
    with pytest.raises(RelaytraceError):
        make_report(lineage(), other)
    noisy = profile(hiccup=4000.0)
    assert noisy.by_site()[SiteKey("main", "fused_conv2d_relu", 0)] == pytest.approx(100.0)  # the median: one run
    assert noisy.warnings()[0].startswith("NOISY: 1 call site(s)")


def test_the_timed_runs_own_time_explains_a_gap_between_runs():
    steady = profile(e2e=(155.0,) * 3)
    assert steady.calls_per_run_us == pytest.approx(152) and steady.timed_run_us == pytest.approx(155)
    assert not steady.warnings()
    slow = profile(e2e=(300.0,) * 3)
    assert any(w.startswith("BETWEEN RUNS") for w in slow.warnings())
    fast = profile(e2e=(100.0,) * 3)
    (over,) = [w for w in fast.warnings() if w.startswith("OVER END TO END")]
    assert "the runs differ" in over and "the timed runs took 0.155 ms each" in over


def test_an_entrys_view_is_made_once_and_holds_that_entrys_sites_only():
    decode = Origin("d1", "fc", "relax.matmul", "decode", 0)
    site = CallSite("matmul", 0, 3, (Role("d1", "anchor"),), function="decode")
    one = lineage()
    entries = {**one.build.entries, "decode": (("y", (1, 8), "float32"),)}
    two = attrs.evolve(
        one,
        origins={**ORIGINS, "d1": decode},
        kernels={**{s.kernel: (s,) for s in SITES}, "matmul": (SITES[2], site)},
        build=attrs.evolve(one.build, entries=entries),
    )
    view = two.for_entry("decode")
    assert two.for_entry("decode") is view and two.for_entry("main") is not view
    assert [s.label for s in view.call_sites] == ["decode:matmul#0"] and set(view.origins) == {"d1"}
    assert [s.key for s in two.for_entry("main").call_sites] == [s.key for s in SITES]
    assert attrs.evolve(two).for_entry("decode") == view  # an evolved lineage makes its own, equal one
