"""Work offloaded to libraries (issue 43): TVM's own BYOC flow (the cuBLAS pattern table,
``FuseOpsByPattern(annotate_codegen=True)``, ``MergeCompositeFunctions``, ``RunCodegen``
calling a codegen registered as ``relax.ext.cublas``), merged or in MLC's form, for llvm
and cuda; registered functions called by the model (``call_dps_packed``,
``call_pure_packed``) or by a pass that dispatches an op to one: every op that runs in
an external call is on that call's site, verified, profiled (API and CLI), counted from
its ops, and never "eliminated"."""

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import relaytrace
from relaytrace.analysis.report import make_report
from relaytrace.errors import RelaytraceError
from relaytrace.frontends.nn import from_nn
from relaytrace.model.lineage import Lineage
from relaytrace.model.run_spec import RunSpec
from relaytrace.render.export import kernels_csv

from .conftest import move_origin
from .fixtures.offload import MLP, dispatch_relu_pipeline, offload_pipeline, register_codegen, register_functions
from .fixtures.relax_modules import CallsPacked, TwoEntries

FIXTURES = Path(__file__).parent / "fixtures"
BATCH, WIDTH, HIDDEN, CLASSES = 8, 16, 32, 4
# layer -> (its Linear's M, N, K, and whether a relu runs in the same library call)
LINEARS = {
    "layers.0.up": (BATCH, HIDDEN, WIDTH, True),
    "layers.0.down": (BATCH, WIDTH, HIDDEN, False),
    "layers.1.up": (BATCH, HIDDEN, WIDTH, True),
    "layers.1.down": (BATCH, WIDTH, HIDDEN, False),
    "head": (BATCH, CLASSES, WIDTH, False),
}


def _mlp_build(merge: bool, target: str = "llvm"):
    from tvm.relax.frontend import nn

    register_codegen()
    entry = "main" if merge else "forward"
    imported = from_nn(MLP(WIDTH, HIDDEN, CLASSES), {entry: {"x": nn.spec.Tensor((BATCH, WIDTH), "float32")}})
    executable, lineage = relaytrace.build(imported, target, pipeline=offload_pipeline(merge, target), model="mlp")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in imported.mod[entry].params]
    return imported, executable, lineage, inputs


@pytest.fixture(scope="module")
def mlp():
    """The MLP offloaded and merged, built once: (imported, executable, lineage, inputs)."""
    return _mlp_build(merge=True)


@pytest.fixture(scope="module")
def mlp_profile(mlp):
    _, executable, lineage, inputs = mlp
    return relaytrace.profile(executable, lineage, inputs, repeat=2)


def _library_sites(lineage):
    return [s for s in lineage.call_sites if s.library]


def test_offloaded_ops_are_on_their_library_calls_verified_and_not_eliminated(mlp):
    imported, executable, lineage, inputs = mlp
    # the codegen really ran them: the build computes the model
    vm = relax.VirtualMachine(executable, tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()
    x, (w0u, b0u, w0d, b0d, w1u, b1u, w1d, b1d, wh, bh) = inputs[0], inputs[1:]
    for wu, bu, wd, bd in ((w0u, b0u, w0d, b0d), (w1u, b1u, w1d, b1d)):
        x = x + np.maximum(x @ wu.T + bu, 0) @ wd.T + bd
    np.testing.assert_allclose(got, x @ wh.T + bh, rtol=1e-5, atol=1e-4)

    assert lineage.eliminated() == {}
    assert lineage.coverage().complete and lineage.verification.ok
    library = _library_sites(lineage)
    assert len(library) == 5 and {s.library for s in library} == {"cublas"}
    for layer, (_, _, _, relu) in LINEARS.items():
        (site,) = lineage.kernels_of(layer)
        assert site.library == "cublas"
        ops = {lineage.origins[o].short_op for o in site.origin_ids if lineage.origins[o].layer == layer}
        assert ops == {"permute_dims", "matmul", "add"}
        assert lineage.origins[site.anchor].id == f"{layer}/matmul"
        others = {lineage.origins[o].layer for o in site.origin_ids} - {layer}
        assert others == ({layer.replace(".up", ".act")} if relu else set())
        offload = lineage.build.offloads[site.kernel]
        assert offload.codegen == "cublas"
        assert offload.patterns == (f"cublas.matmul_transposed_bias{'_relu' if relu else ''}",)
        passes = [c.pass_name for c in lineage.history(layer)]
        for name in ("FuseOpsByPattern", "MergeCompositeFunctions", "RunCodegen"):
            assert name in passes
    # the residual adds are TVM's own kernels
    assert {s.library for s in lineage.kernels_of("layers.0")} == {""}


def test_an_op_moved_to_the_wrong_library_call_is_suspect(mlp):
    lineage = mlp[2]
    (up,) = lineage.kernels_of("layers.0.up")
    (head,) = lineage.kernels_of("head")
    checks = move_origin(lineage, "layers.0.up/matmul", head).verify().by_position()
    assert checks[up.position].status == "suspect"
    assert checks[head.position].status == "suspect"
    assert any("matmul" in r for r in checks[head.position].reasons)


def test_library_calls_are_profiled_billed_and_counted_at_their_shapes(mlp, mlp_profile):
    lineage, prof = mlp[2], mlp_profile
    report = make_report(lineage, prof)
    assert sum(r.us for r in report.layers) == pytest.approx(prof.kernel_us, rel=1e-9)
    times = prof.by_site()
    library_us = sum(times[s.key] for s in _library_sites(lineage))
    assert library_us > 0 and report.categories.library_us == pytest.approx(library_us, rel=1e-9)
    rows = {r.name: r for r in report.kernels}
    assert {rows[s.kernel].library for s in _library_sites(lineage)} == {"cublas"}
    listed = {row["name"]: row["library"] for row in csv.DictReader(io.StringIO(kernels_csv(report)))}
    assert listed == {s.kernel: s.library for s in lineage.call_sites}
    assert sorted(listed.values()) == ["", "cublas", "cublas", "cublas"]
    for layer, (m, n, k, relu) in LINEARS.items():
        roof = report.roofline.layer(layer)
        # 2·M·N·K and the bias add's M·N, its own ops'; a relu in the same call is the act layer's M·N
        assert roof.flops == roof.useful == 2 * m * n * k + m * n
        if relu:
            assert report.roofline.layer(layer.replace(".up", ".act")).flops == m * n
        assert roof.bytes is not None and roof.bound_by in ("compute", "memory")


def test_the_estimate_bounds_library_calls_by_their_ops_work(mlp):
    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.model.peaks import given

    lineage = mlp[2]
    report = make_report(lineage, estimated_profile(lineage, given(1000.0, 100.0)))
    for layer, (m, n, k, _) in LINEARS.items():
        roof = report.roofline.layer(layer)
        assert roof.flops == 2 * m * n * k + m * n  # its own ops' (a relu in its call is the act layer's)
        assert roof.us == pytest.approx(roof.bound_us) and roof.us > 0


def test_a_cuda_build_offloading_to_the_codegen_is_traced_and_estimated():
    """Built for cuda, traced, not run (no GPU here; the test's codegen compiles for the
    host, so the build could not run on one either): the same library calls, verified,
    and each offloaded Linear bounded on an A100 by its 2·M·N·K + bias."""
    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.model.peaks import named

    try:
        _, _, lineage, _ = _mlp_build(merge=True, target="cuda")
    except Exception as exc:  # code generation this wheel or machine cannot do
        pytest.skip(f"cuda code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")
    assert "cuda" in lineage.build.target
    assert lineage.coverage().complete and lineage.verification.ok and lineage.eliminated() == {}
    assert {layer: lineage.kernels_of(layer)[0].library for layer in LINEARS} == dict.fromkeys(LINEARS, "cublas")
    report = make_report(lineage, estimated_profile(lineage, named("nvidia-a100-sxm4-80gb")))
    for layer, (m, n, k, _) in LINEARS.items():
        assert report.roofline.layer(layer).flops == 2 * m * n * k + m * n  # its own ops', the relu the act layer's


def test_every_output_marks_the_library_calls_and_the_cli_reads_them(mlp, mlp_profile, tmp_path):
    from relaytrace.jobs import write_outputs
    from tests.fuzz import run_cli

    lineage = mlp[2]
    out = write_outputs(tmp_path / "out", make_report(lineage, mlp_profile), RunSpec("mlp"))
    library = {s.kernel for s in _library_sites(lineage)}
    with open(out / "kernels.csv") as f:
        assert {row["name"] for row in csv.DictReader(f) if row["library"] == "cublas"} == library
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("cat") == "library"} == library
    assert '"library": "cublas"' in (out / "report.html").read_text()
    assert (out / "kernels.svg").read_text().count("library cublas") == 5
    assert Lineage.load(out / "lineage.json") == lineage  # offloads and libraries saved
    code, text, _ = run_cli(["query", out, "--kernel", lineage.kernels_of("head")[0].label])
    assert code == 0 and "(library call: cublas)" in text and "head" in text
    code, text, _ = run_cli(["query", out, "--history", "layers.0.up"])
    assert code == 0 and "FuseOpsByPattern" in text and "RunCodegen" in text
    assert "offloaded to cublas: cublas.matmul_transposed_bias_relu" in text


def test_the_cli_profiles_a_model_through_a_pipeline_its_file_registers(tmp_path):
    from tests.fuzz import run_cli

    out = tmp_path / "out"
    code, text, err = run_cli(
        ["profile", f"{FIXTURES}/offload.py:mlp", "--pipeline", "cublas_offload", "--repeat", "1", "--out", out]
    )
    assert code == 0, err
    assert "library calls:" in text and "verified against the compiled IR: 7 of 7 call sites" in text
    lineage = Lineage.load(out / "lineage.json")
    assert lineage.build.pipeline == "cublas_offload" and lineage.verification.ok
    assert {lineage.kernels_of(layer)[0].library for layer in LINEARS} == {"cublas"}
    with open(out / "layers.csv") as f:
        layers = {row["layer"]: float(row["time_us"]) for row in csv.DictReader(f)}
    with open(out / "kernels.csv") as f:
        kernels = list(csv.DictReader(f))
    assert sum(layers.values()) == pytest.approx(sum(float(k["duration_us"]) for k in kernels), rel=1e-3)
    assert sorted(k["library"] for k in kernels) == ["", "cublas", "cublas", "cublas"]
    code, _, err = run_cli(["profile", f"{FIXTURES}/offload.py:mlp", "--pipeline", "nosuch", "--out", out, "--force"])
    assert code == 2 and "unknown pipeline 'nosuch'" in err and "cublas_offload" in err


def test_the_isolated_profile_times_each_library_call_alone(mlp):
    _, executable, lineage, inputs = mlp
    prof = relaytrace.profile(executable, lineage, inputs, repeat=1, mode="isolated", number=1)
    times = prof.by_site()
    assert all(times[s.key] > 0 for s in lineage.call_sites)


def test_mlc_dispatch_form_without_merging_is_followed():
    _, executable, lineage, inputs = _mlp_build(merge=False)
    assert lineage.eliminated() == {} and lineage.coverage().complete
    for layer in LINEARS:
        (site,) = lineage.kernels_of(layer)
        assert site.library == "cublas" and lineage.origins[site.anchor].id == f"forward:{layer}/matmul"
    prof = relaytrace.profile(executable, lineage, inputs, repeat=1, entry="forward")
    assert make_report(lineage, prof).categories.library_us > 0


def test_registered_functions_called_by_name_are_profiled_library_calls():
    register_functions()
    executable, lineage = relaytrace.build(CallsPacked, "llvm")
    calls = {layer: lineage.kernels_of(layer) for layer in ("y", "t")}
    assert {layer: [(s.kernel, s.library) for s in sites] for layer, sites in calls.items()} == {
        "y": [("my.double", "packed")],
        "t": [("my.triple", "packed")],
    }
    assert lineage.builtins == () and lineage.eliminated() == {}
    assert lineage.coverage().complete and lineage.verification.ok
    x = np.arange(4, dtype="float32")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), x * 7)
    for mode in ("timeline", "isolated"):
        prof = relaytrace.profile(executable, lineage, [x], repeat=1, mode=mode)
        report = make_report(lineage, prof)
        assert sum(r.us for r in report.layers) == pytest.approx(prof.kernel_us, rel=1e-9)
        times = prof.by_site()
        assert report.categories.library_us == pytest.approx(
            sum(times[s.key] for s in _library_sites(lineage)), rel=1e-9
        )
    # their work is not known from their ops: said for each call, not guessed
    for name in ("my.double", "my.triple"):
        work = lineage.build.work[name]
        assert work.flops is None and name in " ".join(work.notes)
    assert report.roofline.layer("y").flops is None
    assert report.roofline.layer("z").flops == 4
    # a remote device is sent TVM's kernels only: refused, before any connection, saying why
    with pytest.raises(RelaytraceError, match=r"2 library call\(s\) \(my.double, my.triple\).*local profile only"):
        relaytrace.profile(executable, lineage, [x], remote=relaytrace.RemoteDevice(rpc="127.0.0.1:9"))


def test_an_op_a_pass_dispatches_to_a_registered_function_is_a_verified_library_call():
    executable, lineage = relaytrace.build(TwoEntries, "llvm", pipeline=dispatch_relu_pipeline())
    (site,) = lineage.kernels_of("act")
    assert (site.kernel, site.library, site.origin_ids) == ("my.relu", "packed", ("act/relu",))
    # the evidence: the Var that bound relax.nn.relu now calls my.relu
    assert lineage.build.kernel_members["my.relu"][0].ops == ("relax.nn.relu",)
    assert lineage.coverage().complete and lineage.verification.ok and lineage.eliminated() == {}
    assert "DispatchReluToLibrary" in [c.pass_name for c in lineage.history("act")]
    rng = np.random.default_rng(0)
    for n in (4, 8):  # its work follows the symbolic length it ran at: one per element
        x, w = rng.standard_normal((n, 64)).astype("float32"), rng.standard_normal((64, 64)).astype("float32")
        got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w))
        np.testing.assert_allclose(got.numpy(), np.maximum(x @ w, 0) + x, rtol=1e-4, atol=1e-4)
        report = make_report(lineage, relaytrace.profile(executable, lineage, [x, w], repeat=1))
        assert report.roofline.layer("act").flops == n * 64


def test_a_registered_function_moved_onto_another_call_is_suspect():
    register_functions()
    _, lineage = relaytrace.build(CallsPacked, "llvm")
    (double_site,) = lineage.kernels_of("y")
    (triple_site,) = lineage.kernels_of("t")
    checks = move_origin(lineage, "y/double", triple_site).verify().by_position()
    assert checks[double_site.position].status == "suspect"
    assert checks[triple_site.position].status == "suspect"


def test_an_nn_decoder_with_its_linears_dispatched_to_the_codegen_is_counted_at_each_length():
    """MLC's form (patterns, then RunCodegen, no merging) on the zoo's nn decoder, whose
    ``prefill`` has a symbolic length: each Linear runs in a library call, and its FLOPs
    follow the length the profile ran (2·n·N·K), as TVM's own build computes the same logits."""
    from relaytrace.zoo.nn_decoder import decoder

    register_codegen()
    module, spec = decoder()
    imported = from_nn(module, spec)
    executable, lineage = relaytrace.build(imported, "llvm", pipeline=offload_pipeline(merge=False))
    plain = tvm.compile(imported.mod, "llvm")
    assert lineage.coverage().complete and lineage.verification.ok and lineage.eliminated() == {}
    linears = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    for entry in ("prefill", "decode"):
        sites = lineage.for_entry(entry)
        for layer in [f"layers.{i}.{name}" for i in range(2) for name in linears] + ["lm_head"]:
            assert [
                (s.library, lineage.origins[s.anchor].layer)
                for s in sites.kernels_of(layer)
                if s.anchor and lineage.origins[s.anchor].layer == layer
            ] == [("cublas", layer)]
    rng = np.random.default_rng(0)
    weights = [
        0.1 * rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32")
        for p in imported.mod["decode"].params[1:]
    ]
    offloaded, reference = relax.VirtualMachine(executable, tvm.cpu()), relax.VirtualMachine(plain, tvm.cpu())
    for entry, n in (("prefill", 8), ("prefill", 16), ("decode", 1)):
        inputs = [rng.integers(0, 256, (1, n)).astype("int32"), *weights]
        args = [tvm.runtime.tensor(a) for a in inputs]
        np.testing.assert_allclose(
            offloaded[entry](*args).numpy(), reference[entry](*args).numpy(), rtol=1e-4, atol=1e-4
        )
        report = make_report(lineage, relaytrace.profile(executable, lineage, inputs, repeat=1, entry=entry))
        assert sum(r.us for r in report.layers) == pytest.approx(report.profile.kernel_us, rel=1e-9)
        assert report.roofline.layer("layers.0.self_attn.qkv_proj").flops == 2 * n * 192 * 64
        assert report.roofline.layer("lm_head").flops == 2 * n * 256 * 64
