"""The inside of a CUDA kernel timed: its stages stamped by the GPU's global timer, one
writer per thread block (``profiling.inside`` on an llvm build is the CPU's form).

On CUDA a fused kernel runs as thread blocks; inside each, TVM's default schedules run
a kernel's ops either in one loop nest (elementwise epilogues inlined into their
producer: nothing to tell apart) or as stages one after the other (a softmax's
maximum, its sum of exponentials, its normalisation; a layer norm's two sums and its
output), each stage a top-level statement of the innermost ``blockIdx`` loop. Before
the first stage and after each, every thread of the block waits at a barrier, then
thread 0 of the block stores the global timer (``%globaltimer``, nanoseconds, one
clock for the whole GPU) at ``slot + block * (stages + 1) + k`` of a buffer whose
device address is compiled in (as the CPU form compiles in a host address): a stage's
time in a block is the difference of two stamps, and the stages' shares of the
kernel are their times summed over the blocks. The barrier makes a stamp mark the
stage's end for the whole block, not for thread 0 alone; it is the one change to the
kernel besides the stores.

A kernel whose grid size is not a number when it is built (a dynamic shape), or
whose stages bind threads of different extents, is left alone (billed as modelled).

What is here: the pass and the copy it makes, compiled for sm_90 and checked against
the code view (``tests/test_gpu_build.py``, static: no GPU has run it). ``profile
--inside`` refuses a CUDA build until the copy has been run on a GPU and its figures
checked (the device check runs bundles, which hold no TVM to build the copy with).
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from attrs import frozen
from tvm import tirx
from tvm.backend.cuda.op import cuda_func_call
from tvm.s_tir.stmt import SBlockRealize

TIMER = "relaytrace_globaltimer"
TIMER_SOURCE = (
    f"__forceinline__ __device__ unsigned long long {TIMER}() {{\n"
    "  unsigned long long t;\n"
    '  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");\n'
    "  return t;\n"
    "}\n"
)


@frozen
class GpuStamped:
    """One instrumented CUDA kernel: ``blocks`` thread blocks, each with ``len(parts) +
    1`` stamps from ``slot`` on (block ``b``'s ``k``-th at ``slot + b * (len(parts) + 1)
    + k``); ``parts``: each stage's block names, in order."""

    kernel: str
    slot: int
    blocks: int
    parts: tuple[tuple[str, ...], ...]

    @property
    def size(self) -> int:
        """How many stamps the kernel writes in one call."""
        return self.blocks * (len(self.parts) + 1)


@frozen
class _Grid:
    """Where a scheduled kernel's stages are: the ``blockIdx`` loops around them,
    outermost first (var, extent), the stages, and the extent of each ``threadIdx``
    the stages bind."""

    blocks: tuple[tuple[object, int], ...]
    stages: tuple
    threads: dict  # tag -> (extent, the dtype of its loop var)


def grid_of(func) -> _Grid | None:
    """The grid of a scheduled CUDA kernel, or None when it has no ``blockIdx`` loop
    of a known extent around a sequence of stages, or binds one ``threadIdx`` at two
    extents."""
    if not isinstance(func.body, SBlockRealize):
        return None
    stmt = func.body.block.body
    blocks = []
    while isinstance(stmt, tirx.For) and _tag(stmt).startswith("blockIdx"):
        if not isinstance(stmt.extent, tirx.IntImm):
            return None
        blocks.append((stmt.loop_var, int(stmt.extent)))
        stmt = stmt.body
    if not blocks:
        return None
    stages = tuple(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else (stmt,)
    threads: dict[str, tuple[int, str]] = {}
    found: list = []
    for stage in stages:
        tvm_ffi.structural_walk(stage, (tirx.For, found.append), order="pre")
    for loop in found:
        tag = _tag(loop)
        if tag.startswith("threadIdx"):
            extent = (int(loop.extent), str(loop.loop_var.ty)) if isinstance(loop.extent, tirx.IntImm) else None
            if extent is None or threads.setdefault(tag, extent) != extent:
                return None
    return _Grid(tuple(blocks), stages, threads)


def _tag(loop) -> str:
    binding = loop.thread_binding
    return str(binding.thread_tag) if loop.kind == tirx.ForKind.THREAD_BINDING and binding is not None else ""


def gpu_stamped(func, plan: GpuStamped, grid: _Grid, declare, buffer):
    """``func`` with each block's stamps stored at ``plan``'s slots: a barrier, then
    thread 0's read of the global timer, before its first stage that holds blocks and
    after each (``block_names`` says which do)."""
    from .inside import between, root_with

    linear = tirx.const(0, "int64")
    for var, extent in grid.blocks:  # outermost first: the linear block index
        linear = linear * extent + tirx.Cast("int64", var)
    per_block = len(plan.parts) + 1

    def stamp(k: int):
        index = tirx.const(plan.slot + k, "int64") + linear * per_block
        store = tirx.BufferStore(buffer, cuda_func_call(TIMER, source_code=TIMER_SOURCE, return_type="uint64"), [index])
        loops = [
            (tag, tirx.Var(tag.replace(".", "_"), dtype), tirx.const(extent, dtype))
            for tag, (extent, dtype) in sorted(grid.threads.items())
        ]
        first = None
        for _, var, _ in loops:
            zero = var == tirx.const(0, str(var.ty))
            first = zero if first is None else tirx.And(first, zero)
        body = tirx.SeqStmt(
            [
                tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared")),
                tirx.IfThenElse(first, store, None) if first is not None else store,
            ]
        )
        for tag, var, extent in reversed(loops):
            body = tirx.For(
                var,
                tirx.const(0, str(var.ty)),
                extent,
                tirx.ForKind.THREAD_BINDING,
                body,
                thread_binding=tirx.IterVar(None, var, tirx.IterVar.ThreadIndex, tag),
            )
        return body

    body = tirx.SeqStmt(between(grid.stages, stamp))
    for loop in _block_loops(func.body.block.body, len(grid.blocks))[::-1]:
        body = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations)
    return func.with_body(tirx.SeqStmt([declare, root_with(func, body)]))


class GpuInstrumented:
    """The pass that stamps the stages of a CUDA module's kernels (``kernels``: their
    names) into the device buffer at ``address`` (0: a copy only compiled, never run),
    and what it did: ``plans`` (kernel -> ``GpuStamped``) and ``size`` (the stamps one
    run of each kernel once writes). A kernel of one stage, or whose grid is not known
    (``grid_of``), is left as it is."""

    def __init__(self, kernels, address: int = 0):
        self.kernels = frozenset(kernels)
        self.address = address
        self.plans: dict[str, GpuStamped] = {}
        self.size = 0
        self.pass_ = tvm.transform.module_pass(self._run, opt_level=0, name="relaytrace.InsideGpuStamps")

    def _run(self, mod, _ctx):
        from .inside import block_names, stamp_buffer

        mod = mod.clone()  # the module the pipeline gave is not changed in place
        funcs = {gv.name_hint: (gv, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}
        grids = {}
        for name in sorted(self.kernels & set(funcs)):
            grid = grid_of(funcs[name][1])
            parts = tuple(names for names in map(block_names, grid.stages) if names) if grid else ()
            if grid is not None and len(parts) > 1:
                blocks = int(np.prod([extent for _, extent in grid.blocks]))
                self.plans[name] = GpuStamped(name, self.size, blocks, parts)
                grids[name] = grid
                self.size += self.plans[name].size
        declare, buffer = stamp_buffer(max(self.size, 1), self.address, "uint64")
        for name, plan in self.plans.items():
            gv, func = funcs[name]
            mod[gv] = gpu_stamped(func, plan, grids[name], declare, buffer)
        return mod


def instrumented_copy(mod, pipeline, lineage, address: int = 0):
    """``(executable, GpuInstrumented)``: ``mod`` (the imported module a CUDA build of
    ``lineage`` was made from) built again through ``pipeline`` (its Relax pipeline,
    ``inside.pipeline_of``) with its kernels' stages stamped into the device buffer at
    ``address``, checked to make the lineage's kernels with the same blocks
    (``inside.check_same_kernels``)."""
    from .inside import check_same_kernels

    target = tvm.target.Target(lineage.build.target)
    instrumented = GpuInstrumented(lineage.kernels, address)
    with target, tvm.transform.PassContext(opt_level=3):
        executable = tvm.compile(mod, target, relax_pipeline=tvm.transform.Sequential([pipeline, instrumented.pass_]))
    check_same_kernels(lineage, instrumented.plans)
    return executable, instrumented


def _block_loops(stmt, n: int) -> list:
    loops = []
    for _ in range(n):
        loops.append(stmt)
        stmt = stmt.body
    return loops
