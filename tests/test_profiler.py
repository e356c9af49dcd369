"""The VM profiler and time attribution, on real runs."""

import csv
import json

import pytest

import relaytrace
from relaytrace.analysis import attribution as A
from relaytrace.analysis.report import make_report
from relaytrace.build import NHWC
from relaytrace.errors import LineageFormatError, RelaytraceError
from relaytrace.model.profile import KERNEL, Profile
from relaytrace.render import export
from relaytrace.render.table import category_table, kernel_table, layer_table, op_type_table


@pytest.fixture(scope="module")
def small(resnet_mod, input_data):
    executable, lineage = relaytrace.build(resnet_mod, "llvm")
    return executable, lineage, relaytrace.profile(executable, lineage, [input_data], repeat=3)


def test_timeline_records_every_call_of_every_run(small):
    _, lineage, prof = small
    assert prof.runs == 3
    for run in range(3):
        sites = [(r.name, r.call) for r in prof.records if r.run == run and r.kind == KERNEL]
        assert sites == [(s.kernel, s.call) for s in lineage.call_sites]
        starts = [r.start_us for r in prof.records if r.run == run]
        assert starts == sorted(starts)
    assert all(r.duration_us > 0 for r in prof.records)
    first = lineage.call_sites[0]  # the stem conv, on the input
    assert lineage.origins[first.anchor].short_op == "conv2d"
    assert prof.arg(first.key).shapes[0] == (1, 3, 32, 32)


def test_profile_states_where_time_goes(small):
    _, _, prof = small
    assert prof.kernel_us > 0 and prof.builtin_us > 0
    assert abs(prof.gap_us) < prof.e2e_median_us  # the recorded calls account for most of a run
    assert "unexplained gap" in prof.summary()


@pytest.mark.parametrize("policy", ["anchor", "split"])
def test_layer_times_sum_to_kernel_time(small, policy):
    _, lineage, prof = small
    rows = A.by_layer(lineage, prof, policy)
    assert sum(r.us for r in rows) == pytest.approx(prof.kernel_us, rel=1e-9)
    assert sum(r.percent for r in rows) == pytest.approx(100.0)


def test_split_policy_gives_fused_ops_their_share(small):
    _, lineage, prof = small
    anchor = {r.layer: r.us for r in A.by_layer(lineage, prof, "anchor")}
    split = {r.layer: r.us for r in A.by_layer(lineage, prof, "split")}
    assert "layer0_relu1" not in anchor and split["layer0_relu1"] > 0
    assert split["layer0_conv1_conv"] < anchor["layer0_conv1_conv"]


def test_profile_round_trips_and_renders_without_tvm(small, tmp_path):
    _, lineage, prof = small
    path = prof.save(tmp_path / "profile.json")
    loaded = Profile.load(path)
    assert loaded == prof
    lineage.save(tmp_path / "lineage.json")
    again = relaytrace.Lineage.load(tmp_path / "lineage.json")
    assert A.by_layer(again, loaded) == A.by_layer(lineage, prof)
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "relaytrace.profile/1", "model": "x"}))
    with pytest.raises(LineageFormatError):
        Profile.load(tmp_path / "bad.json")


def test_outputs_as_text_csv_and_json(small):
    _, lineage, prof = small
    text = layer_table(A.by_layer(lineage, prof), top=5)
    assert "layer" in text.splitlines()[0] and len(text.splitlines()) == 7
    assert "Argument Shapes" in kernel_table(A.by_kernel(lineage, prof))
    assert "conv2d" in op_type_table(A.by_op_type(lineage, prof))
    assert "unexplained gap" in category_table(A.by_category(lineage, prof))
    report = make_report(lineage, prof)
    csv_text = export.layers_csv(report)
    assert csv_text.splitlines()[0].startswith("layer,time_us")
    rows = list(csv.DictReader(csv_text.splitlines()))
    # every layer: the timed, slowest first, then those billed no time (their ops ran in
    # another layer's kernel) with their FLOPs (a new user found layers.csv short of them)
    assert [r["layer"] for r in rows[: len(report.layers)]] == [r.layer for r in report.layers]
    assert {r["layer"] for r in rows} == {r.layer for r in report.layers} | {r.name for r in report.roofline.layers}
    untimed = rows[len(report.layers) :]
    assert untimed and all(float(r["time_us"]) == 0 and r["kernel_calls"] and r["ops"] for r in untimed)
    flops = {r.name: r.flops for r in report.roofline.layers}
    assert all(float(r["flops"]) == flops[r["layer"]] for r in untimed)
    data = json.loads(json.dumps(export.attribution_json(report)))
    assert sum(layer["us"] for layer in data["layers"]) == pytest.approx(prof.kernel_us)
    assert {k["verification"] for k in data["kernels"]} == {"verified"}


def test_isolated_mode_times_each_kernel_site_alone(small, input_data):
    executable, lineage, timeline = small
    iso = relaytrace.profile(executable, lineage, [input_data], repeat=3, mode="isolated")
    assert iso.mode == "isolated"
    assert set(iso.by_site(KERNEL)) == set(timeline.by_site(KERNEL))
    assert sum(r.us for r in A.by_layer(lineage, iso)) == pytest.approx(iso.kernel_us)


def test_wrong_inputs_are_refused_before_running(small, input_data):
    executable, lineage, _ = small
    with pytest.raises(RelaytraceError, match=r"must be float32\[1, 3, 32, 32\], got float32\[1, 3, 16, 16\]"):
        relaytrace.profile(executable, lineage, [input_data[:, :, :16, :16]])
    with pytest.raises(RelaytraceError, match="got float64"):
        relaytrace.profile(executable, lineage, [input_data.astype("float64")])
    with pytest.raises(RelaytraceError, match="takes 1 input"):
        relaytrace.profile(executable, lineage, [input_data, input_data])


def test_a_lineage_from_another_build_is_refused_with_the_mismatches(small, input_data, resnet_mod):
    executable, _, prof = small
    _, unfused = relaytrace.build(resnet_mod, "llvm", pipeline="unfused")
    with pytest.raises(RelaytraceError, match="not compiled in it") as err:
        relaytrace.profile(executable, unfused, [input_data])
    assert "conv2d" in str(err.value)
    with pytest.raises(RelaytraceError, match="does not match lineage"):
        A.by_layer(unfused, prof)


@pytest.mark.slow
def test_resnet50_attribution(resnet50_profiled):
    _, lineage, prof = resnet50_profiled
    rows = A.by_layer(lineage, prof)
    assert sum(r.us for r in rows) == pytest.approx(prof.kernel_us, rel=1e-9)
    attributed = {s.key for s in lineage.call_sites}
    assert set(prof.by_site(KERNEL)) == attributed
    for k in A.by_kernel(lineage, prof):
        assert k.count == len(lineage.kernels[k.name])
    conv_layers = {o.layer for o in lineage.origins.values() if o.short_op == "conv2d"}
    conv = next(r for r in A.by_op_type(lineage, prof) if r.op == "conv2d")
    assert conv.count == len(conv_layers) == 53
    assert conv.percent > 50
    top = A.by_prefix(rows, 1)
    assert {name for name, _, _ in top} >= {"layer1", "layer2", "layer3", "layer4", "fc"}


@pytest.mark.slow
def test_resnet50_nhwc_has_an_inserted_layout_share_billed_to_conv_layers(resnet50):
    model, x = resnet50
    executable, lineage = relaytrace.build(model, "llvm", convert_layout=NHWC)
    prof = relaytrace.profile(executable, lineage, [x], repeat=1)
    cats = A.by_category(lineage, prof)
    assert cats.inserted_us > 0
    conv_layers = {o.layer for o in lineage.origins.values() if o.short_op == "conv2d"}
    assert cats.inserted_by_layer and all(layer in conv_layers for layer, _ in cats.inserted_by_layer)
