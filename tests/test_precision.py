"""Precision of real float16 builds (ToMixedPrecision accumulating in float32): what each
kernel computes and accumulates in as its TIR says, the casts the pass inserted billed to
the layers they serve, and the layers it left in float32 with the reason its op
registry gives (apache-tvm 0.27: batch_norm, mean and softmax have no
TMixedPrecisionPolicy, which the pass takes as never)."""

import numpy as np
import pytest

import relaytrace
from relaytrace.analysis.precision import CAST, MODEL
from relaytrace.analysis.report import make_report

F16, F32 = "float16", "float32"
MP = "ToMixedPrecision"


def _relax_model():
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Model:
        @R.function
        def main(
            x: R.Tensor((1, 4, 8, 8), "float32"), w: R.Tensor((8, 4, 3, 3), "float32"), m: R.Tensor((64, 16), "float32")
        ):
            with R.dataflow():
                c = R.nn.conv2d(x, w, padding=1)
                r = R.reshape(c, (8, 64))
                s = R.nn.softmax(r, axis=-1)
                y = R.matmul(s, m)
                R.output(y)
            return y

    return Model


def _ops(report, short_op):
    """The layers of the lineage's ops of this kind (the names are the frontend's)."""
    return sorted({o.layer for o in report.lineage.origins.values() if o.short_op == short_op and o.kind == "op"})


def test_a_small_float16_build_converts_conv_and_matmul_and_keeps_softmax():
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype("float32") for s in ((1, 4, 8, 8), (8, 4, 3, 3), (64, 16))]
    executable, lineage = relaytrace.build(_relax_model(), "llvm", mixed_precision="float32")
    assert lineage.build.policies["relax.nn.softmax"] == "never"  # as this TVM registers it
    assert lineage.build.policies["relax.nn.conv2d"] == lineage.build.policies["relax.matmul"] == "always"
    report = make_report(lineage, relaytrace.profile(executable, lineage, inputs, repeat=1))
    p = report.precision
    assert p.mixed and "ToMixedPrecision, accumulating in float32" in p.build
    for key, site in p.sites.items():
        assert site.dtypes.compute, key
        ops = {lineage.origins[o].short_op for o in next(s for s in lineage.call_sites if s.key == key).origin_ids}
        if ops & {"conv2d", "matmul"}:  # float16 in, float32 multiply-adds and accumulator (out_dtype)
            assert (site.dtypes.compute, site.dtypes.accumulate, site.dtypes.inputs) == (F32, F32, (F16,)), key
        if "softmax" in ops:
            assert F16 not in site.dtypes.inputs and site.dtypes.compute == F32
    (conv,), (softmax,), (matmul,) = _ops(report, "conv2d"), _ops(report, "softmax"), _ops(report, "matmul")
    assert p.layer(conv).label == p.layer(matmul).label == "float32 (reads float16)"
    kept = {r.layer: r.why for r in p.float32_layers}
    assert conv not in kept and matmul not in kept
    assert kept[softmax] == "ToMixedPrecision never converts softmax (policy never)"
    assert p.casts and all(c.by == MP for c in p.casts)
    assert {c.layer for c in p.casts} <= set(kept) | {conv, matmul} | set(_ops(report, "reshape"))
    assert 0 < p.cast_us < sum(us for _, us, _ in p.by_dtype)
    assert dict((d, us) for d, us, _ in p.by_dtype).get(CAST, 0) == pytest.approx(p.cast_us)


@pytest.mark.slow
def test_resnet18_in_float16_names_every_sites_dtype_its_casts_and_the_layers_left_in_float32():
    from relaytrace import zoo
    from relaytrace.frontends.torch import from_torch

    module, example = zoo.get("resnet18", image=64)  # the same kernels, a sixth of the run
    executable, lineage = relaytrace.build(
        from_torch(module, (example,), name="resnet18"), "llvm", mixed_precision="float32"
    )
    report = make_report(lineage, relaytrace.profile(executable, lineage, [example.numpy()], repeat=1))
    p = report.precision
    assert len(p.sites) == len(lineage.call_sites) and all(s.dtypes.compute for s in p.sites.values())
    convs = [
        (k, s)
        for k, s in p.sites.items()
        if any(
            lineage.origins[o].short_op == "conv2d"
            for o in next(c for c in lineage.call_sites if c.key == k).origin_ids
        )
    ]
    assert len(convs) == 20
    for key, site in convs:  # the TIR casts float16 inputs up and multiplies and accumulates in float32
        assert (site.dtypes.compute, site.dtypes.accumulate, site.dtypes.inputs) == (F32, F32, (F16,)), key
    # every cast ToMixedPrecision inserted runs, billed to a layer it serves, or was folded (the weights')
    inserted = {o.id for o in lineage.origins.values() if o.short_op == "astype" and o.pass_name == MP}
    folded = {o for o in inserted if lineage.journal.eliminated_by.get(o) == "FoldConstant"}
    assert {c.origin for c in p.casts} == inserted - folded and len(p.casts) > 0 and set(p.folded) == folded
    for c in p.casts:
        assert c.by == MP and c.by != MODEL and c.layer in {lineage.origins[s].layer for s in c.serves}
    assert any(c.us > 0 for c in p.casts) and 0 < p.cast_percent < 100
    # the layers left in float32: every batch_norm (never converted: no policy registered), the global
    # average pool (mean, the same), and the followers whose float32 comes from one of them
    kept = {r.layer: r.why for r in p.float32_layers}
    bns = _ops(report, "batch_norm")
    assert len(bns) == 20 and all(kept[b] == "ToMixedPrecision never converts batch_norm (policy never)" for b in bns)
    assert kept["avgpool"] == "ToMixedPrecision never converts mean (policy never)"
    for layer in _ops(report, "relu") + ["maxpool"]:
        assert "follows its inputs (policy follow), float32 from " in kept[layer]
        assert kept[layer].endswith("never converts batch_norm (policy never)")
    assert not set(kept) & set(_ops(report, "conv2d"))
    assert p.layer("fc").dtype == "float32+float16"  # the matmul accumulates in float32, its bias add is float16
