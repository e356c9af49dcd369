"""Parameter passes as MLC-LLM runs them before TVM's pipeline (issue 42, item 4), on the
2-block MLC-style Llama (``zoo.mlc_llama``): ``LiftTransformParams`` moves each weight's
transpose into ``X_transform_params`` and ``BundleModelParams`` packs the weights into one
tuple; the lineage follows both, traces the transform functions as entries billed to
the layers whose weights they transform, and ``memory`` counts a packed tuple field by
field."""

from __future__ import annotations

import math

import pytest
import tvm
from tvm import relax

import relaytrace
from relaytrace.analysis.memory import memory_at
from relaytrace.frontends.nn import from_nn
from relaytrace.model.origin import OP
from relaytrace.zoo.mlc_llama import llama, mlc_style

LINEARS = {
    f"model.layers.{i}.{name}"
    for i in range(2)
    for name in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
} | {"lm_head"}


def _build(param_mode: str, *passes):
    """(the nn module, its lineage) of the 2-block llama built for llvm with ``passes``
    before TVM's default pipeline, as a user's pipeline."""
    module, spec = llama(layers=2, param_mode=param_mode)
    target = tvm.target.Target("llvm")
    pipeline = tvm.transform.Sequential([*(p() for p in passes), relax.get_default_pipeline(target)])
    return module, relaytrace.build(from_nn(module, spec), target, pipeline=pipeline)[1]


@pytest.fixture(scope="module")
def packed():
    return _build("packed")


@pytest.fixture(scope="module")
def plain():
    return _build("plain")


@pytest.fixture(scope="module")
def lifted():
    """Packed weights, ``LiftTransformParams`` (TVM cannot bundle a packed tuple again)."""
    return _build("packed", relax.transform.LiftTransformParams)[1]


@pytest.fixture(scope="module")
def bundled_lifted():
    return _build("plain", relax.transform.BundleModelParams, relax.transform.LiftTransformParams)[1]


def _ops_run(lineage) -> set[str]:
    """The model ops some kernel call or VM builtin runs."""
    return {o for site in lineage.call_sites for o in site.origin_ids} | {
        o for b in lineage.builtins for o in b.origins
    }


@pytest.mark.parametrize("build", ["lifted", "bundled_lifted"])
def test_lifted_lineage_complete_and_verified(build, packed, request):
    lineage = request.getfixturevalue(build)
    verification = lineage.verification
    assert not lineage.journal.degraded
    assert [c for c in verification.sites if c.status == "suspect"] == []
    assert all(c.status == "verified" for c in verification.layers)
    assert not [o for o in lineage.origins.values() if o.kind == "unresolved"]
    # every op runs where the unlifted build runs it, or in a transform function
    ops = {oid for oid, o in lineage.origins.items() if o.kind == OP}
    assert ops - _ops_run(lineage) == set(packed[1].journal.eliminated_by)  # what FoldConstant folds, as unlifted
    # nothing eliminated runs elsewhere, and PartitionTransformParams eliminates nothing
    assert not set(lineage.journal.eliminated_by) & _ops_run(lineage)
    assert "PartitionTransformParams" not in set(lineage.journal.eliminated_by.values())


def test_weights_of_a_symbolic_vocabulary_are_lifted_and_every_site_stays_verified():
    """MLC-LLM's export (``mlc_style``): the tied head's transposed weight is
    ``(hidden, vocab_size)``, and each function has its own ``vocab_size`` variable, so
    the transform's result and the entry's new parameters did not compare equal: every
    entry's ops were unresolved after ``PartitionTransformParams`` (37 of 91 sites
    verified)."""
    module, spec = mlc_style(layers=1)
    lineage = relaytrace.build(from_nn(module, spec), "llvm", lift_params=True)[1]  # advise's rebuild
    assert lineage.build.options.label == "fused+lift_params"
    assert lineage.verification.count("verified") == len(lineage.call_sites) > 0, lineage.verification.summary()
    assert not [o for o in lineage.origins.values() if o.kind == "unresolved"]
    moved = lineage.for_entry("decode_transform_params").call_sites
    head = [lineage.origins[o] for s in moved for o in s.origin_ids if lineage.origins[o].layer == "model.embed_tokens"]
    assert [o.op for o in head] == ["relax.permute_dims"]  # the tied head's transpose, moved out of the step


@pytest.mark.parametrize("build", ["lifted", "bundled_lifted"])
def test_transform_functions_are_entries_billed_to_their_linears(build, request):
    lineage = request.getfixturevalue(build)
    for entry in ("prefill", "decode"):
        moved = lineage.for_entry(f"{entry}_transform_params")
        sites = moved.call_sites
        assert sites, f"{entry}_transform_params runs no kernel"
        ops = [lineage.origins[o] for site in sites for o in site.origin_ids]
        # one transpose of each Linear's weight, billed to that Linear, an op of the entry it feeds
        assert sorted(o.layer for o in ops) == sorted(LINEARS)
        assert {o.op for o in ops} == {"relax.permute_dims"} and {o.function for o in ops} == {entry}
        checks = {c.position: c for c in lineage.verification.sites}
        assert all(
            checks[s.position].status == "verified" and "transform-params" in checks[s.position].shared for s in sites
        )
    # the entries themselves keep their matmuls, by layer
    decode_layers = {lineage.origins[o].layer for s in lineage.for_entry("decode").call_sites for o in s.origin_ids}
    assert LINEARS <= decode_layers


def _hand_count(module) -> int:
    """Bytes of every parameter of the nn module (float32)."""
    return sum(4 * math.prod(int(d) for d in p.shape) for _, p in module.named_parameters())


@pytest.mark.parametrize("build", ["packed", "plain"])
def test_weights_counted_field_by_field_and_billed(build, request):
    module, lineage = request.getfixturevalue(build)
    memory = memory_at(lineage, "decode", {})
    assert memory.weights == _hand_count(module)
    by_layer = {row.layer: row.weights for row in memory.layers}
    shapes = dict(module.named_parameters())
    for layer in ("lm_head", "model.layers.1.self_attn.qkv_proj", "model.layers.0.mlp.down_proj"):
        assert by_layer[layer] == 4 * math.prod(int(d) for d in shapes[f"{layer}.weight"].shape)
