"""GPU-target builds are traced here (no GPU on these machines: built, not run)."""

import pytest

import relaytrace
from relaytrace import zoo
from relaytrace.frontends.torch import from_torch


@pytest.mark.parametrize("target", ["cuda"])
def test_a_gpu_build_of_a_zoo_model_has_a_complete_verified_lineage(target):
    module, example = zoo.get("resnet18", image=64)
    try:
        executable, lineage = relaytrace.build(from_torch(module, (example,), name="resnet18"), target)
    except Exception as exc:  # code generation this wheel or machine cannot do
        pytest.skip(f"{target} code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")
    coverage = lineage.coverage()
    assert coverage.complete, coverage
    assert lineage.verification.ok, lineage.verification.summary()
    convs = {n for n, m in module.named_modules() if type(m).__name__ == "Conv2d"}
    anchored = {lineage.origins[s.anchor].layer for s in lineage.call_sites if s.anchor}
    assert convs <= anchored  # every convolution anchors a GPU kernel of its own
    assert "cuda" in lineage.build.target
    # the code: every block as FuseTIR left it verified, and every block DLight's schedules
    # made named after the block (or the buffer) it came from
    from tests.test_code import assert_every_block_mapped_and_verified

    assert_every_block_mapped_and_verified(lineage)
    scheduled = [k for k in lineage.code.kernels.values() if k.built]
    assert scheduled and all(b.sources for k in scheduled for b in k.built_blocks)


def test_a_scheduled_block_with_an_inlined_epilogue_names_every_block_it_came_from():
    """DLight inlines a conv's bias add, residual add and ReLU into the conv's output
    block: that block comes from all four, and no block of a schedule says verified."""
    from relaytrace.model.code import built_checks
    from relaytrace.zoo.relax_models import resnet_style

    try:
        _, lineage = relaytrace.build(resnet_style(blocks=1), "cuda")
    except Exception as exc:  # code generation this wheel or machine cannot do
        pytest.skip(f"cuda code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")
    (site,) = lineage.kernels_of("layer0_add")
    kernel = lineage.code.kernels[site.kernel]
    assert kernel.built
    (last,) = [b for b in kernel.built_blocks if set(b.writes) & set(kernel.outputs)]
    fused = {b.name: kernel.members[b.member].prim_func for b in kernel.blocks}
    came_from = {fused[n] for n in last.sources}
    assert len(came_from) == len(kernel.members)  # the conv, both adds and the ReLU
    assert {c.status for c in built_checks(kernel)} == {"unverified"}


def test_an_estimate_of_a_cuda_build_counts_the_work_of_the_cpu_build():
    """Zoo ResNet-18 built for cuda (traced, not run) against an A100's peaks: each
    kernel counted before its GPU schedule, so the model's FLOPs are the CPU build's;
    every conv layer compute-bound there, every batch norm memory-bound; and the
    estimate says it is one."""
    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.analysis.report import make_report
    from relaytrace.model.peaks import named

    module, example = zoo.get("resnet18", image=64)
    try:
        _, gpu = relaytrace.build(from_torch(module, (example,), name="resnet18"), "cuda")
    except Exception as exc:  # code generation this wheel or machine cannot do
        pytest.skip(f"cuda code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")
    _, cpu = relaytrace.build(from_torch(module, (example,), name="resnet18"), "llvm")
    a100 = named("nvidia-a100-sxm4-80gb")
    reports = {
        name: make_report(lineage, estimated_profile(lineage, a100)) for name, lineage in (("cuda", gpu), ("llvm", cpu))
    }
    flops = {name: sum(r.flops for r in report.roofline.sites.values()) for name, report in reports.items()}
    assert flops["cuda"] == flops["llvm"] == pytest.approx(3.64e9 * (64 / 224) ** 2, rel=0.01)  # its 3.64 GFLOP at 224
    roof = reports["cuda"].roofline
    assert roof.counted == len(gpu.call_sites)
    assert all(w.source == "before scheduling" for w in gpu.build.work.values() if w.flops)
    layers = {r.name: r for r in roof.layers}
    convs = [n for n, m in module.named_modules() if type(m).__name__ == "Conv2d"]
    assert all(layers[c].bound_by == "compute" for c in convs if c in layers and layers[c].intensity > 10)
    assert layers["bn1"].bound_by == "memory"
    assert reports["cuda"].profile.summary().startswith("ESTIMATE, not a measurement")
    assert reports["cuda"].profile.kernel_us == sum(r.bound_us for r in roof.sites.values())


def test_an_mlc_style_llm_built_for_cuda_is_traced_and_its_decode_estimated_at_a_context():
    """The MLC-style Llama (nn.llm's TIR paged KV cache) built for cuda with TVM's default
    GPU pipeline: every call site attributed, the KV cache's GPU kernels found by their
    place among the create builtin's arguments, and an A100 estimate of decode whose
    attention bound grows with the context (its keys and values are read once)."""
    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.frontends.nn import from_nn
    from relaytrace.model.entry import PAGED_DECODE, kernel_role
    from relaytrace.model.peaks import named
    from relaytrace.zoo.mlc_llama import llama

    try:
        _, lineage = relaytrace.build(from_nn(*llama(target="cuda"), name="llama"), "cuda")
    except Exception as exc:  # code generation this wheel or machine cannot do
        pytest.skip(f"cuda code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")
    coverage = lineage.coverage()
    assert coverage.attributed_sites == coverage.call_sites and not coverage.suspect
    cache = lineage.build.kv_cache
    decode = next(k for k in cache.kernels if kernel_role(cache, k) == PAGED_DECODE)
    assert "decode" in decode and "cpu" not in decode  # the GPU kernel, not the CPU one
    a100 = named("nvidia-a100-sxm4-80gb")
    bound = {
        context: sum(
            r.duration_us
            for r in estimated_profile(lineage, a100, "decode", context=context).records
            if r.name == decode
        )
        for context in (512, 4096)
    }
    assert bound[512] > 0 and 7 < bound[4096] / bound[512] < 8.1  # 4097 against 513 keys and values


def test_the_inside_of_cuda_kernels_is_stamped_by_the_global_timer_one_writer_per_block(tmp_path):
    """Issue 56, item 5, checked statically (no GPU here): a CUDA build's multi-stage
    kernels (a layer norm's two sums and its output, a softmax's maximum, sum and
    normalisation) built again with each stage stamped: before the first stage and
    after each, a barrier, then thread 0 of each block stores ``%globaltimer`` at its
    block's slots; compiled for sm_90, the PTX reads the global timer."""
    import re
    import shutil
    import subprocess

    import torch

    from relaytrace.profiling.inside import pipeline_of
    from relaytrace.profiling.inside_gpu import TIMER, instrumented_copy

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 64)
            self.ln = torch.nn.LayerNorm(64)

        def forward(self, x):
            return torch.softmax(self.ln(self.fc(x)) * 2.0, dim=-1)

    imported = from_torch(Block().eval(), (torch.randn(4, 64),), name="block")
    target = {"kind": "cuda", "arch": "sm_90"}
    try:
        _, lineage = relaytrace.build(imported, target)
        executable, instrumented = instrumented_copy(imported.mod, pipeline_of(lineage.build), lineage)
    except Exception as exc:  # code generation this wheel or machine cannot do
        pytest.skip(f"cuda code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")
    ops_of = {s.kernel: {lineage.origins[o].short_op for o in s.origin_ids} for s in lineage.call_sites}
    staged = {k for k, ops in ops_of.items() if {"layer_norm"} <= ops or {"softmax"} <= ops}
    assert staged and set(instrumented.plans) == staged  # the matmul's kernel runs one stage: left alone
    sources = []

    def collect(module):
        for kind in ("", "ptx"):
            try:
                sources.append(module.inspect_source(kind) if kind else module.inspect_source())
            except Exception:  # a module without that form
                pass
        for child in module.imports:
            collect(child)

    collect(executable.mod)
    cuda = next(s for s in sources if f"{TIMER}()" in s and "__global__" in s)
    for name, plan in instrumented.plans.items():
        code = lineage.code.kernels[name]
        assert sorted(n for part in plan.parts for n in part) == sorted(b.name for b in code.built_blocks)
        assert len(plan.parts) >= 2 and plan.blocks == 4  # one block per row of the 4x64 input
        body = cuda.split(f"void __launch_bounds__(256) {name}_kernel(", 2)[2].split("\nextern", 1)[0]
        stamps = re.findall(
            r"__syncthreads\(\);\s*(?:int \w+ = [^;]+;\s*)*if \(\(\(int\)threadIdx\.x\) == 0\) \{\s*"
            r"stamps_ptr\[([^\]]+)\] = " + TIMER + r"\(\);",
            body,
        )
        per_block = len(plan.parts) + 1
        assert len(stamps) == per_block, body
        for block in range(plan.blocks):  # each store's index, evaluated at each block
            at = [eval(index.replace("((int)blockIdx.x)", str(block))) for index in stamps]  # noqa: S307 - C index
            assert at == [plan.slot + block * per_block + k for k in range(per_block)], (name, block, stamps)
    compiler = shutil.which("nvcc")
    if compiler is None:
        pytest.skip("no nvcc to compile the copy's CUDA source to PTX")
    (tmp_path / "copy.cu").write_text(cuda)
    subprocess.run(
        [compiler, "-arch=sm_90", "-ptx", str(tmp_path / "copy.cu"), "-o", str(tmp_path / "copy.ptx")], check=True
    )
    ptx = (tmp_path / "copy.ptx").read_text()
    reads = re.findall(r"mov\.u64\s+%rd\d+, %globaltimer;", ptx)
    assert len(reads) == sum(len(plan.parts) + 1 for plan in instrumented.plans.values())  # one per stamp
