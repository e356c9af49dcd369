"""The relaytrace command, run as a subprocess, as users run it."""

import csv
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from relaytrace.model.run_spec import RunSpec

from .fixtures.hostile import HOSTILE_NAMES, INPUT_NAME, MODEL_NAME

FIXTURES = Path(__file__).parent / "fixtures"
TINY = f"{FIXTURES / 'tiny_model.py'}:make"
OUTPUTS = {
    "lineage.json",
    "profile.json",
    "layers.csv",
    "kernels.csv",
    "layers.svg",
    "kernels.svg",
    "run.json",
    "report.html",
    "trace.json",
    "verification.csv",
    "memory.csv",
    "code.json",
    "provenance.json",
}
EXPLORER = {
    "explorer-time.json",
    "explorer-kernels.json",
    "explorer-category.json",  # Model Explorer node data
    "explorer-efficiency.json",
}


def run(*args, cwd=None, warnings="ignore"):
    env = dict(os.environ, PYTHONWARNINGS=warnings)
    return subprocess.run(
        [sys.executable, "-m", "relaytrace.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=900,
    )


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    from relaytrace import zoo
    from relaytrace.frontends.onnx import export_torch_to_onnx

    module, example = zoo.get("resnet18", image=64)
    path = tmp_path_factory.mktemp("onnx") / "resnet18.onnx"
    return export_torch_to_onnx(module, (example,), path)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """resnet18 (64x64, from a factory file) profiled fused and unfused."""
    base = tmp_path_factory.mktemp("runs")
    factory = base / "r18.py"
    factory.write_text("from relaytrace import zoo\n\ndef make():\n    return zoo.get('resnet18', image=64)\n")
    for pipeline in ("fused", "unfused"):
        done = run(
            "--quiet", "profile", f"{factory}:make", "--pipeline", pipeline, "--repeat", "1", "--out", base / pipeline
        )
        assert done.returncode == 0, done.stderr
    return base


def test_profile_onnx_writes_every_output(onnx_file, tmp_path):
    out = tmp_path / "out"
    done = run("profile", onnx_file, "--repeat", "1", "--out", out)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == OUTPUTS | EXPLORER
    import onnx  # Model Explorer's ONNX adapter (model-explorer-onnx) names each node by its ONNX name

    names = {n.name for n in onnx.load(str(onnx_file)).graph.node}
    time = json.loads((out / "explorer-time.json").read_text())["results"]
    assert set(time) == names and all(time[n]["value"] > 0 for n in names if n.endswith("/Conv"))
    layers = [row["layer"] for row in csv.DictReader((out / "layers.csv").open())]
    assert "layer1.0.conv1" in layers  # a model torch exported: layers are its module paths
    assert "/Conv" not in done.stdout and "/layer" not in done.stdout  # no ONNX node name in the top 10
    assert "[relaytrace]" in done.stderr  # progress shown
    kernels = list(csv.DictReader((out / "kernels.csv").open()))
    assert kernels and all(k["layers"] for k in kernels)


def test_profile_torch_factory_writes_every_output(tmp_path):
    out = tmp_path / "out"
    done = run("--quiet", "profile", TINY, "--repeat", "1", "--out", out, "--layout", "NHWC")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert {p.name for p in out.iterdir()} == OUTPUTS | EXPLORER
    text = (out / "layers.csv").read_text()
    assert "conv1" in text and "conv2" in text and "fc" in text
    rows = list(csv.DictReader((out / "layers.csv").open())) + list(csv.DictReader((out / "kernels.csv").open()))
    assert rows and {r["verification"] for r in rows} == {"verified"}
    sites = len(json.loads((out / "lineage.json").read_text())["verification"]["sites"])
    assert f"verified against the compiled IR: {sites} of {sites} call sites" in done.stdout
    assert json.loads((out / "trace.json").read_text())["traceEvents"]
    # verification.csv: each layer's verdict as the lineage holds it, with its sites' own
    from relaytrace.model.lineage import Lineage

    lineage = Lineage.load(out / "lineage.json")
    verdicts = {c.layer: c for c in lineage.verification.layers}
    rows = list(csv.DictReader((out / "verification.csv").open()))
    assert [r["layer"] for r in rows] == list(lineage.layers())
    for r in rows:
        assert r["verdict"] == verdicts[r["layer"]].status
        sites = lineage.kernels_of(r["layer"])
        assert r["call_sites"].split() == [f"{s.label}:{lineage.check(s).status}" for s in sites]
    layer_us = {r["layer"]: float(r["time_us"]) for r in csv.DictReader((out / "layers.csv").open())}
    assert all(abs(float(r["time_us"]) - layer_us.get(r["layer"], 0.0)) < 1e-3 for r in rows)


def test_query_render_and_json(two_runs, tmp_path):
    lineage = two_runs / "fused" / "lineage.json"
    done = run("query", lineage, "--layer", "layer2.0.conv1")
    assert done.returncode == 0 and "layer2.0.conv1 runs in:" in done.stdout
    from relaytrace.model.lineage import Lineage

    saved = Lineage.load(lineage)
    fc = next(s for s in saved.call_sites if s.anchor and saved.origins[s.anchor].layer == "fc")
    done = run("query", lineage, "--kernel", fc.label, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["origins"][0]["layer"] == "fc"
    assert json.loads(done.stdout)[0]["verification"] == "verified"
    done = run("query", lineage, "--history", "layer1.0.conv1")
    assert "LegalizeOps" in done.stdout
    done = run("query", lineage, "--kernel", "no_such_kernel")
    assert done.returncode == 1 and "unknown kernel" in done.stderr
    out = tmp_path / "k.png"
    done = run("render", two_runs / "fused", "--format", "png", "--graph", "kernels", "--out", out)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"
    done = run("render", two_runs / "fused", "--format", "png", "--graph", "kernels", "--out", out)
    assert done.returncode == 1 and "--force" in done.stderr


def test_diff_fused_vs_unfused_lists_every_conv_layer_on_both_sides(two_runs, tmp_path):
    done = run("diff", two_runs / "fused", two_runs / "unfused", "--out", tmp_path / "diff.svg")
    assert done.returncode == 0, done.stderr
    from relaytrace import zoo

    module, _ = zoo.get("resnet18")
    import torch

    convs = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Conv2d)]
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    for conv in convs:
        fields = lines[conv].split()
        assert fields[1] != "missing" and fields[2] != "missing", lines[conv]
    svg = (tmp_path / "diff.svg").read_text()
    assert svg.count("<svg") == 1
    assert "B / A (green: B faster)" in svg and "no time on a side" in svg and "x2.00" in svg  # the legend


def test_diff_of_an_estimate_and_a_measurement_says_which_is_which(two_runs, tmp_path):
    """The ratio of a measured time to a roofline bound was printed as if both were
    measurements (4822x on a CPU against an A100 estimate)."""
    import shutil

    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.model.lineage import Lineage
    from relaytrace.model.peaks import named

    estimate = tmp_path / "estimate"
    shutil.copytree(two_runs / "fused", estimate)
    lineage = Lineage.load(estimate / "lineage.json")
    estimated_profile(lineage, named("nvidia-a100-sxm4-80gb")).save(estimate / "profile.json", overwrite=True)
    done = run("diff", estimate, two_runs / "fused")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("A is an estimate (roofline lower bounds on ") and "B a measurement on " in first
    assert "how far the measured run is from its estimate's bound" in first
    done = run("diff", two_runs / "fused", two_runs / "fused")
    assert not done.stdout.startswith("A is")  # two measurements: no such line


def test_diff_reference_reports_missing_layers_not_zero(two_runs, tmp_path):
    reference = tmp_path / "hand.csv"
    reference.write_text("layer,time_us\nconv1,1000\nlayer1.0.conv1,250.5\nnot.in.model,3\n")
    done = run("diff", two_runs / "fused", "--reference", reference)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("layer1.0.conv2 "))
    assert "not in the reference" in row and " 0.000 " not in row
    assert "missing from the reference" in done.stdout
    assert "not.in.model" in done.stdout


@pytest.mark.slow
def test_tasks_weights_sum_to_call_sites(two_runs):
    from_dir = run("--quiet", "tasks", two_runs / "fused")  # the model a profile DIR was made from
    assert from_dir.returncode == 0, from_dir.stderr
    assert "conv2d" in from_dir.stdout and "layer1.0.conv1" in from_dir.stdout
    done = run("--quiet", "tasks", TINY)
    assert done.returncode == 0, done.stderr
    total = next(line for line in done.stdout.splitlines() if line.endswith("kernel call sites"))
    weight, sites = total.split("total weight ")[1].split(" = ")
    assert int(weight) == int(sites.split()[0])  # only said with "=" when it holds


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["profile", "missing.onnx", "--out", "o"], 1, "no ONNX file"),
        (["profile", TINY, "--input-shape", "x:1xAx3", "--out", "o"], 2, "cannot parse input shape"),
        (["profile", "model.txt", "--out", "o"], 2, "MODEL must be"),
        (["query", "missing.json", "--layer", "x"], 1, "no lineage file"),
        (["demo", "--model", "nope"], 2, "invalid choice"),
    ],
)
def test_bad_input_exit_codes_one_line_reasons_and_nothing_written(tmp_path, args, code, message):
    done = run(*args, cwd=tmp_path)
    assert done.returncode == code
    assert message in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("relaytrace")]) >= 1
    assert list(tmp_path.iterdir()) == []


def test_existing_out_dir_is_refused_without_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    done = run("profile", TINY, "--out", out)
    assert done.returncode == 1 and "--force" in done.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_diff_of_two_different_models_is_refused(tmp_path, two_runs):
    other = tmp_path / "other"
    done = run("--quiet", "profile", f"{FIXTURES / 'tiny_model.py'}:make", "--repeat", "1", "--out", other)
    assert done.returncode == 0, done.stderr
    done = run("diff", two_runs / "fused", other)
    assert done.returncode == 1 and "are not the same model's ops" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_output_directory_is_replaced_in_one_step_or_not_at_all(two_runs, tmp_path):
    from relaytrace.analysis.report import make_report
    from relaytrace.errors import RelaytraceError
    from relaytrace.jobs import load_pair, prepare_out_dir, write_outputs
    from relaytrace.render.outputs import PROFILE, names

    report = make_report(*load_pair(two_runs / "fused"))
    out = tmp_path / "out"
    write_outputs(out, report, RunSpec("m"))
    # every output but steps.csv (an LLM served with no entry named) and inside.csv (a profile made --inside)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        n for n in names(PROFILE) if n not in ("steps.csv", "inside.csv")
    )
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(TypeError):  # fails at the last output, run.json
        write_outputs(out, report, RunSpec(object()))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left beside it
    with pytest.raises(FileExistsError, match="--force"):
        write_outputs(out, report, RunSpec("again"), overwrite=False)  # appeared while building
    write_outputs(out, report, RunSpec("again"))
    assert json.loads((out / "run.json").read_text())["model"] == "again"
    (out / "notes.txt").write_text("mine")
    for attempt in (lambda: prepare_out_dir(out, True), lambda: write_outputs(out, report, RunSpec("m"))):
        with pytest.raises(RelaytraceError, match="notes.txt"):
            attempt()
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_onnx_model_with_a_dynamic_batch_needs_and_takes_input_shapes(tmp_path):
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    path = tmp_path / "mlp.onnx"
    torch.onnx.export(
        Mlp().eval(), (torch.randn(2, 16),), path, dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "batch"}}
    )
    done = run("profile", path, "--out", tmp_path / "a")
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith(
        "input x of mlp has symbolic dims (batch): give its size, e.g. --input-shape x:1x16"
    )
    done = run("profile", path, "--input-shape", "y:3x16", "--out", tmp_path / "b")
    assert done.returncode == 2 and "has no input named y; its inputs are x" in done.stderr
    done = run("profile", path, "--input-shape", "x:3x16:floaty", "--out", tmp_path / "c")
    assert done.returncode == 2 and "unknown dtype 'floaty'" in done.stderr
    assert not any((tmp_path / d).exists() for d in "abc")
    done = run("--quiet", "profile", path, "--input-shape", "x:3x16:float32", "--repeat", "1", "--out", tmp_path / "d")
    assert done.returncode == 0, done.stderr
    profile = json.loads((tmp_path / "d" / "profile.json").read_text())
    assert profile["inputs"] == [["x", [3, 16], "float32"]] and profile["entry"] == "main"


def test_a_torch_run_and_an_onnx_run_of_one_model_diff_layer_by_layer(two_runs, onnx_file, tmp_path):
    import torch

    from relaytrace import zoo
    from relaytrace.analysis import diff
    from relaytrace.jobs import load_pair

    out = tmp_path / "onnx"
    done = run("--quiet", "profile", onnx_file, "--repeat", "1", "--out", out)
    assert done.returncode == 0, done.stderr
    done = run("diff", two_runs / "fused", out)
    assert done.returncode == 1 and "diff them --by-layer" in done.stderr  # different ops: not silently matched
    done = run("diff", two_runs / "fused", out, "--by-layer")
    assert done.returncode == 0, done.stderr
    rows = {r.layer: r for r in diff.compare(*load_pair(two_runs / "fused"), *load_pair(out), by_layer=True)}
    module, _ = zoo.get("resnet18", image=64)
    kinds = {n: type(m) for n, m in module.named_modules()}
    for layer in (n for n, k in kinds.items() if k in (torch.nn.Conv2d, torch.nn.Linear)):
        assert rows[layer].match in ("same ops", "different ops") and rows[layer].a_us and rows[layer].b_us, layer
    batch_norms = [n for n, k in kinds.items() if k is torch.nn.BatchNorm2d]
    assert all(rows[n].match == "only in A" for n in batch_norms)  # the exporter folded them into the convs
    assert diff.match_summary(tuple(rows.values())) in done.stdout


def test_a_failed_replacement_keeps_the_previous_outputs_and_says_where(two_runs, tmp_path, monkeypatch):
    import relaytrace.jobs as jobs
    from relaytrace.analysis.report import make_report
    from relaytrace.errors import RelaytraceError

    report = make_report(*jobs.load_pair(two_runs / "fused"))
    out = tmp_path / "out"
    jobs.write_outputs(out, report, RunSpec("first"))
    rename = os.rename

    def failing(src, dst):  # the new directory cannot take out's place, nor the old one go back
        if Path(dst) == out:
            raise OSError("injected: rename refused")
        rename(src, dst)

    monkeypatch.setattr(jobs.os, "rename", failing)
    with pytest.raises(RelaytraceError, match="previous contents are kept in") as caught:
        jobs.write_outputs(out, report, RunSpec("second"))
    kept = Path(str(caught.value).rsplit(" ", 1)[-1])
    assert json.loads((kept / "run.json").read_text())["model"] == "first"


def test_diff_says_where_a_layer_without_time_went_totals_and_sorts(two_runs):
    """Unfused, every op is a kernel of its own; fused, a ReLU's ops run inside the
    BatchNorm's kernel: "fused into bn1", never "missing"."""
    from relaytrace.analysis import diff as D
    from relaytrace.jobs import load_pair

    done = run("--quiet", "diff", two_runs / "unfused", two_runs / "fused")
    assert done.returncode == 0, done.stderr
    rows = D.compare(*load_pair(two_runs / "unfused"), *load_pair(two_runs / "fused"))
    fused = [r for r in rows if r.b_us is None and r.a_us is not None]
    assert fused and all(r.absent_b.why == D.Why.FUSED for r in fused)
    by_layer = {r.layer: r for r in rows}
    for r in fused:  # the layer named hosts it: it has time in B, in a kernel call the fused layer's ops run in
        host = by_layer[r.absent_b.hosts[0]]
        assert host.b_us and set(host.kernels_b) & set(r.kernels_b), (r, host)
    assert by_layer["relu"].absent_b == D.Absence(D.Why.FUSED, ("bn1",))
    assert "missing" not in done.stdout and "fused into bn1" in done.stdout
    changes = [abs(r.change_us) for r in rows]
    assert changes == sorted(changes, reverse=True)
    total_a, total_b = D.totals(rows)
    assert f"total: A {total_a / 1e3:.3f} ms, B {total_b / 1e3:.3f} ms" in done.stdout


@pytest.mark.slow
def test_diff_shows_each_layers_noise_from_the_runs_spread(tmp_path, two_runs):
    """Two profiles of one build, three runs each: every layer's noise is its sites'
    max - min over runs (scaled by its share), a change within it is marked ``~``; one
    run has no spread to tell by."""
    from relaytrace.analysis import diff as D
    from relaytrace.jobs import load_pair

    for side in "ab":
        done = run("--quiet", "profile", TINY, "--repeat", "3", "--out", tmp_path / side)
        assert done.returncode == 0, done.stderr
    (la, pa), (lb, pb) = load_pair(tmp_path / "a"), load_pair(tmp_path / "b")
    rows = {r.layer: r for r in D.compare(la, pa, lb, pb)}
    fc_a = [s for s in la.kernels_of("fc") if s.anchor and la.origins[s.anchor].layer == "fc"]
    assert len(fc_a) == 1  # one kernel call anchored by fc on each side: its spread is that site's
    spread = 0.0
    for lineage, profile in ((la, pa), (lb, pb)):
        site = next(s for s in lineage.kernels_of("fc") if s.anchor and lineage.origins[s.anchor].layer == "fc")
        t = profile.site_times()[site.key]
        spread += t.max_us - t.min_us
    assert rows["fc"].spread_us == pytest.approx(spread) and spread > 0
    same = D.compare(la, pa, la, pa)  # a profile against itself: every change is 0, within any spread
    assert all(r.within_noise for r in same if r.spread_us)
    done = run("diff", tmp_path / "a", tmp_path / "b")
    # the noise as the table prints it (3 significant digits: a spread under 10 us shows)
    assert done.returncode == 0 and "noise (ms)" in done.stdout and f"±{spread / 1e3:.3g}" in done.stdout
    marked = [r.layer for r in rows.values() if r.within_noise]
    assert (f"{len(marked)} layer(s) marked ~" in done.stdout) == bool(marked)
    done = run("diff", two_runs / "fused", two_runs / "unfused")  # one run each
    assert "'-': one run, nothing to tell by" in done.stdout


def test_model_explorer_node_data_is_keyed_by_the_exported_programs_node_ids(two_runs):
    """Model Explorer's ExportedProgram adapter names each node by its fx node name in
    ``torch.export.export(model, args)``: every op node of that program gets our
    figures, under exactly those ids; the times add up to the kernel time."""
    import operator

    import torch

    from relaytrace import zoo

    module, example = zoo.get("resnet18", image=64)
    program = torch.export.export(module, (example,))
    ops = {n.name: n for n in program.graph.nodes if n.op == "call_function" and n.target is not operator.getitem}
    out = two_runs / "fused"
    time = json.loads((out / "explorer-time.json").read_text())
    category = json.loads((out / "explorer-category.json").read_text())["results"]
    kernels = json.loads((out / "explorer-kernels.json").read_text())["results"]
    assert set(time["results"]) == set(ops) == set(category)
    layers_us = sum(float(r["time_us"]) for r in csv.DictReader((out / "layers.csv").open()))
    assert sum(v["value"] for v in time["results"].values()) == pytest.approx(layers_us, rel=1e-4)
    convs = [name for name, n in ops.items() if "conv2d" in str(n.target)]
    assert len(convs) == 20 and all(
        time["results"][c]["value"] > 0 and category[c]["value"] == "compute" for c in convs
    )
    for name, n in ops.items():  # a ReLU after a BatchNorm runs in the BatchNorm's kernel
        if "relu" in str(n.target) and category[name]["value"].startswith("fused into "):
            site = category[name]["value"].rsplit("(", 1)[1].rstrip(")")
            assert site in kernels[name]["value"].split() and time["results"][name]["value"] == 0
    assert any(v["value"].startswith("fused into ") for v in category.values())
    assert time["gradient"][0]["stop"] == 0 and time["gradient"][-1]["stop"] == 1


def test_layers_svg_labels_ops_the_vm_runs_as_builtins(two_runs):
    from relaytrace.jobs import load_pair

    lineage, _ = load_pair(two_runs / "fused")  # ResNet-18 flattens with a VM reshape, no kernel
    builtin = [
        b.name for b in lineage.builtins for o in b.origins if not any(o in s.origin_ids for s in lineage.call_sites)
    ]
    svg = (two_runs / "fused" / "layers.svg").read_text()
    assert builtin and all(f"VM builtin {name}" in svg for name in builtin)


def test_a_factory_file_imports_its_own_siblings(tmp_path):
    """As `python file.py` has it: the factory's folder is on the import path while it
    loads (run from another folder: `python -m` would have put only that one there)."""
    (tmp_path / "netdef.py").write_text((FIXTURES / "tiny_model.py").read_text())
    (tmp_path / "use.py").write_text("from netdef import make as made\n\ndef make():\n    return made()\n")
    done = run("--quiet", "profile", f"{tmp_path / 'use.py'}:make", "--repeat", "1", "--out", tmp_path / "out", cwd="/")
    assert done.returncode == 0, done.stderr
    assert "conv1" in (tmp_path / "out" / "layers.csv").read_text()


SYMBOLIC_FACTORY = """
import torch
from relaytrace.frontends.torch import from_torch


class Scorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=1)


def _parts():
    torch.manual_seed(0)
    return Scorer().eval(), (torch.randn(1, 5, 8),), {"x": {1: torch.export.Dim("seq", max=64)}}


def triple():
    return _parts()


def imported():
    module, example, dynamic = _parts()
    return from_torch(module, example, name="scorer", dynamic_shapes=dynamic)


def static():
    return _parts()[:2]
"""


@pytest.mark.parametrize("factory", [pytest.param("triple", marks=pytest.mark.slow), "imported"])
def test_a_factory_with_a_symbolic_dim_profiles_at_the_lengths_given(tmp_path, factory):
    """A factory returning ``from_torch(..., dynamic_shapes=)`` (an ImportedModel) or
    ``(module, example inputs, dynamic_shapes)``: one build, run at each
    ``--input-shape``; every kernel call site attributed to its layer."""
    from relaytrace.model.lineage import Lineage

    (tmp_path / "seq.py").write_text(SYMBOLIC_FACTORY)
    for length in (3, 12):
        out = tmp_path / f"len{length}"
        done = run(
            "--quiet",
            "profile",
            f"{tmp_path / 'seq.py'}:{factory}",
            "--input-shape",
            f"x:1x{length}x8",
            "--repeat",
            "1",
            "--out",
            out,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads((out / "profile.json").read_text())["inputs"] == [["x", [1, length, 8], "float32"]]
        lineage = Lineage.load(out / "lineage.json")
        coverage = lineage.coverage()
        assert coverage.complete and coverage.attributed_sites == coverage.call_sites > 0
        layers = {lineage.origins[o].layer for s in lineage.call_sites for o in s.origin_ids}
        assert layers == {"proj", "softmax"}  # the root module's own op, named as in torch.export.export(module)
        assert {r["verification"] for r in csv.DictReader((out / "layers.csv").open())} == {"verified"}
    if factory == "triple":  # without --input-shape: the factory's example inputs
        done = run("--quiet", "profile", f"{tmp_path / 'seq.py'}:{factory}", "--repeat", "1", "--out", tmp_path / "ex")
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / "ex" / "profile.json").read_text())["inputs"] == [["x", [1, 5, 8], "float32"]]


@pytest.mark.slow
def test_a_symbolic_model_without_sizes_or_a_reference_is_refused_in_one_line(tmp_path):
    (tmp_path / "seq.py").write_text(SYMBOLIC_FACTORY)
    model = f"{tmp_path / 'seq.py'}:imported"
    for command in (["profile", model, "--out", tmp_path / "a"], ["compare", model]):
        done = run(*command)
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("relaytrace: usage error: input x of scorer has symbolic dims (")
        assert last.endswith("give its size, e.g. --input-shape x:1x1x8")
    done = run("compare", model, "--input-shape", "x:1x4x8")
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith(
        "gives only a TVM model (an ImportedModel, an nn module or a Relax IRModule): compare an .onnx file or a "
        "factory returning (torch module, example inputs[, dynamic_shapes])"
    )
    done = run("profile", f"{tmp_path / 'seq.py'}:static", "--input-shape", "x:1x4x8", "--out", tmp_path / "b")
    assert done.returncode == 2 and "exported without dynamic_shapes runs at its example inputs' sizes" in done.stderr
    done = run("--quiet", "compare", f"{tmp_path / 'seq.py'}:triple", "--input-shape", "x:1x9x8")
    assert done.returncode == 0, done.stderr
    assert "1x9x8" in done.stdout and "0 beyond" in done.stdout
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # all but the newline
FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet cell starting with one is a formula


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """tests/fixtures/hostile_model.py profiled: every layer, the model and its input
    named by a hostile name (tests/fixtures/hostile.py)."""
    out = tmp_path_factory.mktemp("hostile") / "out"
    done = run(
        "profile", f"{FIXTURES / 'hostile_model.py'}:make", "--repeat", "1", "--out", out, warnings="default"
    )  # TVM's warning quoting the input's name is shown too
    return out, done


def _shown_as_text(done):
    """No control character of a name reached the terminal (the newline is the outputs' own)."""
    for stream in (done.stdout, done.stderr):
        assert not RAW_CONTROL.search(stream), repr(RAW_CONTROL.search(stream).group())


def test_a_warning_quoting_a_name_is_shown_as_text():
    """A Python warning printed while a command runs (a library quoting a model's
    name) goes through the terminal's escaping as every line does."""
    from relaytrace.render.safe_text import terminal

    code = (
        "import warnings, sys; from relaytrace.jobs import escape_warnings; escape_warnings(); "
        f"warnings.warn('Renaming name ' + {INPUT_NAME!r})"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"Renaming name {terminal(INPUT_NAME)}" in done.stderr, done.stderr
    _shown_as_text(done)


def test_hostile_names_are_text_in_the_terminal_csv_svg_and_json(hostile_run):
    from relaytrace.render.safe_text import DOT_CHARS, shortened, terminal

    def drawn(name):
        return shortened(terminal(name), DOT_CHARS)

    out, done = hostile_run
    assert done.returncode == 0, done.stderr
    _shown_as_text(done)
    assert terminal(MODEL_NAME) in done.stdout  # escaped, not dropped
    assert "Renaming name" not in done.stderr  # TVM's warning on the input's dot: relaytrace takes either name
    table = done.stdout.split("top 10 layers (attribution policy anchor):\n")[1]
    shown = [line.split("  ")[0] for line in table.splitlines()[2:12]]
    assert set(shown) <= {terminal(name) for name in HOSTILE_NAMES}  # each row's layer as it is, escaped
    cells = {}
    for name in ("layers.csv", "kernels.csv"):
        with (out / name).open(newline="", encoding="utf-8") as f:
            cells[name] = [cell for row in csv.reader(f) for cell in row]
    for cell in cells["layers.csv"] + cells["kernels.csv"]:
        assert not cell.startswith(FORMULA) or _number(cell), cell  # neutralised: "'=cmd..."
    layers = set(cells["layers.csv"])
    for name in HOSTILE_NAMES:  # every layer has a row, its name as it is (after the quote)
        assert ("'" + name if name.startswith(FORMULA) else name) in layers, name
    svg_text = {}
    for name in ("layers.svg", "kernels.svg"):
        root = ET.parse(out / name).getroot()  # well-formed XML
        svg_text[name] = "\n".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for name in HOSTILE_NAMES:  # a 20 KB name shortened in the middle (safe_text.DOT_CHARS)
        assert drawn(name) in svg_text["layers.svg"].splitlines(), name
    assert terminal(MODEL_NAME) in svg_text["kernels.svg"]
    for name in ("trace.json", "lineage.json", "profile.json", "run.json") + tuple(EXPLORER):
        json.loads((out / name).read_text(encoding="utf-8"))  # strict: no raw control character in a string
    assert set(json.loads((out / "explorer-time.json").read_text())["results"]) == set(HOSTILE_NAMES)
    trace = json.loads((out / "trace.json").read_text())
    assert {e["args"]["layer"] for e in trace["traceEvents"] if e.get("ph") == "X" and "layer" in e["args"]} == set(
        HOSTILE_NAMES
    )


def test_hostile_names_are_text_in_query_diff_and_errors(hostile_run, tmp_path):
    from relaytrace.model.lineage import Lineage
    from relaytrace.render.safe_text import terminal

    out, done = hostile_run
    assert done.returncode == 0, done.stderr
    lineage = Lineage.load(out / "lineage.json")
    site = lineage.call_sites[0]
    for option, name, shown in (
        ("--layer", "red\x1b[31mALERT\x1b[0m", "red\\x1b[31mALERT\\x1b[0m runs in: "),
        ("--history", "title\x1b]0;pwned\x07", "history of title\\x1b]0;pwned\\x07:"),
        ("--kernel", site.label, terminal(lineage.origins[site.anchor].layer)),
    ):
        done = run("query", out, option, name)
        assert done.returncode == 0, done.stderr
        _shown_as_text(done)
        assert shown in done.stdout
    done = run("query", out, "--layer", "no\x1b]0;such\x07layer")
    assert done.returncode == 1 and "unknown" in done.stderr
    _shown_as_text(done)
    done = run("diff", out, out, "--out", tmp_path / "diff.svg")  # a diff graph: every layer at x1.00
    assert done.returncode == 0, done.stderr
    _shown_as_text(done)
    root = ET.parse(tmp_path / "diff.svg").getroot()
    text = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "=cmd|' /C calc'!A0" in text and "red\\x1b[31mALERT\\x1b[0m" in text
    done = run("diff", out, "--reference", out / "layers.csv")  # our own CSV as the reference: read back as written
    assert done.returncode == 0, done.stderr
    _shown_as_text(done)
    assert "not in the reference" not in done.stdout and "not in the model" not in done.stdout
    assert set(lineage.layers()) == set(HOSTILE_NAMES)


def test_hostile_kernel_names_are_text_in_the_terminal_csv_and_svg(tmp_path):
    from relaytrace.render.safe_text import DOT_CHARS, csv_value, shortened, terminal

    def drawn(name):
        return shortened(terminal(name), DOT_CHARS)

    from .fixtures.hostile import HOSTILE_NAMES

    out = tmp_path / "out"
    done = run(
        "profile",
        f"{FIXTURES / 'hostile_model.py'}:make_kernels",
        "--pipeline",
        "unfused",
        "--repeat",
        "1",
        "--out",
        out,
        warnings="default",
    )
    assert done.returncode == 0, done.stderr
    _shown_as_text(done)
    kernels = {name.replace("\x00", "0") for name in HOSTILE_NAMES}  # hostile_model.kernel_name
    with (out / "kernels.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        assert not any(cell.startswith(FORMULA) and not _number(cell) for cell in row.values()), row
    assert {csv_value(row["name"]) for row in rows} == kernels
    with (out / "layers.csv").open(newline="", encoding="utf-8") as f:
        calls = {csv_value(row["kernel_calls"]) for row in csv.DictReader(f)}
    assert calls == {f"{kernel}#0" for kernel in kernels}
    root = ET.parse(out / "kernels.svg").getroot()
    text = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {drawn(f"{kernel}#0") for kernel in kernels} <= text
    ids = {e.get("id") for e in root.iter()}
    assert {drawn(f"site:{kernel}#0") for kernel in kernels} <= ids
    ET.parse(out / "layers.svg")


def _number(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?", text) is not None
