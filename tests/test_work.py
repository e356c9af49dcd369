"""Each kernel's work as relaytrace counts it from the TIR of real builds, held to the
analytic counts (2·N·K·... for conv2d, matmul, batch matmul, depthwise conv) at two
static shapes and at a symbolic one run at two sizes, and to TVM's own estimate where
that one is right; the peaks measured here bound every site's achieved rate."""

import numpy as np
import pytest
import torch
from torch import nn

import relaytrace
from relaytrace.analysis.report import make_report
from relaytrace.frontends.torch import from_torch
from relaytrace.model.work import evaluate, work_at


class Conv(nn.Module):
    def __init__(self, c, k, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(c, k, 3, padding=1, bias=False, groups=groups)

    def forward(self, x):
        return self.conv(x)


class Matmul(nn.Module):
    def forward(self, a, b):
        return a @ b


class Linear(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = nn.Linear(k, n, bias=False)

    def forward(self, x):
        return self.fc(x)


def _site_flops(module, args, op, dynamic_shapes=None, runs=None):
    """FLOPs of the one call site whose anchor op is ``op``, at the shapes each run of
    ``runs`` (input arrays; default ``args``) gave it, from a real build and profile."""
    executable, lineage = relaytrace.build(
        from_torch(module, args, dynamic_shapes=dynamic_shapes), "llvm", pipeline="unfused"
    )
    out = []
    for inputs in runs or [args]:
        prof = relaytrace.profile(executable, lineage, [a.numpy() for a in inputs], repeat=1)
        sites = [s for s in lineage.call_sites if s.anchor and lineage.origins[s.anchor].short_op == op]
        assert len(sites) == 1, [s.label for s in lineage.call_sites]
        arg = prof.arg(sites[0].key)
        out.append(work_at(lineage.build.work[sites[0].kernel], arg.shapes, arg.dtypes))
    return out


@pytest.mark.parametrize("n,c,h,k", [(1, 8, 16, 16), (2, 16, 7, 32)])
def test_conv2d_flops_are_two_per_multiply_add(n, c, h, k):
    (work,) = _site_flops(Conv(c, k).eval(), (torch.randn(n, c, h, h),), "conv2d")
    assert work.flops == 2 * n * k * h * h * c * 3 * 3
    assert work.bytes == 4 * (n * c * h * h + k * c * 9 + n * k * h * h)  # its arguments, read or written once


@pytest.mark.parametrize("n,c,h", [(1, 8, 16), (2, 32, 9)])
def test_depthwise_conv2d_flops(n, c, h):
    (work,) = _site_flops(Conv(c, c, groups=c).eval(), (torch.randn(n, c, h, h),), "conv2d")
    assert work.flops == 2 * n * c * h * h * 3 * 3


@pytest.mark.parametrize("m,k,n", [(32, 64, 48), (5, 128, 7)])
def test_matmul_and_dense_flops(m, k, n):
    (work,) = _site_flops(Matmul(), (torch.randn(m, k), torch.randn(k, n)), "matmul")
    assert work.flops == 2 * m * k * n
    (dense,) = _site_flops(Linear(k, n).eval(), (torch.randn(m, k),), "matmul")
    assert dense.flops == 2 * m * k * n


@pytest.mark.parametrize("b,m,k,n", [(4, 32, 64, 48), (3, 5, 16, 9)])
def test_batch_matmul_flops(b, m, k, n):
    (work,) = _site_flops(Matmul(), (torch.randn(b, m, k), torch.randn(b, k, n)), "matmul")
    assert work.flops == 2 * b * m * k * n


def test_a_symbolic_length_is_bound_by_each_run():
    seq = torch.export.Dim("seq", min=2, max=64)
    example = (torch.randn(8, 32), torch.randn(32, 16))
    works = _site_flops(
        Matmul(),
        example,
        "matmul",
        dynamic_shapes={"a": {0: seq}, "b": None},
        runs=[(torch.randn(n, 32), torch.randn(32, 16)) for n in (8, 40)],
    )
    assert [w.flops for w in works] == [2 * 8 * 32 * 16, 2 * 40 * 32 * 16]


def test_the_count_agrees_with_tvms_estimate_where_that_is_right_and_says_where_not():
    import tvm
    from tvm import te, tirx, topi
    from tvm.s_tir.analysis import estimate_tir_flops

    from relaytrace.tracking.work import count

    def both(make, *shapes):
        placeholders = [te.placeholder(s, "float32", name=f"a{i}") for i, s in enumerate(shapes)]
        func = te.create_prim_func([*placeholders, make(*placeholders)])
        return count(func), estimate_tir_flops(tvm.IRModule({"main": func}))

    for make, shapes in (
        (lambda x, w: topi.nn.conv2d_nchw(x, w, 1, 1, 1), [(1, 8, 16, 16), (16, 8, 3, 3)]),
        (lambda a, b: topi.nn.matmul(a, b), [(32, 64), (64, 48)]),
        (lambda x: topi.nn.relu(x), [(32, 64)]),
    ):
        ours, theirs = both(make, *shapes)
        assert evaluate(ours.flops, {}) == theirs
    ours, theirs = both(lambda x: topi.nn.softmax(x), (32, 64))  # max, subtract, sum, divide; exp apart
    assert evaluate(ours.flops, {}) == theirs == 4 * 32 * 64 and evaluate(ours.transcendentals, {}) == 32 * 64
    n = tirx.Var("n", "int64")
    ours, theirs = both(lambda a, b: topi.nn.matmul(a, b), (n, 64), (64, 48))
    assert theirs == 2 * 64 * 48  # TVM counts a loop of symbolic extent once
    assert evaluate(ours.flops, {"n": 10}) == 2 * 10 * 64 * 48


def test_measured_peaks_bound_every_sites_achieved_rate(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from relaytrace.profiling.peaks import measure

    module, x = Conv(16, 32).eval(), torch.randn(1, 16, 28, 28)
    executable, lineage = relaytrace.build(module, example_args=(x,))
    report = make_report(lineage, relaytrace.profile(executable, lineage, [x.numpy()], repeat=3))
    peaks = report.profile.peaks
    assert peaks is not None and peaks.source == "measured" and "FMA" in peaks.method
    assert (tmp_path / "relaytrace" / "peaks.json").exists() and measure(lineage.build.target) == peaks  # cached
    roof = report.roofline
    assert roof.counted == len(lineage.call_sites)
    for site in roof.sites.values():
        assert site.gflops_s <= peaks.gflops["float32"] * 1.05, site
        assert site.bound_us <= site.us or any(site.name == name for name, _ in roof.over_ceiling)
    conv = roof.layer("conv")
    assert conv.flops == 2 * 32 * 28 * 28 * 16 * 9 and conv.bound_by == "compute"
    assert np.isclose(conv.efficiency, conv.bound_us / conv.us) and conv.wasted_us == conv.us - conv.bound_us


def test_a_decoders_work_follows_its_symbolic_length_and_decode_is_memory_bound():
    """TVM's nn decoder (prefill at a symbolic seq_len, decode one token): one build run
    at two lengths counts 2·S·64·192 FLOPs for the qkv projection at each; under peaks of
    a 10 FLOP/byte knee, decode's projections (a GEMV: about 0.5 FLOP per byte) are
    memory-bound and a 256-token prefill's are compute-bound."""
    from relaytrace.frontends.nn import from_nn
    from relaytrace.model.peaks import given
    from relaytrace.zoo.nn_decoder import decoder

    module, spec = decoder(layers=2)
    executable, lineage = relaytrace.build(from_nn(module, spec, name="decoder"), "llvm")
    peaks = given(100.0, 10.0)

    def report(entry, length):
        arrays = [
            np.zeros((1, length), dtype)
            if "int" in dtype
            else np.random.default_rng(0)
            .standard_normal([d if isinstance(d, int) else length for d in shape])
            .astype(dtype)
            for _, shape, dtype in lineage.build.entries[entry]
        ]
        prof = relaytrace.profile(executable, lineage, arrays, entry=entry, repeat=1, peaks=peaks)
        return make_report(lineage, prof).roofline

    for length in (8, 256):
        qkv = report("prefill", length).layer("layers.0.self_attn.qkv_proj")
        assert qkv.flops == 2 * length * 64 * 192
        assert qkv.bound_by == ("compute" if length == 256 else "memory")
    decode = report("decode", 1)
    for name in ("layers.0.self_attn.qkv_proj", "layers.1.mlp.down_proj", "lm_head"):
        roof = decode.layer(name)
        assert roof.bound_by == "memory" and roof.intensity < 1, (name, roof)
