"""PyTorch and ONNX imports of the zoo: layer names, numerics, coverage, stable ids."""

import numpy as np
import pytest
import tvm
from tvm import relax

import relaytrace
from relaytrace import zoo
from relaytrace.build import NHWC
from relaytrace.errors import RelaytraceError
from relaytrace.frontends.onnx import export_torch_to_onnx, from_onnx, torch_layer_name
from relaytrace.frontends.torch import from_torch
from relaytrace.model.origin import OP

torch = pytest.importorskip("torch")
PARAM_LEAVES = (torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm2d)


def _param_leaves(module, kinds=PARAM_LEAVES):
    return {name for name, m in module.named_modules() if isinstance(m, kinds)}


def _check_model(name, frontend, tmp_path):
    module, example = zoo.get(name)
    if frontend == "torch":
        imported = from_torch(module, (example,), name=name)
    else:
        imported = from_onnx(export_torch_to_onnx(module, (example,), tmp_path / f"{name}.onnx"))
    builds = {
        label: relaytrace.build(imported, "llvm", pipeline=pipe, convert_layout=layout)
        for label, pipe, layout in (("fused", "fused", None), ("unfused", "unfused", None), ("nhwc", "fused", NHWC))
    }
    executable, lineage = builds["fused"]
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(example.numpy())).numpy()
    with torch.no_grad():
        np.testing.assert_allclose(out, module(example).numpy(), rtol=1e-4, atol=1e-4)
    for label, (_, lin) in builds.items():
        cov = lin.coverage()
        assert cov.complete and not cov.unresolved and not lin.journal.degraded, (label, cov)
    ids = [{o.id for o in lin.origins.values() if o.kind == OP} for _, lin in builds.values()]
    assert ids[0] == ids[1] == ids[2]
    layers = lineage.layers()
    if frontend == "torch":
        expected = _param_leaves(module)
        in_kernels = {lineage.origins[o].layer for s in lineage.call_sites for o in s.origin_ids}
        for leaf in expected:
            assert leaf in layers, leaf
            assert leaf in in_kernels or any(lineage.origins[o].layer == leaf for o in lineage.eliminated()), leaf
    else:
        # torch.onnx folds BatchNorm into the convolutions before TVM sees the model
        expected = _param_leaves(module, (torch.nn.Conv2d, torch.nn.Linear))
        mapped = {torch_layer_name(layer) for layer in layers}
        assert expected <= mapped, expected - mapped
        for layer in layers:
            if torch_layer_name(layer) in expected:
                assert lineage.kernels_of(layer), layer
    return lineage


@pytest.mark.parametrize("frontend", ["torch", "onnx"])
def test_resnet18(frontend, tmp_path):
    lineage = _check_model("resnet18", frontend, tmp_path)
    conv = "layer2.0.conv1"  # ONNX exported by torch: named by module path too
    assert [lineage.origins[s.anchor].layer for s in lineage.kernels_of(conv)] == [conv]


@pytest.mark.slow
@pytest.mark.parametrize("frontend", ["torch", "onnx"])
@pytest.mark.parametrize(
    "name",  # mobilenet_v2's and vgg16's builds through both frontends are held to their goldens too
    ["resnet50", pytest.param("mobilenet_v2", marks=pytest.mark.heavy), pytest.param("vgg16", marks=pytest.mark.heavy)],
)
def test_zoo_model(name, frontend, tmp_path):
    _check_model(name, frontend, tmp_path)


def test_torch_layer_names_follow_module_paths_and_repeated_calls():
    module, example = zoo.get("resnet18")
    imported = from_torch(module, (example,))
    _, lineage = relaytrace.build(imported, "llvm")
    layers = set(lineage.layers())
    assert {"conv1", "bn1", "layer1.0.relu", "layer1.0.relu@1", "layer1.0", "fc"} <= layers
    ops = {o.source_op for o in lineage.origins.values() if o.layer == "layer1.0.conv1"}
    assert ops == {"convolution"}


def test_torch_and_onnx_layer_names_correspond(tmp_path):
    module, example = zoo.get("resnet18")
    torch_layers = set(relaytrace.build(from_torch(module, (example,)), "llvm")[1].layers())
    onnx_model = from_onnx(export_torch_to_onnx(module, (example,), tmp_path / "r18.onnx"))
    onnx_layers = set(relaytrace.build(onnx_model, "llvm")[1].layers())
    mapped = {torch_layer_name(n, known=torch_layers) for n in onnx_layers}
    convs = _param_leaves(module, (torch.nn.Conv2d, torch.nn.Linear))
    assert convs <= mapped & torch_layers
    assert "layer1.0.relu@1" in mapped and "layer1.0" in mapped


@pytest.mark.parametrize(
    "onnx_name, known, torch_name",
    [
        ("/layer1/layer1.0/conv1/Conv", None, "layer1.0.conv1"),
        ("/layer2/layer2.0/downsample/downsample.0/Conv", None, "layer2.0.downsample.0"),
        ("/layer1/layer1.0/relu_1/Relu", {"layer1.0.relu"}, "layer1.0.relu@1"),
        ("/layer1/layer1.0/relu_1/Relu", None, "layer1.0.relu_1"),  # nothing says relu_1 is relu again
        ("/conv_2/Conv", {"conv_1", "conv_2"}, "conv_2"),
        ("/features/features.2/conv/conv.0/conv.0.0/Conv", None, "features.2.conv.0.0"),
        ("/classifier/classifier.6/Gemm", None, "classifier.6"),
        ("/c@1/Relu", None, "c@1@0"),  # a module named c@1, not c's second call
        ("/Flatten", None, "Flatten"),
    ],
)
def test_onnx_to_torch_name_rule(onnx_name, known, torch_name):
    assert torch_layer_name(onnx_name, known=known) == torch_name


class _UserNames(torch.nn.Module):
    """Modules named as users name them: ``conv_1`` and ``conv_2`` (no ``conv``), ``a@b``
    (an ``@`` in the name, called twice), ``c@1`` (a name that reads like a call) and
    ``relu`` and ``fc`` called twice, whose later calls the legacy exporter scopes
    ``relu_1`` and ``fc_1``."""

    def __init__(self):
        super().__init__()
        self.conv_1, self.conv_2 = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 3, padding=1)
        self.relu = torch.nn.ReLU()
        self.add_module("a@b", torch.nn.Conv2d(4, 4, 1))
        self.add_module("c@1", torch.nn.ReLU())
        self.pool, self.flat, self.fc = torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 4)

    def forward(self, x):
        x = self.relu(self.conv_2(self.relu(self.conv_1(x))))
        at = getattr(self, "a@b")
        x = at(getattr(self, "c@1")(at(x)))
        return self.fc(self.fc(self.flat(self.pool(x))))


USER_LAYERS = {"conv_1", "relu", "conv_2", "relu@1", "a@b", "c@1@0", "a@b@1", "pool", "flat", "fc", "fc@1"}


@pytest.fixture(scope="module")
def user_named_runs(tmp_path_factory):
    """``_UserNames`` built and profiled once through torch and once through ONNX."""
    torch.manual_seed(0)
    module, example = _UserNames().eval(), torch.randn(1, 3, 8, 8)
    onnx_path = export_torch_to_onnx(module, (example,), tmp_path_factory.mktemp("names") / "names.onnx")
    runs = {}
    for frontend, imported in (("torch", from_torch(module, (example,))), ("onnx", from_onnx(onnx_path))):
        executable, lineage = relaytrace.build(imported, "llvm")
        runs[frontend] = lineage, relaytrace.profile(executable, lineage, [example.numpy()], repeat=1)
    return runs


def test_module_names_are_layers_as_written_and_a_call_suffix_cannot_collide(user_named_runs):
    lineage, _ = user_named_runs["torch"]
    assert set(lineage.layers()) == USER_LAYERS
    assert [s.label for s in lineage.kernels_of("a@b")] != [s.label for s in lineage.kernels_of("a@b@1")]
    assert lineage.kernels_of("c@1") == lineage.kernels_of("c@1@0")  # the module as its user names it


def test_an_onnx_name_ending_in_n_is_a_repeated_call_only_where_the_model_says_so(user_named_runs):
    from relaytrace.analysis import diff

    lineage, _ = user_named_runs["onnx"]
    assert set(lineage.layers()) == USER_LAYERS
    rows = diff.compare(*user_named_runs["torch"], *user_named_runs["onnx"], by_layer=True)
    assert {r.layer: r.match for r in rows if r.match.startswith("only")} == {}
    assert {r.layer for r in rows} == USER_LAYERS


def test_build_takes_torch_modules_directly():
    module, example = zoo.get("resnet18", image=64)
    with pytest.raises(RelaytraceError, match="example_args"):
        relaytrace.build(module)
    _, lineage = relaytrace.build(module, "llvm", example_args=(example,), model="r18")
    assert lineage.build.model == "r18" and "layer4.1.conv2" in lineage.layers()


class _Unexportable(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow
            return x + 1
        return x - 1


def test_unexportable_module_names_module_and_error(tmp_path):
    with pytest.raises(RelaytraceError, match=r"torch.export could not export _Unexportable.*GuardOnDataDependent"):
        from_torch(_Unexportable(), (torch.randn(2),))
    assert list(tmp_path.iterdir()) == []


def test_bad_onnx_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf")
    with pytest.raises(RelaytraceError, match="not a valid ONNX model"):
        from_onnx(bad)
    with pytest.raises(RelaytraceError, match="no ONNX file"):
        from_onnx(tmp_path / "missing.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


def test_zoo_rejects_unknown_models():
    with pytest.raises(RelaytraceError, match="resnet50"):
        zoo.get("resnet51")


def test_zoo_state_dict_has_torchvision_shapes():
    module, _ = zoo.get("resnet50")
    sd = module.state_dict()
    assert sd["conv1.weight"].shape == (64, 3, 7, 7)
    assert sd["layer1.0.downsample.0.weight"].shape == (256, 64, 1, 1)
    assert sd["layer4.2.conv3.weight"].shape == (2048, 512, 1, 1)
    assert sd["fc.weight"].shape == (1000, 2048)
    mb, _ = zoo.get("mobilenet_v2")
    msd = mb.state_dict()
    assert msd["features.1.conv.0.0.weight"].shape == (32, 1, 3, 3)
    assert msd["features.18.0.weight"].shape == (1280, 320, 1, 1)
    assert msd["classifier.1.weight"].shape == (1000, 1280)
    vgg, _ = zoo.get("vgg16")
    assert vgg.state_dict()["classifier.0.weight"].shape == (4096, 25088)
    assert vgg.state_dict()["features.28.weight"].shape == (512, 512, 3, 3)


def test_onnx_from_the_dynamo_exporter_is_named_by_torch_module_paths(tmp_path):
    module, example = zoo.get("resnet18", image=64)
    path = tmp_path / "r18.onnx"
    torch.onnx.export(module.eval(), (example,), path, dynamo=True, verbose=False)
    _, lineage = relaytrace.build(from_onnx(path, name="r18"), "llvm")
    assert lineage.coverage().complete
    torch_layers = set(relaytrace.build(from_torch(module, (example,)), "llvm")[1].layers())
    onnx_layers = set(lineage.layers())
    # an op of the root module's own forward: torch names it after the user's program
    # (torch.flatten's node), the exporter's ONNX after the decomposed one (view)
    assert "flatten" in torch_layers and onnx_layers - torch_layers == {"view"}, onnx_layers - torch_layers
    assert {"layer1.0.relu", "layer1.0.relu@1", "layer4.1", "fc"} <= onnx_layers
    # the exporter fused each convolution into the BatchNorm after it, under the BatchNorm's scope
    ops = {o.short_op for o in lineage.origins.values() if o.layer == "layer1.0.bn1"}
    assert "conv2d" in ops and "batch_norm" not in ops
    kept = set(relaytrace.build(from_onnx(path, layer_names="onnx"), "llvm")[1].layers())
    assert "node_add" in kept and "layer1.0.relu" not in kept


def test_with_batch_norm_kept_every_torch_layer_of_resnet18_has_its_onnx_counterpart(tmp_path):
    from relaytrace.analysis import diff

    module, example = zoo.get("resnet18", image=64)
    path = export_torch_to_onnx(module, (example,), tmp_path / "r18.onnx", fold_batch_norm=False)
    runs = []
    for imported in (from_torch(module, (example,), name="r18"), from_onnx(path, name="r18")):
        executable, lineage = relaytrace.build(imported, "llvm")
        runs += [lineage, relaytrace.profile(executable, lineage, [example.numpy()], repeat=1)]
    rows = diff.compare(*runs, by_layer=True)
    unmatched = {r.layer: r.match for r in rows if r.match not in ("same ops", "different ops")}
    assert unmatched == {"flatten": "only in A", "Flatten": "only in B"}  # a root op: its torch.export node vs ONNX op
    modules = {n for n, _ in module.named_modules() if n}
    assert {r.layer for r in rows if r.match == "same ops"} >= {n for n in modules if "bn" in n or "conv" in n}


def test_origins_say_where_in_the_users_code_they_came_from(tmp_path):
    """torch: the line of the user's forward that made each op (not torch's own frames);
    ONNX: the node. Shown per layer (``Lineage.sources``) and in query."""
    from pathlib import Path

    from tests.fixtures.tiny_model import make

    module, example = make()
    source = Path(__file__).parent / "fixtures" / "tiny_model.py"
    lines = source.read_text().splitlines()
    _, lineage = relaytrace.build(from_torch(module, (example,), name="tiny"), "llvm")
    sources = lineage.sources()
    for layer, needle in (("conv1", "self.conv1("), ("conv2", "self.conv2("), ("fc", "self.fc(")):
        (where,) = sources[layer]
        path, line = where.rsplit(":", 1)
        assert Path(path) == source and needle in lines[int(line) - 1], (layer, where)
    _, onnx_lineage = relaytrace.build(from_onnx(export_torch_to_onnx(module, (example,), tmp_path / "t.onnx")), "llvm")
    conv_nodes = {s for layer, found in onnx_lineage.sources().items() if "conv" in layer for s in found}
    assert conv_nodes and all(s.startswith("onnx node ") for s in conv_nodes)


def test_onnx_export_keeps_a_dim_symbolic(tmp_path):
    """``export_torch_to_onnx(dynamic_shapes=)``: one ONNX graph, one build for every length (issue 33)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from relaytrace.errors import UsageError
    from relaytrace.frontends.onnx import export_torch_to_onnx, from_onnx

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.relu(self.fc(x))

    example = (torch.randn(1, 5, 8),)
    path = export_torch_to_onnx(
        Net(), example, tmp_path / "net.onnx", dynamic_shapes={"x": {1: torch.export.Dim("seq")}}
    )
    script = from_onnx(path).mod["main"].script()
    assert 'x: R.Tensor((1, seq, 8), dtype="float32")' in script
    with pytest.raises(UsageError, match="forward does not take.*its inputs: x"):
        export_torch_to_onnx(Net(), example, tmp_path / "bad.onnx", dynamic_shapes={"tokens": {1: "seq"}})
