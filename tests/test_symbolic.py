"""Symbolic lengths through fusion, on real builds: tiny GPT-2 and LLaMA-style models
(``transformers`` configs, random weights) with a symbolic sequence length, and
``tvm.relax.frontend.nn`` decode steps with a symbolic past length. Each verifies
completely (every call site, no broken invariant, nothing "eliminated" by a fusion
pass), runs each op at a kernel that computes it, and is attributed at every site at
two lengths. Static lengths verified before; these did not (issue 25)."""

import math

import numpy as np
import pytest

import relaytrace
from relaytrace.analysis.report import make_report
from relaytrace.model.origin import OP
from relaytrace.model.profile import KERNEL
from relaytrace.model.verification import FUSION_PASSES

from .conftest import run_vm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


class LogitsOf(torch.nn.Module):
    """``forward(input_ids) -> logits`` of a causal LM, without a cache. The attention
    mask is given, all ones: without one, transformers looks for packed sequences in
    the positions with a bool ``cumsum``, which TVM cannot build (DispatchSortScan
    refuses it with a symbolic length, LLVM codegen with a static one)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits


def _gpt2(attn):
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, attn_implementation=attn
    )
    return transformers.GPT2LMHeadModel(config)


def _llama(attn):
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        attn_implementation=attn,
    )
    return transformers.LlamaForCausalLM(config)


def _torch_build(make, attn):
    from relaytrace.frontends.torch import from_torch

    torch.manual_seed(0)
    module = LogitsOf(make(attn).eval())
    seq = torch.export.Dim("seq", min=2, max=32)
    imported = from_torch(
        module,
        (torch.randint(0, 128, (1, 8)),),
        name=f"{make.__name__[1:]}_{attn}",
        dynamic_shapes={"input_ids": {1: seq}},
    )
    return module, relaytrace.build(imported, "llvm", pipeline="fused")


def _assert_verified(lineage):
    check = lineage.verification
    assert check.ok, (check.summary(), [s for s in check.sites if s.status != "verified"][:3], check.problems[:3])
    assert lineage.coverage().complete and lineage.journal.degraded == ()
    assert not [oid for oid, by in lineage.journal.eliminated_by.items() if by in FUSION_PASSES]


def _ops_at_sites(lineage) -> set[tuple[str, str]]:
    """(layer, op) of every model op that runs at a kernel call site."""
    return {
        (lineage.origins[o].layer, lineage.origins[o].short_op)
        for s in lineage.call_sites
        for o in s.origin_ids
        if lineage.origins[o].kind == OP
    }


def _assert_attributed_at_every_site(executable, lineage, inputs):
    prof = relaytrace.profile(executable, lineage, inputs, repeat=1)
    report = make_report(lineage, prof)
    assert {s.key for s in lineage.call_sites} == set(prof.by_site(KERNEL))
    assert sum(r.us for r in report.layers) == pytest.approx(prof.kernel_us, rel=1e-9)
    assert report.categories.suspect_us == report.categories.unverified_us == report.categories.unresolved_us == 0
    assert report.coverage.complete
    return prof


def _assert_runs_like_torch(module, executable, lineage, length):
    ids = torch.randint(0, 128, (1, length))
    prof = _assert_attributed_at_every_site(executable, lineage, [ids.numpy()])
    assert prof.inputs[0][1] == (1, length)
    with torch.no_grad():
        expected = module(ids).numpy()
    np.testing.assert_allclose(run_vm(executable, ids.numpy()), expected, rtol=1e-4, atol=1e-4)


# -- transformers decoders, symbolic sequence length ----------------------------


@pytest.mark.slow  # 10-30 s each, most of it torch.export
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_with_a_symbolic_length_verifies_and_is_attributed_at_two_lengths(attn):
    module, (executable, lineage) = _torch_build(_gpt2, attn)
    _assert_verified(lineage)
    ran = _ops_at_sites(lineage)
    for i in range(2):  # what was "eliminated by FuseOps": the softmax, the scale, the mask add
        attention = f"model.transformer.h.{i}.attn"
        assert {(attention, "softmax"), (attention, "multiply"), (attention, "add")} <= ran
        assert (f"{attention}.c_attn", "matmul") in ran
    # the causal mask, made at run time for the length: where eager attention adds it, sdpa's own where
    assert {("model.transformer", "arange"), ("model.transformer", "less_equal")} <= ran
    assert ("model.transformer" if attn == "eager" else "model.transformer.h.0.attn", "where") in ran
    for length in (5, 11):
        _assert_runs_like_torch(module, executable, lineage, length)


@pytest.mark.slow
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_llama_with_a_symbolic_length_verifies_and_is_attributed_at_two_lengths(attn):
    module, (executable, lineage) = _torch_build(_llama, attn)
    _assert_verified(lineage)
    ran = _ops_at_sites(lineage)
    for i in range(2):
        attention = f"model.model.layers.{i}.self_attn"
        assert (f"{attention}.k_proj", "matmul") in ran and (f"{attention}.q_proj", "matmul") in ran
        assert {(attention, "softmax"), (attention, "multiply"), (attention, "add")} <= ran
    assert {("model.model", "arange"), ("model.model", "less_equal")} <= ran
    assert ("model.model" if attn == "eager" else "model.model.layers.0.self_attn", "where") in ran
    for length in (3, 9):
        _assert_runs_like_torch(module, executable, lineage, length)


# -- tvm.relax.frontend.nn decode steps, symbolic past length --------------------


def _nn_decode_step():
    """shared/repros/nn_decode_symbolic.py: q @ concat(past_k, k)^T * 0.25, ``past``
    symbolic; its scale multiply was "not explained by any origin"."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    class Attention(nn.Module):
        def __init__(self):
            self.q_proj = nn.Linear(16, 16, bias=False)
            self.k_proj = nn.Linear(16, 16, bias=False)

        def forward(self, x, past_k):
            q = op.reshape(self.q_proj(x), (1, 1, 1, 16))
            k = op.concat([past_k, op.reshape(self.k_proj(x), (1, 1, 1, 16))], dim=2)
            return op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * 0.25

    class Model(nn.Module):
        def __init__(self):
            self.attn = Attention()

        def step(self, x: nn.Tensor, past_k: nn.Tensor):
            return self.attn(x, past_k)

    return Model(), {
        "step": {"x": nn.spec.Tensor([1, 1, 16], "float32"), "past_k": nn.spec.Tensor([1, 1, "past", 16], "float32")}
    }


def _nn_two_layer_decoder():
    """Two attention layers over a symbolic past of keys and values, each with a mask
    made at run time for the length (``full``, ``arange``, ``where``: equal values in
    both layers), softmax and a residual add."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    class Attention(nn.Module):
        def __init__(self, hidden=32, heads=2):
            self.heads, self.head_dim = heads, hidden // heads
            self.q_proj = nn.Linear(hidden, hidden, bias=False)
            self.k_proj = nn.Linear(hidden, hidden, bias=False)
            self.v_proj = nn.Linear(hidden, hidden, bias=False)
            self.o_proj = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x, past_k, past_v):
            b, s, h = x.shape

            def heads(t):
                return op.permute_dims(op.reshape(t, (b, s, self.heads, self.head_dim)), [0, 2, 1, 3])

            k = op.concat([past_k, heads(self.k_proj(x))], dim=2)
            v = op.concat([past_v, heads(self.v_proj(x))], dim=2)
            scores = op.matmul(heads(self.q_proj(x)), op.permute_dims(k, [0, 1, 3, 2])) / math.sqrt(self.head_dim)
            shape = (b, self.heads, s, k.shape[2])
            seen = op.less_equal(
                op.broadcast_to(op.arange(0, k.shape[2], dtype="float32"), shape), op.full(shape, 1e9, "float32")
            )
            scores = scores + op.where(seen, op.full(shape, 0.0, "float32"), op.full(shape, -1e4, "float32"))
            att = op.matmul(op.softmax(scores, axis=-1), v)
            return self.o_proj(op.reshape(op.permute_dims(att, [0, 2, 1, 3]), (b, s, h)))

    class Decoder(nn.Module):
        def __init__(self):
            self.norm = nn.RMSNorm(32, axes=-1, bias=False)
            self.layers = nn.ModuleList([Attention(), Attention()])

        def step(self, x, past_k0, past_v0, past_k1, past_v1):
            x = x + self.layers[0](self.norm(x), past_k0, past_v0)
            return x + self.layers[1](x, past_k1, past_v1)

    past = {
        name: nn.spec.Tensor([1, 2, "past", 16], "float32") for name in ("past_k0", "past_v0", "past_k1", "past_v1")
    }
    return Decoder(), {"step": {"x": nn.spec.Tensor([1, 1, 32], "float32"), **past}}


def _nn_inputs(lineage, past):
    rng = np.random.default_rng(past)
    return [
        rng.standard_normal([d if isinstance(d, int) else past for d in shape]).astype(dtype)
        for _, shape, dtype in lineage.build.entries["step"]
    ]


def test_the_nn_decode_repro_verifies_with_its_scale_at_the_matmuls_kernel():
    from relaytrace.frontends.nn import from_nn

    executable, lineage = relaytrace.build(from_nn(*_nn_decode_step(), name="decode_step"), "llvm")
    _assert_verified(lineage)
    (site,) = [s for s in lineage.call_sites if "step:attn/matmul" in s.origin_ids]
    assert {lineage.origins[o].short_op for o in site.origin_ids} == {"matmul", "multiply"}
    for past in (3, 15):
        prof = _assert_attributed_at_every_site(executable, lineage, _nn_inputs(lineage, past))
        assert dict((name, shape) for name, shape, _ in prof.inputs)["past_k"] == (1, 1, past, 16)


def test_an_nn_decoder_with_run_time_masks_keeps_each_layers_ops_at_its_own_kernels():
    from relaytrace.frontends.nn import from_nn

    executable, lineage = relaytrace.build(from_nn(*_nn_two_layer_decoder(), name="decoder"), "llvm")
    _assert_verified(lineage)
    for i in range(2):
        layer = f"layers.{i}"
        (mask_site,) = [s for s in lineage.call_sites if f"step:{layer}/where" in s.origin_ids]
        layers = {lineage.origins[o].layer for o in mask_site.origin_ids if lineage.origins[o].kind == OP}
        assert layers == {layer}  # the other layer's equal full/arange are not here
        ops = {lineage.origins[o].short_op for o in mask_site.origin_ids}
        assert {"full", "arange", "less_equal", "where", "add"} <= ops
    for past in (2, 13):
        _assert_attributed_at_every_site(executable, lineage, _nn_inputs(lineage, past))
