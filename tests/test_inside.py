"""Inside a fused kernel (issue 56): ``profile --inside`` times each loop nest of each
fused kernel in an instrumented copy of the build (``profiling.inside``), gives each
op of each call site its measured time, and ``--policy measured`` bills by it."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from relaytrace.analysis.report import make_report
from relaytrace.errors import RelaytraceError
from relaytrace.model.lineage import Lineage
from relaytrace.model.origin import OP
from relaytrace.model.profile import Profile
from relaytrace.profiling.inside import Instrumented, cycles_per_us
from tests.conftest import assert_holds_to_schema
from tests.fuzz import run_cli
from tests.test_render import CHROMIUM, _browser, launch

REPEAT = 4


@pytest.fixture(scope="module")
def inside_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("inside") / "run"
    code, _, err = run_cli(
        [
            "--quiet",
            "profile",
            "tests/fixtures/residual_block.py:make",
            "--inside",
            "--repeat",
            str(REPEAT),
            "--policy",
            "measured",
            "--out",
            out,
        ]
    )
    assert code == 0, err
    return out


def test_each_op_of_each_fused_kernel_is_timed_inside_and_measured_bills_by_it(inside_out):
    lineage, profile = Lineage.load(inside_out / "lineage.json"), Profile.load(inside_out / "profile.json")
    assert profile.inside, "profile.json holds what was measured inside, and reads back"
    measured, split = make_report(lineage, profile, "measured"), make_report(lineage, profile, "split")
    convs = [s for s in lineage.call_sites if any(lineage.origins[o].short_op == "conv2d" for o in s.origin_ids)]
    assert len(convs) == 2
    for site in convs:
        rows = [r for r in measured.inside if r.site == site.label]
        ops = sorted(o for o in site.origin_ids if lineage.origins[o].kind == OP)
        assert sorted(o for r in rows for o in r.origins) == ops  # every op of the kernel has its own measured time
        for r in rows:  # each row's blocks are its op's: the bias add's and the residual add's apart
            assert r.layers == tuple(dict.fromkeys(lineage.origins[o].layer for o in r.origins))
        conv = next(r for r in rows if r.ops == ("conv2d",))
        assert "pad_temp" in conv.blocks and any(b.startswith("conv2d") for b in conv.blocks)  # its two nests, one op
        assert all(len(inside.us) == REPEAT for inside in profile.inside_of(site.key).parts)
        assert sum(r.measured_percent for r in rows if r.ops) == pytest.approx(100.0)
        assert conv.measured_percent == max(r.measured_percent for r in rows)
        outside = next(r for r in rows if not r.ops)  # the call's time outside its nests: a row of its own
        assert outside.blocks == () and outside.note.startswith("the call's time outside its loop nests")
        # the measured policy bills the plain build's time by the measured shares; split by the modelled ones
        for report, field in ((measured, "measured_percent"), (split, "modelled_percent")):
            mine = [s for s in report.shares if s.key == site.key]
            total = sum(s.us for s in mine)
            conv_us = sum(s.us for s in mine if s.op == "conv2d")
            assert 100.0 * conv_us / total == pytest.approx(getattr(conv, field), rel=1e-6), field
    trace = json.loads((inside_out / "trace.json").read_text())["traceEvents"]
    for kernel in (e for e in trace if e.get("ph") == "X" and e["name"] in {s.kernel for s in convs}):
        nested = [
            e
            for e in trace
            if e.get("cat") == "inside"
            and e["pid"] == kernel["pid"]
            and kernel["ts"] <= e["ts"] < kernel["ts"] + kernel["dur"]
        ]
        assert {e["name"] for e in nested} >= {"conv2d", "relu"}  # a slice per op, under the kernel's own
        assert sum(e["dur"] for e in nested) == pytest.approx(kernel["dur"])
    page = (inside_out / "report.html").read_text()
    data = json.loads(page.split('id="relaytrace-data">', 1)[1].split("</script>", 1)[0])
    assert_holds_to_schema(data, "report.html")
    shown = [
        (r.site, " ".join(r.ops) or "(outside its loop nests)")
        for r in measured.inside
        if r.site in {s.label for s in convs}
    ]
    assert [(r["site"], r["ops"]) for r in data["inside"]] == shown  # the kernels of more than one op
    assert '<table id="inside">' in page
    assert all(data["sites"][r["site_id"]]["label"] == r["site"] for r in data["inside"])  # joined by id
    if CHROMIUM is not None:  # the timeline cuts each kernel's slice by its ops' measured shares, under it
        with _browser() as pw:
            browser = launch(pw)
            view = browser.new_page()
            view.goto((inside_out / "report.html").as_uri())
            view.wait_for_selector("body[data-ready]")
            slices = view.evaluate(
                "() => [...document.querySelectorAll('#timeline rect')].map(r => "
                "[r.classList.contains('inside'), +r.dataset.site, +r.getAttribute('width')])"
            )
            browser.close()
        kernel = {site: width for nested, site, width in slices if not nested}
        under = [(site, width) for nested, site, width in slices if nested]
        assert len(under) == len(data["inside"])
        for r, (site, width) in zip(data["inside"], under):
            whole = sum(x["us"] for x in data["inside"] if x["site_id"] == site)
            assert site == r["site_id"] and width == pytest.approx(max(kernel[site] * r["us"] / whole, 0.3), abs=0.01)
        for site in {r["site_id"] for r in data["inside"]}:  # the parts tile the kernel's slice, no more
            mine = [w for (s, w) in under if s == site]
            assert sum(mine) == pytest.approx(kernel[site], abs=0.3 * len(mine))
    text = (inside_out / "inside.csv").read_text()
    tampered = json.loads((inside_out / "profile.json").read_text())
    tampered["inside"][0]["parts"][0]["us"][0] = -5000.0
    with pytest.raises(RelaytraceError, match="a part's time is below 0 or not finite"):
        make_report(lineage, Profile.from_json(tampered), "measured")
    tampered["inside"][0]["parts"][0]["origins"] = [next(o for o in lineage.origins if o not in convs[0].origin_ids)]
    with pytest.raises(RelaytraceError, match="which the call site does not run"):
        make_report(lineage, Profile.from_json(tampered), "measured")
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == len(measured.inside) and {r["site"] for r in table} == {s.label for s in convs}


def test_a_kernel_of_one_loop_nest_is_left_alone_and_the_stamps_land_in_relaytraces_buffer():
    @T.prim_func(private=True, s_tir=True)
    def one(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
        for i in range(64):
            with T.sblock("double"):
                v = T.axis.spatial(64, i)
                b[v] = a[v] * T.float32(2)

    @T.prim_func(private=True, s_tir=True)
    def two(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
        c = T.alloc_buffer((64,), "float32")
        for i in range(64):
            with T.sblock("double"):
                v = T.axis.spatial(64, i)
                c[v] = a[v] * T.float32(2)
        for i in range(64):
            with T.sblock("inc"):
                v = T.axis.spatial(64, i)
                b[v] = c[v] + T.float32(1)

    mod = tvm.IRModule({"one": one.with_attr("global_symbol", "one"), "two": two.with_attr("global_symbol", "two")})
    instrumented = Instrumented({"one", "two"})
    built = tvm.compile(instrumented.pass_(mod), "llvm")
    assert set(instrumented.plans) == {"two"} and instrumented.plans["two"].parts == (("double",), ("inc",))
    a = tvm.runtime.tensor(np.arange(64, dtype="float32"))
    b = tvm.runtime.tensor(np.zeros(64, dtype="float32"))
    built["two"](a, b)
    np.testing.assert_array_equal(b.numpy(), np.arange(64) * 2 + 1)  # the copy computes what the kernel does
    stamps = list(instrumented.stamps[:5])
    assert 0 < stamps[0] and stamps == sorted(stamps)  # as it starts, before, between, after the nests, as it ends
    assert cycles_per_us(np.zeros(1, dtype="int64")) > 100


def test_inside_is_refused_where_it_cannot_time_before_any_work(tmp_path):
    code, _, err = run_cli(
        ["profile", "tests/fixtures/tiny_model.py:make", "--inside", "--target", "cuda", "--out", tmp_path / "o"]
    )
    assert code != 0 and "--inside times the inside of kernels of an llvm build on an x86-64 CPU" in err
    assert err.strip().count("\n") == 0 and not (tmp_path / "o").exists()


def test_an_llms_decode_served_through_its_kv_cache_is_timed_inside(tmp_path):
    out = tmp_path / "decode"
    argv = ["--quiet", "profile", "tests/fixtures/llm_model.py:make", "--entry", "decode", "--context", "64"]
    code, stdout, err = run_cli([*argv, "--inside", "--repeat", "2", "--policy", "measured", "--out", out])
    assert code == 0, err
    lineage, profile = Lineage.load(out / "lineage.json"), Profile.load(out / "profile.json")
    report = make_report(lineage, profile, "measured")
    assert profile.entry == "decode" and profile.step == (1, 64)  # served as profile serves it
    mlp = [r for r in report.inside if {"silu", "multiply"} <= set(r.ops) or r.ops in (("silu",), ("multiply",))]
    sites = {r.site for r in mlp}
    assert len(sites) == 2  # each block's MLP kernel: its SiLU and its multiply timed apart
    for site in sites:
        rows = [r for r in report.inside if r.site == site]
        assert {("silu",), ("multiply",)} <= {r.ops for r in rows}
        assert sum(r.measured_percent for r in rows if r.ops) == pytest.approx(100.0)
    assert "inside the fused kernels (timed by an instrumented copy, --inside)" in stdout


def test_the_api_times_a_builds_kernels_inside_through_the_pipeline_its_lineage_names():
    import attrs

    import relaytrace
    from relaytrace.build import NHWC
    from relaytrace.errors import RelaytraceError
    from relaytrace.frontends.loader import load
    from relaytrace.model.build_facts import BuildOptions
    from relaytrace.profiling.inside import pipeline_of

    loaded = load("tests/fixtures/residual_block.py:make")
    executable, lineage = relaytrace.build(loaded.model, "llvm", convert_layout=NHWC)
    profile = relaytrace.profile(executable, lineage, list(loaded.inputs), repeat=2)
    inside = relaytrace.time_inside(loaded.model, lineage, loaded.inputs, repeat=2)
    report = make_report(lineage, attrs.evolve(profile, inside=inside), "measured")
    convs = [s.label for s in lineage.call_sites if any(lineage.origins[o].short_op == "conv2d" for o in s.origin_ids)]
    assert convs and all({("conv2d",), ("relu",)} <= {r.ops for r in report.inside if r.site == c} for c in convs)
    assert any(
        any(b.startswith("conv2d_nhwc") for b in r.blocks) for r in report.inside
    )  # the NHWC build's own kernels
    for made_by in ("user", "fused+mine"):
        with pytest.raises(RelaytraceError, match="relaytrace cannot make again"):
            pipeline_of(attrs.evolve(lineage.build, options=BuildOptions(made_by)))
