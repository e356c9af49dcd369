"""Kernels that passes other than LegalizeOps / FuseOps / FuseTIR make, verified op for
op: models built by real TVM for llvm through ``zoo.mlc_pipeline`` (a pipeline written as
MLC-LLM writes its own: ``NT_matmul`` by ``call_te``, a dequantize and a matmul kernel
fused into one, PrimFunc attributes cleaned up, DLight's CPU GEMV)."""

from __future__ import annotations

import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.frontend import nn

import relaytrace
from relaytrace.frontends.nn import from_nn
from relaytrace.model.code import check_blocks, code_sites
from relaytrace.model.verification import Status
from relaytrace.render.provenance import provenance
from relaytrace.zoo import mlc_pipeline
from relaytrace.zoo.mlc_llama import llama, mlc_style

BLOCKS = 2
LINEARS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
TRANSPOSED_MATMUL = ("relax.matmul", "relax.permute_dims")


def _build(module, spec, name, pipeline):
    return relaytrace.build(from_nn(module, spec, name=name), "llvm", pipeline=pipeline)[1]


@pytest.fixture(scope="module")
def lineage():
    """The zoo Llama through the pipeline; DLight's GEMV left out (LLVM takes minutes
    over the vectors it makes of the decode's matmuls: ``gemv_lineage`` tries it)."""
    return _build(*llama(layers=BLOCKS), "llama", mlc_pipeline.pipeline(gemv=False))


@pytest.fixture(scope="module")
def quantized_built():
    """(executable, lineage): the Llama as MLC-LLM exports it, q4f16_1 (one block),
    through the pipeline."""
    module, spec = mlc_style(layers=1, quantization="q4f16_1")
    return relaytrace.build(from_nn(module, spec, name="q4"), "llvm", pipeline=mlc_pipeline.pipeline(gemv=False))


@pytest.fixture(scope="module")
def quantized(quantized_built):
    return quantized_built[1]


class _Mlp(nn.Module):
    def __init__(self):
        self.up = nn.Linear(16, 32, bias=False)
        self.down = nn.Linear(32, 16, bias=False)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.down(nn.op.silu(self.up(x)))


@pytest.fixture(scope="module")
def gemv_lineage():
    """A decode-sized MLP through the pipeline by its registered name, DLight's GEMV in."""
    return _build(_Mlp(), {"forward": {"x": nn.spec.Tensor([1, 16], "float32")}}, "mlp", mlc_pipeline.NAME)


def _linear_sites(lineage):
    """layer -> the call sites running its matmul, for every layer that has one."""
    out: dict[str, list] = {}
    for site in lineage.call_sites:
        for oid in site.origin_ids:
            origin = lineage.origins[oid]
            if origin.op == "relax.matmul":
                out.setdefault(origin.layer, []).append(site)
    return out


def _transposing_prim_funcs(lineage, kernel):
    """The member PrimFuncs of ``kernel`` that compute a permute_dims and a matmul both."""
    ops: dict[str, set[str]] = {}
    for member in lineage.build.kernel_members[kernel]:
        ops.setdefault(member.prim_func, set()).update(member.ops)
    return [prim for prim, found in ops.items() if set(TRANSPOSED_MATMUL) <= found]


def _assert_linear_sites(lineage, layers, extra=()):
    """Each of ``layers`` runs its matmul at verified sites whose kernel has a member
    PrimFunc computing the Linear's transpose and matmul, and whose origins are that
    layer's permute_dims and matmul (and ops of ``extra`` kinds)."""
    checks = lineage.verification.by_position()
    sites = _linear_sites(lineage)
    for layer in layers:
        assert sites.get(layer), f"{layer} runs no matmul"
        for site in sites[layer]:
            assert checks[site.position].status == "verified", checks[site.position].reasons
            assert _transposing_prim_funcs(lineage, site.kernel), lineage.build.kernel_members[site.kernel]
            own = sorted(lineage.origins[o].op for o in site.origin_ids if lineage.origins[o].layer == layer)
            assert [op for op in own if not op.startswith(extra)] == list(TRANSPOSED_MATMUL)


def test_every_call_site_of_the_llama_through_an_mlc_style_pipeline_is_verified(lineage):
    verification = lineage.verification
    assert verification.count("verified") == len(lineage.call_sites) > 0, verification.summary()
    assert verification.ok, verification.summary()


def test_each_linear_of_the_llama_runs_in_a_kernel_that_transposes_and_multiplies_for_it(lineage):
    layers = [f"model.layers.{i}.{linear}" for i in range(BLOCKS) for linear in LINEARS] + ["lm_head"]
    _assert_linear_sites(lineage, layers)
    # the kernels call_te made: one PrimFunc computing both ops, alone or fused with a residual add
    kernels = {site.kernel for sites in _linear_sites(lineage).values() for site in sites}
    alone = [k for k in kernels if len(lineage.build.kernel_members[k]) == 2]
    assert alone and all(_transposing_prim_funcs(lineage, k) == [k] for k in alone)
    fused = [k for k in kernels if k not in alone]
    assert fused and all(
        sorted(op for m in lineage.build.kernel_members[k] for op in m.ops) == ["relax.add", *TRANSPOSED_MATMUL]
        for k in fused
    )


def test_a_dequantize_fused_with_its_matmul_is_verified_op_for_op(quantized):
    verification = quantized.verification
    assert verification.count("verified") == len(quantized.call_sites) > 0, verification.summary()
    layers = [f"model.layers.0.{linear}" for linear in LINEARS]
    _assert_linear_sites(quantized, layers, extra="dequantize")
    for sites in (s for layer, s in _linear_sites(quantized).items() if layer in layers):
        for site in sites:  # the weight's dequantize runs in the matmul's kernel, as one of its members
            ops = [quantized.origins[o] for o in site.origin_ids]
            assert [o.layer for o in ops if o.op.startswith("dequantize")] == [ops[0].layer]
            members = quantized.build.kernel_members[site.kernel]
            assert sum(1 for m in members if any(op.startswith("dequantize") for op in m.ops)) == 1


def test_the_code_of_a_kernel_fused_again_lines_up_with_its_members_and_every_block_is_verified(quantized):
    """A dequantize fused with an already fused matmul and add (FuseDequantizeMatmulEwise:
    ``fused_dequantize*_fused_NT_matmul*_add*``) had two members in its code (the two
    kernels fused) and four in the truth, so its blocks did not line up and were
    unverified; each block is now its member op's, the dequantize's read by the matmul."""
    again = {k: c for k, c in quantized.code.kernels.items() if "_fused_NT_matmul" in k and "dequantize" in k}
    assert again
    for name, kernel in again.items():
        truth = [m.prim_func for m in quantized.build.kernel_members[name]]
        assert [m.prim_func for m in kernel.members] == truth
        assert {c.status for c in check_blocks(kernel)} == {"verified"}, name
        dequantize = next(i for i, m in enumerate(kernel.members) if m.prim_func.startswith("dequantize"))
        assert [kernel.members[c].prim_func for c in kernel.members[dequantize].consumers][0].startswith("NT_matmul")
        assert kernel.members[-1].result and not any(m.result for m in kernel.members[:-1])
    statuses = {b.status for k in provenance(quantized).kernels.values() for b in k.blocks}
    assert statuses == {Status.VERIFIED}


def test_kernels_dlight_scheduled_keep_their_members_and_are_verified(gemv_lineage):
    verification = gemv_lineage.verification
    assert verification.count("verified") == len(gemv_lineage.call_sites) == 2, verification.summary()
    _assert_linear_sites(gemv_lineage, ["up", "down"])
    scheduled = [k for k, code in gemv_lineage.code.kernels.items() if "T.vectorized" in code.built]
    assert sorted(scheduled) == sorted({s.kernel for s in gemv_lineage.call_sites})


def test_a_torch_linear_whose_weight_is_a_constant_goes_through_the_pipeline():
    """A new user's find: a torch import binds weights as constants inside the composite,
    and FuseTransposeMatmul failed on it with a KeyError (then called TVM's own failure)."""
    import numpy as np
    import torch
    import tvm

    from relaytrace.frontends.torch import from_torch

    torch.manual_seed(0)
    net, x = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()).eval(), torch.randn(2, 8)
    executable, lineage = relaytrace.build(from_torch(net, (x,)), "llvm", pipeline=mlc_pipeline.pipeline(gemv=False))
    assert lineage.verification.count("verified") == len(lineage.call_sites) == 1
    assert _transposing_prim_funcs(lineage, lineage.call_sites[0].kernel)  # its matmul is an NT_matmul
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    with torch.no_grad():
        np.testing.assert_allclose(out.numpy(), net(x).numpy(), rtol=1e-5, atol=1e-5)


def test_clean_up_tir_attrs_rewrites_each_primfunc_without_the_attributes():
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(relax.op.add(x, x)))
    mod = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(bb.get()))
    before = mod["add"]
    assert "op_pattern" in before.attrs
    after = mlc_pipeline.CleanUpTIRAttrs(("op_pattern",))(mod)["add"]
    assert "op_pattern" not in after.attrs and tvm_ffi.structural_equal(after.body, before.body)


def test_the_block_of_a_call_te_kernel_computes_its_linears_matmul(lineage):
    checks = {s.label: s for s in code_sites(lineage, lineage.code)}
    sites = [s for s in lineage.call_sites if _transposing_prim_funcs(lineage, s.kernel) == [s.kernel]]
    assert sites
    for site in sites:  # one block, the matmul's: its permute_dims is no loop of its own
        code = checks[site.label]
        assert [lineage.origins[o].op for _, o in code.owners] == ["relax.matmul"]
        assert all(c.status == "verified" for c in code.checks)


def test_a_quantized_linear_asks_2mnk_and_its_dequantize_is_executed_work_shown_apart(quantized_built):
    """Served decode of the q4f16_1 Llama: each Linear's useful FLOPs are its matmul's
    2·M·N·K (one token: 2·N·K), its kernel executes those and the dequantize's two per
    weight ((q - 7) · scale), and the excess is said to be dequantization."""
    from relaytrace.analysis.report import make_report
    from relaytrace.model.work import DEQUANTIZED
    from relaytrace.profiling.serve import Serving

    executable, lineage = quantized_built
    prof = relaytrace.profile(executable, lineage, [], entry="decode", serving=Serving(context=8), repeat=1)
    roofline = make_report(lineage, prof).roofline
    hidden, heads, kv_heads, inner = 64, 4, 2, 128
    shapes = {  # (out features, in features) of each Linear
        "self_attn.qkv_proj": ((heads + 2 * kv_heads) * hidden // heads, hidden),
        "self_attn.o_proj": (hidden, hidden),
        "mlp.gate_up_proj": (2 * inner, hidden),
        "mlp.down_proj": (hidden, inner),
    }
    for name, (n, k) in shapes.items():
        row = roofline.layer(f"model.layers.0.{name}")
        assert row.useful == 2 * n * k, name
        assert row.flops == pytest.approx(2 * n * k + 2 * n * k, rel=0.02), name  # the matmul and the dequantize
        assert row.excess == (DEQUANTIZED,), name


@pytest.fixture(scope="module")
def cuda_quantized():
    """The q4f16_1 Llama as MLC-LLM exports it (one block) built for cuda through the
    pipeline, DLight's GPU schedules in (compiled, not run: no GPU here)."""
    module, spec = mlc_style(layers=1, quantization="q4f16_1", target="cuda")
    try:
        return relaytrace.build(from_nn(module, spec, name="q4"), "cuda", pipeline=mlc_pipeline.NAME)[1]
    except tvm_ffi.Error as exc:
        pytest.skip(f"cuda code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")


def test_every_site_after_the_attention_of_a_cuda_build_is_on_its_layer_and_verified(cuda_quantized):
    """DLight's GPU schedule makes a kernel of two reshapes one block, which
    RewriteDataflowReshape turns back into ``R.reshape``; ToNonDataflow's new var then
    had two earlier values of one key (the reshape as imported, fused away, and the
    kernel's) and took the fused-away one, so every site after the first attention was
    unresolved, billed to ``self_attn`` and suspect (52 of 60 verified before)."""
    lineage = cuda_quantized
    verification = lineage.verification
    assert verification.count("verified") == len(lineage.call_sites) > 0, verification.summary()
    assert not any(lineage.origins[o].kind == "unresolved" for s in lineage.call_sites for o in s.origin_ids)
    _assert_linear_sites(lineage, [f"model.layers.0.{linear}" for linear in LINEARS], extra="dequantize")
    decode = [s for s in lineage.call_sites if s.function == "decode"]
    norms = [s for s in decode if {lineage.origins[o].op for o in s.origin_ids} == {"relax.nn.rms_norm"}]
    assert [{lineage.origins[o].layer for o in s.origin_ids} for s in norms] == [
        {"model.layers.0.input_layernorm"},
        {"model.layers.0.post_attention_layernorm"},
        {"model.norm"},
    ]


@tvm.transform.module_pass(opt_level=0, name="AttachSoftmaxWithTemperature")
def _attach_softmax(mod, _ctx):
    """A function of the pipeline's own, as MLC-LLM's pass of this name adds its
    engine's sampling softmax: no op of the model is in it."""
    from tvm import te, topi

    batch, vocab = tvm.tirx.Var("batch", "int64"), tvm.tirx.Var("vocab", "int64")
    logits = relax.Var("logits", relax.TensorType((batch, vocab), "float32"))
    temperature = relax.Var("temperature", relax.TensorType((batch,), "float32"))
    bb = relax.BlockBuilder(mod)
    with bb.function("softmax_with_temperature", [logits, temperature]):
        scaled = bb.emit_te(
            lambda x, t: te.compute(x.shape, lambda i, j: x[i, j] / t[i], "scaled"), logits, temperature
        )
        bb.emit_func_output(bb.emit_te(topi.nn.softmax, scaled))
    return bb.get()


def test_a_function_the_pipeline_adds_is_verified_as_no_layer_of_the_model():
    """MLC-LLM's pipeline adds functions of its own (``softmax_with_temperature``,
    ``gather_hidden_states``): their kernels compute no op of the model, and were each
    unverified ("not seen being made by any recorded pass")."""
    pipeline = tvm.transform.Sequential([_attach_softmax, mlc_pipeline.pipeline(gemv=False)])
    lineage = _build(_Mlp(), {"forward": {"x": nn.spec.Tensor([1, 16], "float32")}}, "mlp", pipeline)
    checks = lineage.verification.by_position()
    added = [s for s in lineage.call_sites if s.function == "softmax_with_temperature"]
    assert len(added) >= 2
    for site in added:
        assert checks[site.position].status == "verified", checks[site.position].reasons
        assert "softmax_with_temperature holds no op of the model" in checks[site.position].reasons[0]
        assert not any(lineage.origins[o].kind == "op" for o in site.origin_ids)
    assert lineage.verification.count("verified") == len(lineage.call_sites)
    _assert_linear_sites(lineage, ["up", "down"])
