"""The machine's peak rates, measured with small TVM-built kernels where a profile runs.

Two kernels, built for the profiled build's own target (the ceiling its kernels can
reach: a target without ``mcpu`` gets generic x86-64 code), timed with
``time_evaluator``, best of several runs:

- FMA-bound: ``acc = acc * a + b`` on 8 independent vector accumulators held in
  registers, 64 parallel chunks, counted 2 FLOPs each, as many steps as a short probe
  says fill about 20 ms; at 4, 8 and 16 lanes, the best kept (8 chains of 16 lanes
  fit AVX-512's registers and spill SSE's 16: generic x86-64 code peaks at 4); per
  dtype (float32, float16).
- streaming copy: ``B[i] = A[i]`` over 64 MiB per buffer (beyond the caches),
  parallel and vectorized, counted as 2 bytes moved per byte copied (STREAM's
  convention; the write-allocate read is not counted).

Measured once per (target, CPU) and cached in ``$XDG_CACHE_HOME/relaytrace/peaks.json``
(``~/.cache`` by default); ``measure(refresh=True)`` measures again.

A device measured elsewhere (over RPC, or by a bundle's runner where no compiler is)
runs ``fixed_kernels``: the same kernels at a fixed size, and for an NVIDIA GPU their
GPU form (each thread's chains in registers, a full wave of threads; float16 as half2);
``runner.rates.peak_rates`` turns their best times into the peaks.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from attrs import frozen
from tvm.script import tirx as T

from ..errors import FileFormatError, RelaytraceError
from ..model.codec import encode
from ..model.jsonio import make_record, write_atomic
from ..model.peaks import MEASURED, Peaks, problem
from .runner.rates import peak_rates

CHUNKS, ACCUMULATORS = 64, 8
LANE_WIDTHS = (4, 8, 16)  # the widest that keeps 8 chains in the target's registers is the peak (SSE: 4)
PROBE_STEPS, TIMED_SECONDS = 100, 0.02  # a short probe sizes the timed run to about 20 ms
COPY_ELEMENTS = 16 * 1024 * 1024
DTYPES = ("float32", "float16")
REMOTE_STEPS = 2000  # fixed-size CPU kernels (no probe where they run): 33 MFLOP a call, 1-30 ms
CACHE_VERSION = "peaks/3"  # a change of the kernels or the record measures again


def _fma_kernel(dtype: str, steps: int, lanes: int):
    shape = (CHUNKS, ACCUMULATORS, lanes)

    @T.prim_func
    def fma(a: T.Buffer(shape, dtype), out: T.Buffer(shape, dtype)):  # type: ignore[valid-type]  # TVMScript
        T.func_attr({"tirx.noalias": True})
        for p in T.parallel(CHUNKS):
            acc = T.alloc_buffer((ACCUMULATORS, lanes), dtype, scope="local")
            for u in T.unroll(ACCUMULATORS):
                for lane in T.vectorized(lanes):
                    acc[u, lane] = a[p, u, lane]
            for _ in range(steps):
                for u in T.unroll(ACCUMULATORS):
                    for lane in T.vectorized(lanes):
                        acc[u, lane] = T.call_intrin(
                            dtype, "tirx.fma", acc[u, lane], T.Cast(dtype, 0.999), T.Cast(dtype, 0.001)
                        )
            for u in T.unroll(ACCUMULATORS):
                for lane in T.vectorized(lanes):
                    out[p, u, lane] = acc[u, lane]

    return fma.with_attr("global_symbol", f"fma_{dtype}_x{lanes}")


def _copy_kernel():
    block = 4096

    @T.prim_func
    def copy(a: T.Buffer((COPY_ELEMENTS,), "float32"), b: T.Buffer((COPY_ELEMENTS,), "float32")):  # type: ignore[valid-type]  # TVMScript
        T.func_attr({"tirx.noalias": True})
        for o in T.parallel(COPY_ELEMENTS // block):
            for i in T.vectorized(block):
                b[o * block + i] = a[o * block + i]

    return copy.with_attr("global_symbol", "copy")


GPU_BLOCKS, GPU_THREADS = 1056, 256  # a full wave of 2,048 threads on each of 132 SMs (an H100/H200)
GPU_STEPS, GPU_COPY_ELEMENTS = 16384, 64 * 1024 * 1024  # ~1 ms of float32 FMA on an H200; 256 MiB per buffer
GPU_LANES = {"float32": 1, "float16": 2}  # half2: two float16 FMAs an instruction


def _gpu_fma_kernel(dtype: str, steps: int, lanes: int):
    """``_fma_kernel`` for a GPU: each of ``GPU_BLOCKS`` x ``GPU_THREADS`` threads holds
    ``ACCUMULATORS`` chains of ``lanes`` in registers (plain multiply-add, which the
    CUDA compiler contracts to FMA)."""
    shape = (GPU_BLOCKS, GPU_THREADS, ACCUMULATORS, lanes)

    @T.prim_func
    def fma(a: T.Buffer(shape, dtype), out: T.Buffer(shape, dtype)):  # type: ignore[valid-type]  # TVMScript
        T.func_attr({"tirx.noalias": True})
        for b in T.thread_binding(GPU_BLOCKS, "blockIdx.x"):
            for t in T.thread_binding(GPU_THREADS, "threadIdx.x"):
                acc = T.alloc_buffer((ACCUMULATORS, lanes), dtype, scope="local")
                for u in T.unroll(ACCUMULATORS):
                    for lane in T.vectorized(lanes):
                        acc[u, lane] = a[b, t, u, lane]
                for _ in range(steps):
                    for u in T.unroll(ACCUMULATORS):
                        for lane in T.vectorized(lanes):
                            acc[u, lane] = acc[u, lane] * T.Cast(dtype, 0.999) + T.Cast(dtype, 0.001)
                for u in T.unroll(ACCUMULATORS):
                    for lane in T.vectorized(lanes):
                        out[b, t, u, lane] = acc[u, lane]

    return fma.with_attr("global_symbol", f"fma_{dtype}_x{lanes}")


def _gpu_copy_kernel():
    threads = 1024

    @T.prim_func
    def copy(a: T.Buffer((GPU_COPY_ELEMENTS,), "float32"), b: T.Buffer((GPU_COPY_ELEMENTS,), "float32")):  # type: ignore[valid-type]  # TVMScript
        T.func_attr({"tirx.noalias": True})
        for o in T.thread_binding(GPU_COPY_ELEMENTS // threads, "blockIdx.x"):
            for i in T.thread_binding(threads, "threadIdx.x"):
                b[o * threads + i] = a[o * threads + i]

    return copy.with_attr("global_symbol", "copy")


@frozen
class PeakKernel:
    """One kernel of a fixed-size peak measurement (a device measured elsewhere: over
    RPC, or by a bundle's runner): its function, what one call computes (``flops`` in
    ``dtype``) or moves (``bytes``), and its argument's shape."""

    func: Any  # a tirx.PrimFunc
    dtype: str
    shape: tuple[int, ...]
    flops: float = 0.0
    bytes: float = 0.0

    @property
    def name(self) -> str:
        return str(self.func.attrs["global_symbol"])


def fixed_kernels(kind: str) -> tuple[PeakKernel, ...]:
    """The peak kernels for a device of target ``kind`` (``llvm`` or ``cuda``), each of a
    fixed size (no probe where they run): FMA chains per dtype and lane width, and the
    copy, counted as read + write."""
    if kind == "cuda":
        fmas = [
            PeakKernel(
                _gpu_fma_kernel(dtype, GPU_STEPS, lanes),
                dtype,
                (GPU_BLOCKS, GPU_THREADS, ACCUMULATORS, lanes),
                flops=2.0 * GPU_BLOCKS * GPU_THREADS * ACCUMULATORS * lanes * GPU_STEPS,
            )
            for dtype, lanes in GPU_LANES.items()
        ]
        return (*fmas, PeakKernel(_gpu_copy_kernel(), "float32", (GPU_COPY_ELEMENTS,), bytes=8.0 * GPU_COPY_ELEMENTS))
    fmas = [
        PeakKernel(
            _fma_kernel(dtype, REMOTE_STEPS, lanes),
            dtype,
            (CHUNKS, ACCUMULATORS, lanes),
            flops=_fma_flops(REMOTE_STEPS, lanes),
        )
        for dtype in DTYPES
        for lanes in LANE_WIDTHS
    ]
    return (*fmas, PeakKernel(_copy_kernel(), "float32", (COPY_ELEMENTS,), bytes=8.0 * COPY_ELEMENTS))


def _spec(kernel: PeakKernel) -> dict:
    """A peak kernel as JSON: what ``runner.rates.peak_rates`` and a bundle's manifest read."""
    return {
        "name": kernel.name,
        "dtype": kernel.dtype,
        "shape": list(kernel.shape),
        "flops": kernel.flops,
        "bytes": kernel.bytes,
    }


def fixed_method(kind: str) -> str:
    """How ``fixed_kernels(kind)`` measure, in words a reader can check."""
    if kind == "cuda":
        return (
            f"best of 5 time_evaluator runs: {GPU_BLOCKS}x{GPU_THREADS} threads each with {ACCUMULATORS} FMA "
            f"chains x {GPU_STEPS} steps (float32; float16 as half2); a copy of "
            f"{GPU_COPY_ELEMENTS * 4 >> 20} MiB counted as read + write"
        )
    return (
        f"best of 5 time_evaluator runs: {CHUNKS}x{ACCUMULATORS} vector FMA chains of "
        f"{'/'.join(map(str, LANE_WIDTHS))} lanes (the best) x {REMOTE_STEPS} steps per dtype; a parallel copy "
        f"of {COPY_ELEMENTS * 4 >> 20} MiB counted as read + write"
    )


def _best_seconds(func, target, arrays, number: int) -> float:
    name = str(func.attrs["global_symbol"])
    lib = tvm.compile(tvm.IRModule({name: func}), target=target)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    return min(lib.mod.time_evaluator(name, dev, number=number, repeat=5)(*tensors).results)


def _fma_flops(steps: int, lanes: int) -> float:
    return 2.0 * CHUNKS * ACCUMULATORS * lanes * steps


def _gflops(target, dtype: str) -> float:
    """The best of the lane widths: a chain of vectors too wide for the target's
    registers spills, and measures the stack, not the arithmetic."""
    return max(_gflops_at(target, dtype, lanes) for lanes in LANE_WIDTHS)


def _gflops_at(target, dtype: str, lanes: int) -> float:
    data = np.ones((CHUNKS, ACCUMULATORS, lanes), dtype)
    probe = _best_seconds(_fma_kernel(dtype, PROBE_STEPS, lanes), target, [data, np.zeros_like(data)], number=1)
    steps = max(PROBE_STEPS, int(PROBE_STEPS * TIMED_SECONDS / max(probe, 1e-9)))
    seconds = _best_seconds(_fma_kernel(dtype, steps, lanes), target, [data, np.zeros_like(data)], number=3)
    return _fma_flops(steps, lanes) / seconds / 1e9


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name() -> str:
    """This machine's CPU as the peaks name it: its model and its core count."""
    return f"{_cpu_name()}, {os.cpu_count()} cores"


def _cache_path() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "relaytrace" / "peaks.json"


def measure(target_text: str, refresh: bool = False, progress=None) -> Peaks:
    """The peaks of this machine for kernels built for ``target_text`` (an ``llvm``
    target: a GPU cannot run here), from the cache unless ``refresh``; measured and
    cached otherwise (a cache that cannot be written is left alone)."""
    target = tvm.target.Target(target_text)
    if target.kind.name != "llvm":
        raise RelaytraceError(
            f"peaks are measured on this machine's CPU, not for a {target.kind.name} target: "
            "give a GPU's to profile or estimate with --peak-gflops and --peak-gbps, or name one "
            "with --device (relaytrace peaks --list)"
        )
    say = progress or (lambda message: None)
    return _cached(
        f"{CACHE_VERSION} | {target} | {device_name()} | {_threads()} threads",
        refresh,
        lambda: _measure_here(target, say),
    )


def _measure_here(target, say) -> Peaks:
    say("measuring this machine's peak rates (once; cached)")
    gflops = {dtype: _gflops(target, dtype) for dtype in DTYPES}
    native = None
    if not _mcpu(target):
        host = tvm.target.Target({"kind": "llvm", "mcpu": _host_cpu()}) if _host_cpu() else None
        native = _gflops(host, "float32") if host is not None else None
    data = np.ones(COPY_ELEMENTS, "float32")
    seconds = _best_seconds(_copy_kernel(), target, [data, np.zeros_like(data)], number=3)
    gbps = 2.0 * data.nbytes / seconds / 1e9
    method = (
        f"TVM kernels built for {_built_for(target)}, best of 5 time_evaluator runs: "
        f"{CHUNKS}x{ACCUMULATORS} vector FMA chains of {'/'.join(map(str, LANE_WIDTHS))} lanes (the best) "
        "per dtype, sized to about "
        f"{TIMED_SECONDS * 1e3:.0f} ms; "
        f"a parallel copy of {data.nbytes >> 20} MiB counted as read + write"
    )
    return Peaks(gflops, gbps, MEASURED, method, device_name(), native, _host_cpu() if native else "")


def measure_remote(target_text: str, device, refresh: bool = False, progress=None) -> Peaks:
    """The peaks of the remote ``device`` (a ``remote.RemoteDevice``) for kernels built
    for ``target_text``, measured there by the same kernels as ``measure`` (fixed at
    ``REMOTE_STEPS`` steps, no probe), run through ``remote.run_remote`` (exported,
    uploaded, each timed alone, every step bounded); cached per device address and
    target."""
    target = tvm.target.Target(target_text)
    say = progress or (lambda message: None)
    return _cached(
        f"{CACHE_VERSION} | {target} | {device.describe()}", refresh, lambda: _measure_there(target_text, device, say)
    )


def _measure_there(target_text: str, device, say) -> Peaks:
    from tvm import relax

    from .remote import RemoteRun, run_remote

    target = tvm.target.Target(target_text)
    say(f"measuring the peak rates of {device.describe()} (once; cached)")
    kernels = fixed_kernels("llvm")
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(k.shape, k.dtype)) for i, k in enumerate(kernels)]
    with bb.function("main", params):
        outs = [
            bb.emit(relax.call_tir(bb.add_func(k.func, k.name), [x], relax.TensorType(k.shape, k.dtype)))
            for k, x in zip(kernels, params)
        ]
        bb.emit_func_output(relax.Tuple(outs))
    executable = tvm.compile(bb.get(), target=target)
    library = next(lib for lib in executable.mod.imports if lib.implements_function("copy", True))
    arrays = [np.ones(k.shape, k.dtype) for k in kernels]
    captured = [(k.name, 0, [a, np.zeros_like(a)]) for k, a in zip(kernels, arrays)]
    timings, _, where = run_remote(
        executable, library, target_text, RemoteRun("main", arrays, captured, 5, 3, say), device
    )
    gflops, gbps = peak_rates([_spec(k) for k in kernels], {name: min(results) for name, _, results in timings})
    method = f"TVM kernels built for {_built_for(target)}, run on {device.describe()} ({where}), {fixed_method('llvm')}"
    return Peaks(gflops, gbps, MEASURED, method, device.describe())


def peak_library(target_text: str):
    """``fixed_kernels`` built for ``target_text`` (llvm or cuda) in one runtime module,
    to export beside a bundle, and what its kernels are (``runner.rates.measure_peaks`` times
    them there)."""
    target = tvm.target.Target(target_text)
    kind = "cuda" if target.kind.name == "cuda" else "llvm"
    kernels = fixed_kernels(kind)
    library = tvm.compile(tvm.IRModule({k.name: k.func for k in kernels}), target=target)
    specs = [_spec(k) for k in kernels]
    built_for = f"cuda {target.attrs.get('arch', '')}".strip() if kind == "cuda" else _built_for(target)
    return library, {"kernels": specs, "built_for": built_for, "method": fixed_method(kind)}


def _mcpu(target) -> str:
    """The CPU a target names (``-mcpu``), "" for generic code."""
    return str(target.attrs.get("mcpu", "")) if hasattr(target, "attrs") else ""


def _built_for(target) -> str:
    mcpu = _mcpu(target)
    return f"{target.kind.name} -mcpu={mcpu}" if mcpu else f"{target.kind.name} without -mcpu (generic code)"


def _cached(key: str, refresh: bool, measured) -> Peaks:
    """The peaks cached under ``key`` unless ``refresh`` (or the entry is another
    version's), else ``measured()``, written to the cache (a cache that cannot be
    written is left alone) and returned."""
    path = _cache_path()
    cache = _read_cache(path)
    if not refresh and key in cache:
        try:
            found = make_record(Peaks, cache[key], str(path))
            if not problem(found):
                return found
        except FileFormatError:
            pass  # written by another version, or damaged: measure again
    peaks = measured()
    cache[key] = encode(peaks)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(cache, indent=1), overwrite=True)
    except OSError:
        pass
    return peaks


def _threads() -> str:
    """The threads TVM's runtime runs a parallel loop on (``TVM_NUM_THREADS``, or every core)."""
    return os.environ.get("TVM_NUM_THREADS") or str(os.cpu_count())


def _host_cpu() -> str:
    try:
        return str(tvm.target.codegen.llvm_get_system_cpu())
    except Exception:  # an LLVM without the query: no native figure
        return ""


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
