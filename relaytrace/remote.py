"""Profiling on a device reached over TVM RPC: one server (``rpc=HOST:PORT``) or a
device from a tracker's pool (``tracker=HOST:PORT, key=KEY``).

The VM's per-call instrument cannot run on the far side, so a remote profile measures
what can be measured there and says so: each kernel call site timed alone with
``time_evaluator`` on the arguments it saw (captured by one local run of the same
executable, so integer indices are valid), and the entry function end to end. The
executable and its kernel library are exported, uploaded and loaded on the device.
Every failure on the way (no server, no free device with the key, a server gone
mid-run) is a one-line ``RelaytraceError``.
"""

from __future__ import annotations

import os
import tempfile
import threading

from attrs import frozen

from .errors import RelaytraceError


@frozen
class RemoteDevice:
    """Where to run: ``rpc`` (with the server's ``key`` if it has one) or ``tracker``
    with ``key``; ``wait_s`` bounds the wait for a connection or a free device,
    ``timeout_s`` each remote session."""

    rpc: str | None = None
    tracker: str | None = None
    key: str | None = None
    wait_s: float = 30.0
    timeout_s: float = 600.0

    def __attrs_post_init__(self):
        if (self.rpc is None) == (self.tracker is None):
            raise RelaytraceError("a remote device is rpc=HOST:PORT or tracker=HOST:PORT with key=KEY")
        if self.tracker is not None and not self.key:
            raise RelaytraceError("a tracker's device needs its key (--key KEY)")
        _address(self.rpc or self.tracker)

    def describe(self) -> str:
        return f"rpc {self.rpc}" if self.rpc else f"tracker {self.tracker} key {self.key}"

    def connect(self):
        """An RPC session to the device, within ``wait_s``."""
        from tvm import rpc

        host, port = _address(self.rpc or self.tracker)
        if self.rpc:
            return _bounded(lambda: rpc.connect(host, port, key=self.key or "", session_timeout=self.timeout_s),
                            self.wait_s, f"no RPC server answered at {self.rpc}")
        tracker = _bounded(lambda: rpc.connect_tracker(host, port), self.wait_s,
                           f"no RPC tracker answered at {self.tracker}")
        return _bounded(lambda: tracker.request(self.key, priority=1, session_timeout=self.timeout_s),
                        self.wait_s, f"the tracker at {self.tracker} had no free device with key {self.key!r}")


def _address(text: str) -> tuple[str, int]:
    host, sep, port = (text or "").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RelaytraceError(f"a device address is HOST:PORT, not {text!r}")
    return host, int(port)


def _bounded(call, seconds: float, failure: str):
    """``call()`` in a thread, given ``seconds``: its result, or ``failure`` as an error."""
    result: dict = {}

    def run():
        try:
            result["value"] = call()
        except Exception as exc:  # noqa: BLE001 - reported below, one line
            result["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if "value" in result:
        return result["value"]
    why = f": {_first_line(result['error'])}" if "error" in result else f" within {seconds:g} s"
    raise RelaytraceError(failure + why)


def _first_line(exc: Exception) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_remote(executable, kernel_library, entry: str, args, captured, device: RemoteDevice,
               repeat: int, number: int, say):
    """(per-site timings, end-to-end seconds) measured on ``device``: ``captured`` is
    ``[(kernel, call, argument tensors)]`` from a local run, ``args`` the entry's
    inputs (numpy arrays)."""
    import tvm
    from tvm import relax

    say(f"connecting to {device.describe()}")
    session = device.connect()
    try:
        with tempfile.TemporaryDirectory(prefix="relaytrace-remote-") as tmp:
            vm_path, kernels_path = os.path.join(tmp, "vm.so"), os.path.join(tmp, "kernels.so")
            executable.export_library(vm_path)
            kernel_library.export_library(kernels_path)
            say("uploading the executable")
            session.upload(vm_path)
            session.upload(kernels_path)
        dev = session.cpu()
        remote_vm = relax.VirtualMachine(session.load_module("vm.so"), dev)
        kernels = session.load_module("kernels.so")
        sites = []
        for i, (name, call, tensors) in enumerate(captured):
            say(f"remote isolated {i + 1}/{len(captured)}: {name}#{call}")
            remote_args = [tvm.runtime.tensor(t.numpy(), dev) for t in tensors]
            sites.append((name, call, kernels.time_evaluator(name, dev, number=number, repeat=repeat)(*remote_args)
                          .results))
        say("remote end-to-end timing")
        inputs = [tvm.runtime.tensor(a, dev) for a in args]
        e2e = remote_vm.time_evaluator(entry, dev, number=1, repeat=max(repeat, 3))(*inputs).results
        return sites, e2e, "remote cpu(0)"  # str() of a remote device is an RPC table index
    except RelaytraceError:
        raise
    except Exception as exc:  # the server went away, a kernel failed there
        raise RelaytraceError(f"the remote run on {device.describe()} failed: {_first_line(exc)}") from exc
