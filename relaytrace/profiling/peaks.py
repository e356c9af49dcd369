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
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np
import tvm
from tvm.script import tirx as T

from ..errors import LineageFormatError, RelaytraceError
from ..model.jsonio import make_record, write_atomic
from ..model.peaks import MEASURED, Peaks, problem

CHUNKS, ACCUMULATORS = 64, 8
LANE_WIDTHS = (4, 8, 16)  # the widest that keeps 8 chains in the target's registers is the peak (SSE: 4)
PROBE_STEPS, TIMED_SECONDS = 100, 0.02  # a short probe sizes the timed run to about 20 ms
COPY_ELEMENTS = 16 * 1024 * 1024
DTYPES = ("float32", "float16")
CACHE_VERSION = "peaks/3"  # a change of the kernels or the record measures again


def _fma_kernel(dtype: str, steps: int, lanes: int):
    shape = (CHUNKS, ACCUMULATORS, lanes)

    @T.prim_func
    def fma(a: T.Buffer(shape, dtype), out: T.Buffer(shape, dtype)):
        T.func_attr({"tirx.noalias": True})
        for p in T.parallel(CHUNKS):
            acc = T.alloc_buffer((ACCUMULATORS, lanes), dtype, scope="local")
            for u in T.unroll(ACCUMULATORS):
                for lane in T.vectorized(lanes):
                    acc[u, lane] = a[p, u, lane]
            for _ in range(steps):
                for u in T.unroll(ACCUMULATORS):
                    for lane in T.vectorized(lanes):
                        acc[u, lane] = T.call_intrin(dtype, "tirx.fma", acc[u, lane], T.Cast(dtype, 0.999),
                                                     T.Cast(dtype, 0.001))
            for u in T.unroll(ACCUMULATORS):
                for lane in T.vectorized(lanes):
                    out[p, u, lane] = acc[u, lane]

    return fma.with_attr("global_symbol", f"fma_{dtype}_x{lanes}")


def _copy_kernel():
    block = 4096

    @T.prim_func
    def copy(a: T.Buffer((COPY_ELEMENTS,), "float32"), b: T.Buffer((COPY_ELEMENTS,), "float32")):
        T.func_attr({"tirx.noalias": True})
        for o in T.parallel(COPY_ELEMENTS // block):
            for i in T.vectorized(block):
                b[o * block + i] = a[o * block + i]

    return copy.with_attr("global_symbol", "copy")


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
        raise RelaytraceError(f"peaks are measured on this machine's CPU, not for a {target.kind.name} target: "
                              "give a GPU's to profile or estimate with --peak-gflops and --peak-gbps, or name one "
                              "with --device (relaytrace peaks --list)")
    say = progress or (lambda message: None)
    return _cached(f"{CACHE_VERSION} | {target} | {device_name()} | {_threads()} threads", refresh,
                   lambda: _measure_here(target, say))


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
    method = (f"TVM kernels built for {_built_for(target)}, best of 5 time_evaluator runs: "
              f"{CHUNKS}x{ACCUMULATORS} vector FMA chains of {'/'.join(map(str, LANE_WIDTHS))} lanes (the best) "
              "per dtype, sized to about "
              f"{TIMED_SECONDS * 1e3:.0f} ms; "
              f"a parallel copy of {data.nbytes >> 20} MiB counted as read + write")
    return Peaks(gflops, gbps, MEASURED, method, device_name(), native, _host_cpu() if native else "")


REMOTE_STEPS = 2000  # no probe over RPC: 33 MFLOP a call, 1-30 ms on a board or a server


def measure_remote(target_text: str, device, refresh: bool = False, progress=None) -> Peaks:
    """The peaks of the remote ``device`` (a ``remote.RemoteDevice``) for kernels built
    for ``target_text``, measured there by the same kernels as ``measure`` (fixed at
    ``REMOTE_STEPS`` steps, no probe), run through ``remote.run_remote`` (exported,
    uploaded, each timed alone, every step bounded); cached per device address and
    target."""
    target = tvm.target.Target(target_text)
    say = progress or (lambda message: None)
    return _cached(f"{CACHE_VERSION} | {target} | {device.describe()}", refresh,
                   lambda: _measure_there(target_text, device, say))


def _measure_there(target_text: str, device, say) -> Peaks:
    from tvm import relax

    from .remote import run_remote

    target = tvm.target.Target(target_text)
    say(f"measuring the peak rates of {device.describe()} (once; cached)")
    chains = [(dtype, lanes) for dtype in DTYPES for lanes in LANE_WIDTHS]
    funcs = [_fma_kernel(dtype, REMOTE_STEPS, lanes) for dtype, lanes in chains] + [_copy_kernel()]
    shapes = [(CHUNKS, ACCUMULATORS, lanes) for _, lanes in chains] + [(COPY_ELEMENTS,)]
    dtypes = [dtype for dtype, _ in chains] + ["float32"]
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(shape, dtype)) for i, (shape, dtype) in
              enumerate(zip(shapes, dtypes))]
    with bb.function("main", params):
        outs = [bb.emit(relax.call_tir(bb.add_func(func, str(func.attrs["global_symbol"])), [x],
                                       relax.TensorType(shape, dtype)))
                for func, x, shape, dtype in zip(funcs, params, shapes, dtypes)]
        bb.emit_func_output(relax.Tuple(outs))
    executable = tvm.compile(bb.get(), target=target)
    library = next(lib for lib in executable.mod.imports if lib.implements_function("copy", True))
    arrays = [np.ones(shape, dtype) for shape, dtype in zip(shapes, dtypes)]
    captured = [(str(f.attrs["global_symbol"]), 0, [a, np.zeros_like(a)]) for f, a in zip(funcs, arrays)]
    timings, _, where = run_remote(executable, library, target_text, "main", arrays, captured, device, 5, 3, say)
    best = {name: min(results) for name, _, results in timings}
    gflops = {dtype: max(_fma_flops(REMOTE_STEPS, lanes) / best[f"fma_{dtype}_x{lanes}"] / 1e9
                         for lanes in LANE_WIDTHS) for dtype in DTYPES}
    gbps = 2.0 * arrays[-1].nbytes / best["copy"] / 1e9
    method = (f"TVM kernels built for {_built_for(target)}, run on {device.describe()} ({where}), best of 5 "
              f"time_evaluator runs: {CHUNKS}x{ACCUMULATORS} vector FMA chains of {'/'.join(map(str, LANE_WIDTHS))} "
              f"lanes (the best) x {REMOTE_STEPS} steps per dtype; a parallel copy of {arrays[-1].nbytes >> 20} MiB "
              "counted as read + write")
    return Peaks(gflops, gbps, MEASURED, method, device.describe())


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
        except LineageFormatError:
            pass  # written by another version, or damaged: measure again
    peaks = measured()
    cache[key] = {"gflops": peaks.gflops, "gbps": peaks.gbps, "source": peaks.source, "method": peaks.method,
                  "device": peaks.device, "native_gflops": peaks.native_gflops, "native_mcpu": peaks.native_mcpu}
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
