"""Models written the way Hugging Face ``transformers`` writes them (dropout, ``.to()``,
masks, RoPE, grouped-query attention), tiny and with random weights: every layer named
as torch.export names the module that produced its op, and checked.

The expected layers are read from the exported program itself (each node's innermost
``nn_module_stack`` path), not from relaytrace's mapping.
"""

import pytest

import relaytrace
from relaytrace.model.verification import VERIFIED

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from relaytrace.frontends.onnx import export_torch_to_onnx, from_onnx  # noqa: E402
from relaytrace.frontends.torch import from_torch  # noqa: E402

from .fixtures import hf_models  # noqa: E402

# aten ops that compute nothing in an eval-mode export: their module must own no op
PASS_ON = {"dropout", "_assert_tensor_metadata", "clone", "contiguous", "alias", "detach"}


def _module_paths(module, example) -> set[str]:
    """The innermost module path of every node of the exported program that computes
    (an op of a module's own forward, not of the root wrapper's)."""
    paths = set()
    for node in torch.export.export(module, (example,)).graph.nodes:
        if node.op != "call_function":
            continue
        op = str(getattr(node.target, "__name__", node.target)).split(".")[0]
        same_dtype = op == "to" and node.meta["val"].dtype == node.args[0].meta["val"].dtype
        stack = node.meta.get("nn_module_stack") or {}
        if op not in PASS_ON and not same_dtype and stack and list(stack.values())[-1][0]:
            paths.add(list(stack.values())[-1][0])
    return paths


def _ops(lineage, layer) -> list[str]:
    return sorted(o.short_op for o in lineage.origins.values() if o.kind == "op" and o.layer == layer)


def _site_of(lineage, layer, op):
    """The call site running the op ``op`` of ``layer``, and that the kernel computes it."""
    (oid,) = [o.id for o in lineage.origins.values() if o.layer == layer and o.short_op == op]
    (site,) = [s for s in lineage.call_sites if oid in s.origin_ids]
    assert any(m.ops and op in {o.rsplit(".", 1)[-1] for o in m.ops} for m in lineage.build.kernel_members[site.kernel])
    return site


@pytest.fixture(
    scope="module",
    params=["gpt2", "llama", pytest.param("bert", marks=pytest.mark.slow), pytest.param("vit", marks=pytest.mark.slow)],
)
def built(request):
    module, example = hf_models.MODELS[request.param]()
    _, lineage = relaytrace.build(from_torch(module, (example,), name=request.param), "llvm")
    return request.param, module, example, lineage


def test_every_layer_is_the_module_that_produced_its_ops_and_is_verified(built):
    name, module, example, lineage = built
    v = lineage.verification
    assert v.ok, (v.summary(), v.problems, [c for c in v.sites if c.status != VERIFIED][:3])
    assert lineage.coverage().complete
    assert {c.layer for c in v.layers} == set(lineage.layers())
    modules = {layer for layer in lineage.layers() if layer == "m" or layer.startswith("m.")}
    assert modules == _module_paths(module, example)
    assert not [layer for layer in lineage.layers() if "drop" in layer.rsplit(".", 1)[-1]]


def test_the_ops_each_transformer_writes_are_in_its_own_modules(built):
    name, _, _, lineage = built
    if name == "llama":
        assert _site_of(lineage, "m.model.embed_tokens", "take")
        for block in ("m.model.layers.0", "m.model.layers.1"):
            assert _ops(lineage, block) == ["add", "add"]  # the two residual adds LlamaDecoderLayer writes
            assert _ops(lineage, f"{block}.input_layernorm").count("add") == 1  # its own variance + eps
        assert "take" not in _ops(lineage, "m.model.layers.0.input_layernorm")
    elif name == "gpt2":
        assert _site_of(lineage, "m.transformer.wte", "take")
        assert "take" in _ops(lineage, "m.transformer.wpe")  # of constant positions: folded by FoldConstant
        assert "add" in _ops(lineage, "m.transformer")  # inputs_embeds + position_embeds, in GPT2Model.forward
    elif name == "bert":
        assert _site_of(lineage, "m.embeddings.LayerNorm", "layer_norm")
    elif name == "vit":
        assert _site_of(lineage, "m.embeddings.patch_embeddings.projection", "conv2d")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "vit"])
def test_onnx_exports_of_transformers_verify_with_the_same_layers(name, tmp_path):
    module, example = hf_models.MODELS[name]()
    path = export_torch_to_onnx(module, (example,), tmp_path / f"{name}.onnx")
    _, lineage = relaytrace.build(from_onnx(path), "llvm")
    v = lineage.verification
    assert v.ok, (v.summary(), v.problems, [c for c in v.sites if c.status != VERIFIED][:3])
    expected = {
        "llama": "m.model.embed_tokens",
        "gpt2": "m.transformer.wte",
        "bert": "m.embeddings.LayerNorm",
        "vit": "m.embeddings.patch_embeddings.projection",
    }[name]
    assert expected in lineage.layers()
    assert not [layer for layer in lineage.layers() if "dropout" in layer]


def test_a_layer_moved_to_the_next_node_is_flagged():
    """A deliberately mis-mapped frontend: every node's ops billed to the node after it
    (what naming a value after the node it next passes through does). Verification
    must flag it with evidence of its own: the program's nodes and what each can
    produce."""
    from relaytrace.frontends.common import ImportedModel

    from .fixtures.repros import noop_owner

    module, example = noop_owner()
    right = from_torch(module, (example,))
    labels = list(dict.fromkeys(right.layers.values()))
    shifted = {label: labels[min(i + 1, len(labels) - 1)] for i, label in enumerate(labels)}
    wrong = ImportedModel(right.mod, "shifted", {h: shifted[v] for h, v in right.layers.items()}, program=right.program)
    _, lineage = relaytrace.build(wrong, "llvm")
    v = lineage.verification
    assert not v.ok
    assert any("computes, but no op is billed to it" in p for p in v.problems)
    suspect = [c for c in v.sites if c.status != VERIFIED]
    assert suspect and any("cannot produce" in r for c in suspect for r in c.reasons)
    assert {c.layer for c in v.layers if c.status != VERIFIED} >= {"emb", "norm"}
    _, good = relaytrace.build(right, "llvm")
    assert good.verification.ok
