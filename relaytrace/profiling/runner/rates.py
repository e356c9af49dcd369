"""The device's peak rates where a bundle runs: its peak kernels (``peaks.so``) timed,
their best times turned into GFLOP/s per dtype and GB/s (``peak_rates``), refused when
no device could have them (``implausible``)."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np

from .runtime import Runtime

MAX_GFLOPS, MAX_GBPS = 1e7, 1e5  # 10 PFLOP/s, 100 TB/s: beyond any one device, a timer's fault


def peak_rates(kernels: list[dict], best_s: dict[str, float]) -> tuple[dict[str, float], float]:
    """(GFLOP/s per dtype, the best lane width's; GB/s) from each peak kernel's best time
    (``kernels``: ``{name, dtype, flops, bytes}`` each, as ``profiling.peaks`` describes
    its fixed-size kernels); the one copy of this arithmetic, for RPC and bundles."""
    gflops: dict[str, float] = {}
    gbps = 0.0
    for kernel in kernels:
        seconds = best_s[kernel["name"]]
        if kernel["flops"]:
            gflops[kernel["dtype"]] = max(gflops.get(kernel["dtype"], 0.0), kernel["flops"] / seconds / 1e9)
        else:
            gbps = max(gbps, kernel["bytes"] / seconds / 1e9)
    return gflops, gbps


def implausible(gflops: dict[str, float], gbps: float) -> str:
    """Why measured peaks cannot be a device's (a rate of 0, or beyond ``MAX_GFLOPS`` /
    ``MAX_GBPS``: a kernel timed at 0 s), in words; "" when they can."""
    if not 0 < gbps <= MAX_GBPS:
        return f"{gbps:.3g} GB/s"
    wrong = [f"{rate:.3g} GFLOP/s ({dtype})" for dtype, rate in gflops.items() if not 0 < rate <= MAX_GFLOPS]
    return ", ".join(wrong)


def measure_peaks(bundle: Path, manifest: dict, runtime: Runtime, ffi, say) -> dict | None:
    """The device's peaks, measured by the bundle's peak kernels (``peaks.so``:
    ``profiling.peaks.fixed_kernels``) each timed by the time evaluator, best of 5: the
    profile's ``peaks`` (``model.peaks.Peaks``' fields, ``peak_rates``' figures); None,
    said, when they cannot be a device's (``implausible``)."""
    spec = manifest["peaks"]
    say(f"measuring the peak rates of {runtime.kind} ({len(spec['kernels'])} kernels)")
    library = ffi.load_module(str(bundle / spec["library"]))
    module = next(
        (lib for lib in library.imports if lib.implements_function(spec["kernels"][0]["name"], True)), library
    )
    best: dict[str, float] = {}
    for kernel in spec["kernels"]:
        array = np.ones(kernel["shape"], kernel["dtype"])
        args = (runtime.tensor(array), runtime.tensor(np.zeros_like(array)))
        best[kernel["name"]] = min(runtime.time_evaluator(module, kernel["name"], 3, 5)(*args))
    gflops, gbps = peak_rates(spec["kernels"], best)
    wrong = implausible(gflops, gbps)
    if wrong:
        say(f"peak rates not recorded: {wrong} cannot be this device's (give them to report: --device or --peak-*)")
        return None
    where = f"{runtime.device} of {platform.node() or 'an unnamed host'} (a bundle's run.py)"
    return {
        "gflops": gflops,
        "gbps": gbps,
        "source": "measured",
        "device": where,
        "method": f"TVM kernels built for {spec['built_for']}, run on {where}, {spec['method']}",
    }
