"""Per-layer numerical comparison of compiled builds against their torch source:
real zoo ResNet-18 builds run by TVM's VM and by torch's fx interpreter."""

import csv
import json
import statistics

import numpy as np
import pytest

import relaytrace
from relaytrace import compare, zoo
from relaytrace.analysis.layer_outputs import layer_outputs
from relaytrace.build import NHWC
from relaytrace.frontends.torch import from_torch
from relaytrace.model.numerics import BEYOND, FUSED, WITHIN, Comparison, error_of

from .conftest import assert_holds_to_schema
from .fuzz import run_cli


def _compare(module, example, **build):
    executable, lineage = relaytrace.build(from_torch(module, (example,)), "llvm", **build)
    return lineage, compare(executable, lineage, module, [example.numpy()])


@pytest.fixture(scope="module")
def resnet18_fp32():
    module, example = zoo.get("resnet18")
    return _compare(module, example)


def test_resnet18_fp32_every_layer_within_1e_4(resnet18_fp32):
    lineage, result = resnet18_fp32
    compared = [e for e in result.layers if e.compared]
    assert all(e.status == WITHIN and e.max_abs < 1e-4 and e.cosine > 0.99999 for e in compared)
    assert result.first_beyond is None and result.first_nan is None
    convs = {o.layer for o in lineage.origins.values() if o.short_op == "conv2d"}
    assert len(convs) == 20 and convs <= {e.layer for e in compared}  # each conv's kernel writes its output
    assert "no layer beyond the tolerance" in result.summary()
    assert Comparison.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_a_layer_fused_away_is_said_with_the_kernel_that_holds_it(resnet18_fp32):
    """bn1's output never leaves the BatchNorm+ReLU kernel: it is ``fused``, kept in the
    call site that runs its last op and writes the next layer's output (compared there)."""
    lineage, result = resnet18_fp32
    by_layer = {e.layer: e for e in result.layers}
    fused = [e for e in result.layers if e.status == FUSED]
    assert by_layer["bn1"].status == FUSED and "relu's output" in by_layer["bn1"].note
    assert by_layer["relu"].status == WITHIN and by_layer["relu"].site == by_layer["bn1"].site
    plan = {p.layer: p for p in layer_outputs(lineage)}
    for e in fused:
        site = lineage.site_by_label(e.site)
        assert plan[e.layer].origin in site.origin_ids  # the kernel runs the layer's last op
        host = e.note.split("which writes ")[1].split("'s output")[0]
        assert by_layer[host].site == e.site and by_layer[host].compared, (e, by_layer[host])
    assert "missing" not in " ".join(e.note for e in result.layers)


@pytest.mark.slow
def test_fp16_errors_grow_along_the_network_and_name_the_first_layer(resnet18_fp32):
    """At 224x224 (at 64x64 layer4's errors are no larger than layer1's: growth along
    a network is an observation about this one, not a law)."""
    _, fp32 = resnet18_fp32
    module, example = zoo.get("resnet18")
    executable, lineage = relaytrace.build(from_torch(module, (example,)), "llvm", mixed_precision="float16")
    default = compare(executable, lineage, module, [example.numpy()])  # fp16 compute and accumulators
    assert (default.atol, default.rtol) == (5e-2, 5e-2) and default.first_beyond is None
    assert "the default for float16 accumulating in float16" in default.summary()
    assert default.precision == "float16, accumulating in float16"
    fp16 = compare(executable, lineage, module, [example.numpy()], atol=1e-4, rtol=1e-4)  # float32's tolerance
    assert fp16.tolerance == "given" and fp16.worst()[0].tolerance_ratio >= fp16.worst()[-1].tolerance_ratio
    first = fp16.first_beyond
    assert first is not None and first.layer == "conv1"  # the first op ToMixedPrecision converts
    assert "first layer beyond the tolerance: conv1" in fp16.summary()
    rel16 = {e.layer: e.max_rel for e in fp16.layers if e.compared}
    rel32 = {e.layer: e.max_rel for e in fp32.layers if e.compared}
    assert all(rel16[layer] > 100 * rel32[layer] for layer in rel16 if layer in rel32 and rel32[layer] > 0)
    early = statistics.median(v for k, v in rel16.items() if k.startswith("layer1."))
    late = statistics.median(v for k, v in rel16.items() if k.startswith("layer4."))
    print(f"fp16 max rel error, median of layer1: {early:.2e}, of layer4: {late:.2e}")
    assert late > early


def test_a_pass_that_breaks_one_layer_is_named_first():
    """A user pass, traced with the build, scales layer2.0.conv1's weight constant:
    every layer before it stays within, and it is the first beyond."""
    import tvm
    from tvm import relax

    module, example = zoo.get("resnet18", image=64)
    imported = from_torch(module, (example,))
    target = tvm.target.Target("llvm")
    broken_layer = "layer2.0.conv1"  # the only conv with a 128x64x3x3 weight

    @tvm.transform.module_pass(opt_level=0, name="BreakOneConv")
    def break_one_conv(mod, _ctx):
        @relax.expr_functor.mutator
        class Mutator(relax.PyExprMutator):
            def visit_call_(self, call):
                call = super().visit_call_(call)
                if (
                    getattr(call.op, "name", "") == "relax.nn.conv2d"
                    and isinstance(call.args[1], tvm.ir.Constant)
                    and tuple(call.args[1].value.shape) == (128, 64, 3, 3)
                ):
                    broken = relax.const(call.args[1].value.numpy() * 1.01)
                    return relax.Call(call.op, [call.args[0], broken], call.attrs)
                return call

        mutator = Mutator(mod)
        return tvm.IRModule(
            {gv: mutator.visit_expr(f) if isinstance(f, relax.Function) else f for gv, f in mod.functions.items()}
        )

    with relaytrace.trace(model="resnet18", target="llvm", layer_of=imported.layer_of) as handle:
        executable = tvm.compile(
            imported.mod,
            target,
            relax_pipeline=tvm.transform.Sequential([break_one_conv, relax.get_default_pipeline(target)]),
        )
    result = compare(executable, handle.lineage, module, [example.numpy()])
    assert result.first_beyond is not None and result.first_beyond.layer == broken_layer
    before = [e for e in result.layers[: [e.layer for e in result.layers].index(broken_layer)] if e.compared]
    assert before and all(e.status == WITHIN for e in before)


def test_a_nan_in_one_layers_weights_names_the_first_nan_layer():
    import torch

    module, example = zoo.get("resnet18", image=64)
    with torch.no_grad():
        module.layer2[1].conv2.weight[3, 0, 1, 1] = float("nan")
    _, result = _compare(module, example)
    first = result.first_nan
    assert first is not None and first.layer == "layer2.1.conv2" and first.nan > 0
    assert first.reference_nan > 0 and first.status == WITHIN  # NaN at the same places in torch
    order = [e.layer for e in result.layers]
    assert all(not e.nan for e in result.layers[: order.index(first.layer)])
    assert "first layer with NaN/Inf in its compiled output: layer2.1.conv2" in result.summary()


def test_error_statistics_of_one_pair():
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    e = error_of("x", "k#0", ref + [0, 0, 1e-3, 0], ref, atol=1e-4, rtol=1e-4)
    assert e.status == BEYOND and e.max_abs == pytest.approx(1e-3) and e.max_rel == pytest.approx(2.5e-4)
    assert e.tolerance_ratio == pytest.approx(10.0) and 0.99 < e.cosine < 1
    nan = error_of("x", "k#0", np.array([np.nan, 1.0]), np.array([0.5, 1.0]), 1e-4, 1e-4)
    assert nan.status == BEYOND and nan.nan == 1 and nan.max_abs == 0.0  # its finite element agrees
    same = error_of("x", "k#0", np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), 1e-4, 1e-4)
    assert same.status == WITHIN and same.reference_nan == 1
    assert error_of("x", "k#0", np.zeros(3), np.ones(3), 1e-4, 1e-4).cosine == 0.0


def test_cli_compare_writes_its_outputs_and_the_report_shows_them(tmp_path, tiny_out):
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(["--quiet", "compare", "tests/fixtures/tiny_model.py:make", "--out", out])
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.json", "errors.svg", "lineage.json"]
    result = Comparison.load(out / "compare.json")
    assert_holds_to_schema(json.loads((out / "compare.json").read_text()), "compare.json")
    assert "no layer beyond the tolerance" in stdout and result.summary().splitlines()[0] in stdout
    rows = (out / "compare.csv").read_text().splitlines()
    assert rows[0].startswith("layer,status,max abs") and len(rows) == len(result.layers) + 1
    assert "atol 0.0001, rtol 0.0001, the default for float32" in stdout
    assert result.tolerance == "the default for float32"
    routes = [row["read"] for row in csv.DictReader((out / "compare.csv").open())]
    assert routes == [e.route or "" for e in result.layers] and "direct" in routes
    svg = (out / "errors.svg").read_text()
    assert "max abs" in svg
    fused = [e for e in result.layers if e.status == FUSED]  # each names the call that holds its value
    assert fused and all(f"fused: {e.site}" in svg for e in fused)
    code, stdout, err = run_cli(
        ["render", tiny_out, "--format", "html", "--compare", out / "compare.json", "--out", tmp_path / "r.html"]
    )
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    compared = next(e for e in result.layers if e.compared)
    inlined = page.split('<script type="application/json" id="relaytrace-data">', 1)[1].split("</script>", 1)[0]
    errors = dict(json.loads(inlined)["errors"])  # the page's data: [layer, error] pairs
    assert errors[compared.layer]["status"] == "within"
    other = json.loads((out / "compare.json").read_text())
    other["model"] = "another"
    (tmp_path / "other.json").write_text(json.dumps(other))
    code, _, err = run_cli(
        ["render", tiny_out, "--format", "html", "--compare", tmp_path / "other.json", "--out", tmp_path / "r2.html"]
    )
    assert code == 1 and "compares 'another', not this lineage's model" in err and not (tmp_path / "r2.html").exists()
    emptied = {**json.loads((out / "compare.json").read_text()), "layers": []}  # issue 54: was read as none compared
    (tmp_path / "empty.json").write_text(json.dumps(emptied))
    code, _, err = run_cli(
        ["render", tiny_out, "--format", "html", "--compare", tmp_path / "empty.json", "--out", tmp_path / "r3.html"]
    )
    assert code == 1 and f"has no row for {len(result.layers)} of the {len(result.layers)} layers of main" in err, err
    assert not (tmp_path / "r3.html").exists() and err.count("\n") == 1
    code, _, err = run_cli(
        ["render", tiny_out, "--format", "svg", "--compare", out / "compare.json", "--out", tmp_path / "r.svg"]
    )
    assert code == 2 and "--compare shows each layer's error in the HTML report" in err
    assert "numerics (in each layer's pane)" in page
    aarch64 = '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'
    for bad, says in (
        (["--accumulate", "float16"], "--accumulate applies to --precision fp16"),
        (["--atol", "-1"], "--atol: '-1' must be at least 0"),
        (["--target", aarch64], "does not run on this machine"),
    ):
        code, _, err = run_cli(["compare", "tests/fixtures/tiny_model.py:make", *bad])
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_an_onnx_model_is_compared_against_onnx_reference(tmp_path):
    """The reference of an ONNX build is the ONNX model itself, run by onnx.reference:
    layers (torch module paths, from the exporter's scopes) within, fused ones said."""
    from relaytrace.frontends.onnx import export_torch_to_onnx, from_onnx

    module, example = zoo.get("resnet18", image=64)
    path = export_torch_to_onnx(module, (example,), tmp_path / "r18.onnx")
    executable, lineage = relaytrace.build(from_onnx(path), "llvm")
    result = compare(executable, lineage, str(path), [example.numpy()])
    compared = [e for e in result.layers if e.compared]
    assert len(compared) >= 20 and all(e.status == WITHIN for e in compared)
    assert "layer4.1.relu@1" in {e.layer for e in compared}
    assert all(lineage.site_by_label(e.site) for e in result.layers if e.status == FUSED)


def _split_model():
    """A conv, a module ending in ``chunk`` (an op of two outputs), a difference in the
    root forward."""
    import torch

    class Split(torch.nn.Module):
        def forward(self, x):
            return torch.chunk(x * 2.0, 2, dim=1)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.sp = Split()

        def forward(self, x):
            a, b = self.sp(self.conv(x))
            return torch.tanh(a - b)

    torch.manual_seed(0)
    return Model().eval(), torch.randn(1, 8, 8, 8)  # C = H = W: a layout change keeps the shape


def test_an_op_of_two_outputs_is_compared_output_for_output():
    module, example = _split_model()
    _, unfused = _compare(module, example, pipeline="unfused")
    sp = next(e for e in unfused.layers if e.layer == "sp")
    assert sp.status == WITHIN and sp.max_abs < 1e-5 and "2 outputs compared together" in sp.note
    _, fused = _compare(module, example)
    by_layer = {e.layer: e for e in fused.layers}
    assert all(e.status != BEYOND for e in fused.layers)
    # conv's kernel writes the doubling inside sp, which is no layer's output: said so, not "writes sp's output"
    assert by_layer["conv"].status == FUSED and "not a layer's output compared there" in by_layer["conv"].note


def test_a_layout_changed_build_is_not_compared_as_if_it_were_not():
    """NHWC data compared with NCHW data would be garbage even when the shapes agree."""
    module, example = _split_model()
    _, result = _compare(module, example, pipeline="unfused", convert_layout=NHWC)
    conv = next(e for e in result.layers if e.layer == "conv")
    assert conv.status == "not comparable" and "ConvertLayout" in conv.note
    assert all(e.status != BEYOND for e in result.layers)


def test_atol_zero_and_an_all_zero_reference_stay_defined(tmp_path):
    e = error_of("x", "k#0", np.array([0.0, 1.0]), np.array([0.0, 1.0]), atol=0.0, rtol=1e-3)
    assert e.status == WITHIN and e.tolerance_ratio == 0.0
    e = error_of("x", "k#0", np.array([1e-9, 1.0]), np.array([0.0, 1.0]), atol=0.0, rtol=1e-3)
    assert e.status == BEYOND and e.tolerance_ratio is None  # a difference where nothing is tolerated
    zero = error_of("y", "k#0", np.ones(3), np.zeros(3), 1e-4, 1e-4)
    assert zero.status == BEYOND and zero.max_rel is None and zero.max_abs == 1.0
    partly = error_of("z", "k#0", np.array([np.nan, 1.5]), np.array([np.nan, 1.0]), 1e-4, 1e-4)
    assert partly.status == BEYOND and partly.max_abs == pytest.approx(0.5)  # the finite part is judged
    result = Comparison("m", "main", 0.0, 1e-3, "float32 as built", (e, zero, partly))
    result.save(tmp_path / "c.json")
    assert Comparison.load(tmp_path / "c.json") == result
    assert json.loads((tmp_path / "c.json").read_text())["first_beyond"] == "x"


@pytest.fixture(scope="module")
def net_builds():
    from .fixtures.compare_models import net

    module, example = net()
    imported = from_torch(module, (example,))
    return module, example, {p: relaytrace.build(imported, "llvm", pipeline=p) for p in ("unfused", "fused")}


@pytest.mark.parametrize("pipeline", ["unfused", "fused"])
def test_a_perturbed_layer_is_the_first_beyond_and_nothing_is_beyond_unperturbed(net_builds, pipeline):
    """Each layer with weights, perturbed by 5 % in a copy of the reference, is the first
    layer beyond the tolerance; the reference as it is puts none beyond. In the unfused
    build every layer is compared (batch norm on its first output, the layers that end
    in a reshape on the value it reshapes). In the fused one each batch norm runs in one
    kernel with its ReLU, which never writes its value: alone, its error first shows at
    the ReLU; with a rebuild that writes the batch norms out (``observe``, differing in
    those kernels only) it is named itself."""
    from relaytrace.analysis.observe import build_observed
    from relaytrace.model.numerics import OBSERVED, with_observed

    from .fixtures.compare_models import WEIGHTED, perturbed

    module, example, builds = net_builds
    executable, lineage = builds[pipeline]
    clean = compare(executable, lineage, module, [example.numpy()])
    by_layer = {e.layer: e for e in clean.layers}
    assert clean.first_beyond is None and set(WEIGHTED) <= set(by_layer)
    fused = [e.layer for e in clean.layers if e.status == FUSED]
    assert set(fused) == (set() if pipeline == "unfused" else {"b1.bn", "b2.bn"})
    assert all(e.compared for e in clean.layers if e.layer not in fused), [e for e in clean.layers if not e.compared]
    if fused:
        kept_executable, kept = build_observed(from_torch(module, (example,)), lineage.build.options, "llvm", fused)

        def runs(build):  # each call site as the set of layers whose ops it runs
            return [frozenset(build.origins[o].layer for o in s.origin_ids) for s in build.call_sites]

        for name in fused:  # the batch norm's own kernel now, apart from its ReLU
            assert frozenset({name}) in runs(kept), runs(kept)
        held = set().union(*(r for r in runs(lineage) if r & set(fused)))  # the layers of the kernels split
        rest = [r for r in runs(kept) if not r & held and r & set(by_layer)]  # not the copies' own sites
        assert [r for r in runs(lineage) if not r & held] == rest  # every other kernel as built
        merged = with_observed(clean, compare(kept_executable, kept, module, [example.numpy()]), fused)
        assert all(e.compared for e in merged.layers) and merged.first_beyond is None
        assert all(e.route == OBSERVED and by_layer[e.layer].site in e.note for e in merged.layers if e.layer in fused)
    for layer in WEIGHTED:
        reference = perturbed(module, layer)
        result = compare(executable, lineage, reference, [example.numpy()])
        expected = layer.replace(".bn", ".act") if layer in fused else layer
        assert result.first_beyond is not None and result.first_beyond.layer == expected, (layer, result.summary())
        assert all(
            e.status == WITHIN for e in result.layers[: [e.layer for e in result.layers].index(expected)] if e.compared
        )
        if fused:
            result = with_observed(result, compare(kept_executable, kept, reference, [example.numpy()]), fused)
            assert result.first_beyond.layer == layer, (layer, result.summary())
    if pipeline == "unfused":
        bn = by_layer["b1.bn"]
        assert bn.route == "direct" and "1 of the kernel's 3 outputs" in bn.note
        assert (
            by_layer["attn.qkv"].route == "through data movement" and "element for element" in by_layer["attn.qkv"].note
        )


def test_every_layer_of_a_tiny_llama_that_a_kernel_writes_is_compared():
    """A Linear on 3-D input ends in a reshape that runs in the next kernel (with RoPE,
    with the GQA repeat) or as a VM builtin: its value is read where its matmul's kernel
    writes it. What stays uncompared is the SiLU, fused with the gate product, and the
    ops the build folded to constants (the mask, the rotary tables)."""
    from .fixtures.hf_models import llama

    module, example = llama()
    lineage, result = _compare(module, example)
    assert result.first_beyond is None
    layers = {e.layer: e for e in result.layers}
    blocks = [name for name in layers if name.startswith("m.model.layers.") and name.count(".") == 3]
    assert len(blocks) == 2
    for block in blocks:
        for sub in (
            "input_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn",
            "self_attn.o_proj",
            "post_attention_layernorm",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp",
            "mlp.down_proj",
        ):
            assert layers[f"{block}.{sub}"].compared, layers[f"{block}.{sub}"]
        act = layers[f"{block}.mlp.act_fn"]
        assert act.status == FUSED and f"{block}.mlp's output" in act.note
    assert layers["m.lm_head"].compared and layers["m.model.norm"].compared
    uncompared = [e for e in result.layers if not e.compared and e.status != FUSED]
    assert all(e.status == "no output" and "eliminated" in e.note for e in uncompared), uncompared


def test_cli_compare_observe_rebuilds_with_a_fused_layer_written_out(tmp_path):
    """``--observe LAYER``: the batch norm the fused build keeps inside its ReLU's kernel
    is compared in a rebuild that writes it out, and the row says so; a layer the model
    does not have is refused before anything is built."""
    model = "tests/fixtures/compare_models.py:net"
    code, stdout, err = run_cli(["--quiet", "compare", model, "--observe", "nope"])
    assert code != 0 and "unknown layer 'nope'" in err and "building" not in err
    code, stdout, err = run_cli(["--quiet", "compare", model, "--observe", "b1.bn,fc", "--out", tmp_path / "o"])
    assert code == 0, err
    rows = {row["layer"]: row for row in csv.DictReader((tmp_path / "o" / "compare.csv").open())}
    assert rows["b1.bn"]["status"] == "within" and rows["b1.bn"]["read"] == "observed build"
    assert "differ in that kernel only" in rows["b1.bn"]["note"] and rows["b2.bn"]["status"] == "fused"
    # fc is compared in the build itself and keeps its row; the rebuild copied values of two shapes, one copy each
    assert rows["fc"]["read"] == "direct"
    assert "1 from a rebuild that writes them out" in stdout


def test_a_tiny_llama_of_symbolic_length_is_compared_at_another_length():
    """Built with a symbolic sequence length and run at 12 tokens (8 in the export's
    example): every Linear and norm of each block is compared and within. Its
    reference must be exported with the same dynamic_shapes: exported without them the
    graph names other nodes (``mul_27`` is no node of it), and compare refuses it
    rather than comparing layers with another program's values."""
    import torch

    from relaytrace.errors import RelaytraceError

    from .fixtures.hf_models import llama

    module, example = llama()
    dynamic = {"input_ids": {1: torch.export.Dim("seq", min=2, max=32)}}
    executable, lineage = relaytrace.build(from_torch(module, (example,), dynamic_shapes=dynamic), "llvm")
    ids = torch.randint(0, 128, (1, 12)).numpy()
    result = compare(executable, lineage, module, [ids], dynamic_shapes=dynamic)
    layers = {e.layer: e for e in result.layers}
    assert result.first_beyond is None, result.summary()
    for block in ("m.model.layers.0", "m.model.layers.1"):
        for sub in (
            "input_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "post_attention_layernorm",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "",
        ):
            e = layers[f"{block}.{sub}".rstrip(".")]
            assert e.compared and e.shape[:2] == (1, 12), e
    with pytest.raises(RelaytraceError, match="exports to another program than the build was imported from"):
        compare(executable, lineage, module, [ids])


def _overflowing():
    """Three Linears; the middle one's weights scaled so that its outputs pass float16's
    largest value (65504) while the first's stay small."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.big, self.fc2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

        def forward(self, x):
            return self.fc2(self.big(self.fc1(x)))

    torch.manual_seed(0)
    model = Model().eval()
    with torch.no_grad():
        model.big.weight.mul_(1e6)
    return model, torch.randn(4, 16)


def test_a_layer_that_overflows_float16_is_named_first_and_ranked_worst():
    module, example = _overflowing()
    executable, lineage = relaytrace.build(from_torch(module, (example,)), "llvm", mixed_precision="float16")
    result = compare(executable, lineage, module, [example.numpy()])
    by_layer = {e.layer: e for e in result.layers}
    assert by_layer["fc1"].status == WITHIN and result.tolerance == "the default for float16 accumulating in float16"
    big = by_layer["big"]
    assert result.first_beyond.layer == "big" and big.nan + big.inf > 0 and big.reference_nan == 0
    assert result.worst()[0].layer == "big"
    assert "first layer with NaN/Inf in its compiled output: big" in result.summary()
