"""TVM's runtime reached without the ``tvm`` package: ``libtvm_runtime.so`` loaded by
ctypes (``load_runtime``), tensors, copies, synchronisation and the time evaluator
through ``tvm_ffi`` (``Runtime``), a bundle's saved inputs read back."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from pathlib import Path

import numpy as np

from .errors import BundleError

DEVICE_TYPES = {"cpu": 1, "cuda": 2}  # DLPack device types


POOLED = 2  # the VM's pooled allocator


TIMED_CHUNK = 50  # timings per call of the runtime's time evaluator (a Ctrl-C waits for one call)


class Runtime:
    """TVM's runtime reached through ``tvm_ffi`` alone, for one device: tensors to and
    from it, copies, synchronisation, the time evaluator."""

    def __init__(self, ffi, device: str):
        self.ffi = ffi
        self.device = ffi.device(device, 0)
        self.kind = device
        get = ffi.get_global_func
        self._alloc, self._from_bytes = get("runtime.TVMTensorAllocWithScope"), get("runtime.TVMTensorCopyFromBytes")
        self._copy, self._sync = get("runtime.TVMTensorCopyFromTo"), get("runtime.Device_StreamSync")
        self._evaluator = get("runtime.RPCTimeEvaluator")

    def tensor(self, array: np.ndarray):
        array = np.ascontiguousarray(array)
        out = self._alloc(tuple(array.shape), str(array.dtype), self.device, None)
        self._from_bytes(out, ctypes.c_void_p(array.ctypes.data), array.nbytes)
        return out

    def copy(self, tensor):
        out = self._alloc(tuple(tensor.shape), str(tensor.dtype), tensor.device, None)
        self._copy(tensor, out)
        return out

    def sync(self) -> None:
        self._sync(self.device, 0)

    def time_evaluator(self, module, name: str, number: int, repeat: int):
        """``f(*args)``: the ``repeat`` timings of the kernel ``name``, each the mean of
        ``number`` calls, measured in calls of the runtime's evaluator of at most
        ``TIMED_CHUNK`` timings each, so that a Ctrl-C is seen between them."""

        def evaluator(n: int):
            feval = self._evaluator(module, name, DEVICE_TYPES[self.kind], 0, number, n, 0, 100, 0, 1, 0, "")
            return lambda *args: struct.unpack("@" + "d" * n, feval(*args))

        chunks = [TIMED_CHUNK] * (repeat // TIMED_CHUNK) + [repeat % TIMED_CHUNK] * bool(repeat % TIMED_CHUNK)
        made = {n: evaluator(n) for n in set(chunks)}
        return lambda *args: tuple(t for n in chunks for t in made[n](*args))


def load_runtime(bundle: Path, manifest: dict, device: str):
    """``tvm_ffi`` with the bundle's runtime libraries loaded (global, so the exported
    library finds TVM's symbols); the device's runtime (``libtvm_runtime_cuda.so``)
    needs its driver."""
    try:
        import tvm_ffi
    except ImportError as exc:
        raise BundleError(
            f"tvm_ffi cannot be imported ({exc}): pip install apache-tvm-ffi=={manifest.get('tvm_ffi', '?')}"
        ) from None
    for name in manifest["runtime"]:
        if device == "cpu" and "cuda" in name:
            continue
        try:
            ctypes.CDLL(str(bundle / name), ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise BundleError(
                f"cannot load {name}: {exc}"
                + (" (the CUDA runtime needs the NVIDIA driver's libcuda.so.1)" if "cuda" in name else "")
            ) from None
    return tvm_ffi


def check_library(library, manifest: dict) -> list[str]:
    """The compiled kernels of the lineage that the exported library does not hold."""
    return [
        k
        for k in manifest["kernels"]
        if k not in manifest["library_calls"] and not library.implements_function(k, True)
    ]


def saved_inputs(bundle: Path, manifest: dict, runtime: Runtime, ffi) -> list:
    """The entry's inputs the bundle saved (``.npy`` files), as tensors on the device."""
    args = []
    for param in manifest["inputs"]:
        arrays = [runtime.tensor(np.load(bundle / f, allow_pickle=False)) for f in param["files"]]
        args.append(ffi.convert(arrays) if param["tuple"] else arrays[0])
    return args


def external(library, ffi, name: str):
    """The function a library call names: compiled into one of the library's imports, or
    registered globally with TVM's runtime."""
    for lib in library.imports:
        if lib.implements_function(name, True):
            return lib.get_function(name, query_imports=True)
    return ffi.get_global_func(name)
