"""Builds with several entry functions, some of them symbolic, as LLM deployments make
them (issue 42): each entry's lineage is its own, a symbolic entry's data flow is as
complete as a static one's, and every output of an entry's report says the build's
verdicts. Real TVM builds of the zoo's ``tvm.relax.frontend.nn`` decoder (``prefill`` at
a symbolic ``seq_len``, ``decode`` at one token) and of small TVMScript modules."""

import pytest

import relaytrace


@pytest.fixture(scope="module")
def decoder_fp16():
    """The zoo decoder (2 blocks) built fused through ToMixedPrecision: (executable, lineage)."""
    from relaytrace.frontends.nn import from_nn
    from relaytrace.zoo.nn_decoder import decoder

    module, spec = decoder(layers=2)
    return relaytrace.build(from_nn(module, spec, name="decoder"), "llvm", mixed_precision="float32")


def _site_of(lineage, entry: str, layer: str, short_op: str) -> int:
    """The position of the one call site of ``entry`` that runs ``layer``'s ``short_op``."""
    (position,) = [s.position for s in lineage.call_sites if s.key.entry == entry
                   and any(lineage.origins[o].layer == layer and lineage.origins[o].short_op == short_op
                           for o in s.origin_ids)]
    return position


def test_a_symbolic_entrys_data_flow_is_as_complete_as_a_static_ones(decoder_fp16):
    """prefill (symbolic seq_len) and decode (one token) are one program: VMShapeLower
    binds prefill's allocations anew (sized from the shape heap), which lost which kernel
    wrote each (9 data-flow edges for prefill's 43 sites against decode's 49), so every
    cast ToMixedPrecision inserted there 'served an op at no neighbouring site'."""
    _, lineage = decoder_fp16
    check = lineage.verification
    assert check.ok, (check.summary(), [s for s in check.sites if s.status != "verified"][:3])
    edges = set(lineage.site_edges)
    count = {}
    for entry in ("prefill", "decode"):
        positions = {s.position for s in lineage.call_sites if s.key.entry == entry}
        count[entry] = sum(a in positions for a, _ in edges)
        for i in range(2):
            block = f"layers.{i}"
            norm = _site_of(lineage, entry, f"{block}.input_norm", "rms_norm")
            qkv = _site_of(lineage, entry, f"{block}.self_attn.qkv_proj", "matmul")
            softmax = _site_of(lineage, entry, f"{block}.self_attn", "softmax")
            assert (norm, qkv) in edges, entry  # the norm's output is the projection's input
            assert any(a == softmax for a, _ in edges), entry  # the attention's scores flow on
    assert count["prefill"] == count["decode"]

