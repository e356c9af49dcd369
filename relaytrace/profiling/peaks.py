"""The machine's peak rates, measured with small TVM-built kernels where a profile runs.

Two kernels, built for the profiled build's own target (the ceiling its kernels can
reach: a target without ``mcpu`` gets generic x86-64 code), timed with
``time_evaluator``, best of several runs:

- FMA-bound: ``acc = acc * a + b`` on 8 independent vector accumulators of 16 lanes
  held in registers, 64 parallel chunks, counted 2 FLOPs each, as many steps as a
  short probe says fill about 20 ms; per dtype (float32, float16).
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

from ..errors import RelaytraceError
from ..model.jsonio import write_atomic
from ..model.peaks import MEASURED, Peaks

CHUNKS, ACCUMULATORS, LANES = 64, 8, 16
PROBE_STEPS, TIMED_SECONDS = 100, 0.02  # a short probe sizes the timed run to about 20 ms
COPY_ELEMENTS = 16 * 1024 * 1024
DTYPES = ("float32", "float16")
CACHE_VERSION = "peaks/1"  # a change of the kernels or the record measures again


def _fma_kernel(dtype: str, steps: int):
    @T.prim_func
    def fma(a: T.Buffer((CHUNKS, ACCUMULATORS, LANES), dtype)):
        T.func_attr({"tirx.noalias": True})
        for p in T.parallel(CHUNKS):
            acc = T.alloc_buffer((ACCUMULATORS, LANES), dtype, scope="local")
            for u in T.unroll(ACCUMULATORS):
                for lane in T.vectorized(LANES):
                    acc[u, lane] = a[p, u, lane]
            for _ in range(steps):
                for u in T.unroll(ACCUMULATORS):
                    for lane in T.vectorized(LANES):
                        acc[u, lane] = T.call_intrin(dtype, "tirx.fma", acc[u, lane], T.Cast(dtype, 0.999),
                                                     T.Cast(dtype, 0.001))
            for u in T.unroll(ACCUMULATORS):
                for lane in T.vectorized(LANES):
                    a[p, u, lane] = acc[u, lane]

    return fma.with_attr("global_symbol", "fma")


def _copy_kernel():
    block = 4096

    @T.prim_func
    def copy(a: T.Buffer((COPY_ELEMENTS,), "float32"), b: T.Buffer((COPY_ELEMENTS,), "float32")):
        T.func_attr({"tirx.noalias": True})
        for o in T.parallel(COPY_ELEMENTS // block):
            for i in T.vectorized(block):
                b[o * block + i] = a[o * block + i]

    return copy.with_attr("global_symbol", "copy")


def _best_seconds(func, name: str, target, arrays, number: int) -> float:
    lib = tvm.compile(tvm.IRModule({name: func}), target=target)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    return min(lib.mod.time_evaluator(name, dev, number=number, repeat=5)(*tensors).results)


def _gflops(target, dtype: str) -> float:
    data = np.ones((CHUNKS, ACCUMULATORS, LANES), dtype)
    probe = _best_seconds(_fma_kernel(dtype, PROBE_STEPS), "fma", target, [data], number=1)
    steps = max(PROBE_STEPS, int(PROBE_STEPS * TIMED_SECONDS / max(probe, 1e-9)))
    seconds = _best_seconds(_fma_kernel(dtype, steps), "fma", target, [data], number=3)
    return 2.0 * CHUNKS * ACCUMULATORS * LANES * steps / seconds / 1e9


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
                              "give a GPU's peaks with --peak-gflops and --peak-gbps, or name one with --device")
    key = f"{CACHE_VERSION} | {target} | {device_name()}"
    path = _cache_path()
    cache = _read_cache(path)
    if not refresh and key in cache:
        try:
            return Peaks(**cache[key])
        except TypeError:
            pass  # a cache written by another version: measure again
    say = progress or (lambda message: None)
    say("measuring this machine's peak rates (once; cached)")
    gflops = {dtype: _gflops(target, dtype) for dtype in DTYPES}
    mcpu = str(target.attrs.get("mcpu", "")) if hasattr(target, "attrs") else ""
    native = None
    if not mcpu:
        host = tvm.target.Target({"kind": "llvm", "mcpu": _host_cpu()}) if _host_cpu() else None
        native = _gflops(host, "float32") if host is not None else None
    data = np.ones(COPY_ELEMENTS, "float32")
    seconds = _best_seconds(_copy_kernel(), "copy", target, [data, np.zeros_like(data)], number=3)
    gbps = 2.0 * data.nbytes / seconds / 1e9
    built = f"{target.kind.name} -mcpu={mcpu}" if mcpu else f"{target.kind.name} without -mcpu (generic code)"
    method = (f"TVM kernels built for {built}, best of 5 time_evaluator runs: "
              f"{CHUNKS}x{ACCUMULATORS} vector FMA chains of {LANES} lanes per dtype, sized to about "
              f"{TIMED_SECONDS * 1e3:.0f} ms; "
              f"a parallel copy of {data.nbytes >> 20} MiB counted as read + write")
    peaks = Peaks(gflops, gbps, MEASURED, method, device_name(), native)
    cache[key] = {"gflops": peaks.gflops, "gbps": peaks.gbps, "source": peaks.source, "method": peaks.method,
                  "device": peaks.device, "native_gflops": peaks.native_gflops}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(cache, indent=1), overwrite=True)
    except OSError:
        pass
    return peaks


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
