"""A GPU's own instruments for a timeline run: NVTX ranges named after each call's layer
and site (``Nvtx``: Nsight Systems and Nsight Compute show layers), through
``libnvToolsExt`` found by ctypes, and CUDA events around each call (``CudaEvents``,
through ``libcudart``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

from .errors import BundleError

_NVTX_NAMES = ("libnvToolsExt.so.1", "libnvToolsExt.so")


class Nvtx:
    """NVTX ranges through ``libnvToolsExt`` (``nvtxRangePushA``/``nvtxRangePop``), each
    named ``layer [kernel#call]`` (``names``: site -> layer). Found by ctypes: the path
    in ``RELAYTRACE_NVTX``, the loader's search, a CUDA toolkit's, or the pip package
    ``nvidia-nvtx-cu*`` (PyTorch's) on ``sys.path``; ``Nvtx.find`` returns None without
    one."""

    def __init__(self, lib, names: dict[str, str]):
        self._push, self._pop = lib.nvtxRangePushA, lib.nvtxRangePop
        self._push.argtypes = [ctypes.c_char_p]
        self._names = names

    def name_of(self, kernel: str, call: int) -> bytes:
        site = f"{kernel}#{call}"
        layer = self._names.get(site)
        return (f"{layer} [{site}]" if layer else site).encode("utf-8", "replace")

    def push(self, name: bytes) -> None:
        self._push(name)

    def pop(self) -> None:
        self._pop()

    @classmethod
    def find(cls, names: dict[str, str]) -> Nvtx | None:
        for path in _nvtx_candidates():
            try:
                return cls(ctypes.CDLL(path), names)
            except (OSError, AttributeError):
                continue
        return None


def _nvtx_candidates() -> list[str]:
    found = [os.environ["RELAYTRACE_NVTX"]] if os.environ.get("RELAYTRACE_NVTX") else []
    by_loader = ctypes.util.find_library("nvToolsExt")
    found += [by_loader] if by_loader else []
    found += list(_NVTX_NAMES)
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"] + [str(Path(p) / "nvidia" / "nvtx") for p in sys.path]
    found += [str(Path(r) / lib / n) for r in roots if r for lib in ("lib", "lib64") for n in _NVTX_NAMES]
    return found


class CudaEvents:
    """CUDA events on the default stream (TVM's), through the CUDA runtime library by
    ctypes (``runtime.timer.cuda`` gives Python no start or stop): ``mark()`` records
    one, ``offsets_ns()`` (after a synchronisation) each mark's time after the first, on
    the device's clock."""

    def __init__(self, lib):
        self._lib = lib
        self._events: list = []
        self._used = 0

    def mark(self) -> None:
        if self._used == len(self._events):
            event = ctypes.c_void_p()
            self._check(self._lib.cudaEventCreate(ctypes.byref(event)), "cudaEventCreate")
            self._events.append(event)
        self._lib.cudaEventRecord(self._events[self._used], None)
        self._used += 1

    def offsets_ns(self) -> list[int]:
        """Each mark's nanoseconds after the first; the marks are then reused."""
        ms = ctypes.c_float()
        out = []
        for event in self._events[: self._used]:
            self._check(
                self._lib.cudaEventElapsedTime(ctypes.byref(ms), self._events[0], event), "cudaEventElapsedTime"
            )
            out.append(int(ms.value * 1e6))
        self._used = 0
        return out

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code:
            raise BundleError(f"{what} failed with CUDA error {code}")

    @classmethod
    def find(cls) -> CudaEvents | None:
        for path in ("libcudart.so.13", "libcudart.so"):
            try:
                return cls(ctypes.CDLL(path))
            except OSError:
                continue
        return None


def with_events(stamps, events: CudaEvents, t0: int) -> list:
    """Stamps whose times are the events recorded with them (one per stamp, in order),
    placed on the clock at the first stamp: each call's duration is then the device's."""
    offsets = events.offsets_ns()
    first = stamps[0][0] if stamps else t0
    return [(first + offset, name, before) for offset, (_, name, before) in zip(offsets, stamps)]
