"""Profiling on a device reached over TVM RPC: one server (``rpc=HOST:PORT``) or a
device from a tracker's pool (``tracker=HOST:PORT, key=KEY``).

The VM's per-call instrument cannot run on the far side, so a remote profile measures
what can be measured there and says so: each kernel call site timed alone with
``time_evaluator``, and the entry function end to end. A site's arguments are the ones
it saw in one local run of the same executable when the build runs here
(``runs_here``); a build for another CPU or a GPU gets arguments of the shapes the
compiled IR gives each site (random floats, integer zeros: an index is never out of
range). The executable and its kernel library are exported (linked by the target's
cross compiler when its ``mtriple`` is not this machine's), uploaded and loaded on the
device of the target's kind. Every failure on the way (no server, no free device with
the key, no compiler, a library the device cannot load, a server gone mid-run, a
kernel over its time limit) is a one-line ``RelaytraceError``.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable

from attrs import frozen

from ..errors import RelaytraceError, describe, expect, expect_number

LONGEST_WAIT_S = 86400.0  # a day: the longest wait, session or kernel time limit a RemoteDevice takes


class StoppedAnswering(RelaytraceError):
    """A remote step ran out of time: the device stopped answering."""


# Sessions to a device that stopped answering (or that a Ctrl-C left waiting): never
# closed, since closing one waits for the device forever. A process holding one should
# end with ``os._exit`` (the CLI does), not by tearing down its objects.
ABANDONED: list = []


@frozen
class RemoteDevice:
    """Where to run: ``rpc`` (with the server's ``key`` if it has one) or ``tracker``
    with ``key``; ``wait_s`` bounds the wait for a connection or a free device,
    ``timeout_s`` each remote session, ``kernel_timeout_s`` the timing of one call site.
    ``compiler`` links the build for the device (default: this machine's, or
    ``MTRIPLE-g++`` for a target whose ``mtriple`` is another machine's)."""

    rpc: str | None = None
    tracker: str | None = None
    key: str | None = None
    wait_s: float = 30.0
    timeout_s: float = 600.0
    kernel_timeout_s: float = 120.0
    compiler: str | None = None

    def __attrs_post_init__(self):
        for name, give in (
            ("rpc", "'HOST:PORT'"),
            ("tracker", "'HOST:PORT'"),
            ("key", "the device key, a str"),
            ("compiler", "a compiler command, a str"),
        ):
            expect(f"RemoteDevice({name}=)", getattr(self, name), (str, None), give)
        for name in ("wait_s", "timeout_s", "kernel_timeout_s"):  # a thread waits at most threading.TIMEOUT_MAX
            expect_number(f"RemoteDevice({name}=)", getattr(self, name), 0, LONGEST_WAIT_S, whole=False, above=True)
        if (self.rpc is None) == (self.tracker is None):
            raise RelaytraceError("a remote device is rpc=HOST:PORT or tracker=HOST:PORT with key=KEY")
        if self.tracker is not None and not self.key:
            raise RelaytraceError("a tracker's device needs its key (--key KEY)")
        address(self.rpc or self.tracker)

    def describe(self) -> str:
        """``rpc HOST:PORT`` or ``tracker HOST:PORT key K``: how messages name the device."""
        return f"rpc {self.rpc}" if self.rpc else f"tracker {self.tracker} key {self.key}"

    def connect(self):
        """An RPC session to the device, within ``wait_s``."""
        from tvm import rpc

        host, port = address(self.rpc or self.tracker)
        if self.rpc:
            return _bounded(
                lambda: rpc.connect(host, port, key=self.key or "", session_timeout=self.timeout_s),
                self.wait_s,
                f"no RPC server answered at {self.rpc}",
            )
        tracker = _bounded(
            lambda: rpc.connect_tracker(host, port), self.wait_s, f"no RPC tracker answered at {self.tracker}"
        )
        return _bounded(
            lambda: tracker.request(self.key, priority=1, session_timeout=self.timeout_s),
            self.wait_s,
            f"the tracker at {self.tracker} had no free device with key {self.key!r}",
        )


def _host_arch() -> str:
    import tvm

    return str(tvm.target.Target("llvm").attrs["mtriple"]).split("-")[0]


def _target(target_text: str):
    """The build's target; a lineage that names none (made by ``trace()`` before it
    recorded targets) is taken as this machine's CPU."""
    import tvm

    return tvm.target.Target(target_text or "llvm")


def _triple(target) -> str:
    return str(target.attrs.get("mtriple", "") or "")


def target_name(target_text: str) -> str:
    """How a message names a target: its triple, else its kind (``cuda``)."""
    target = _target(target_text)
    return _triple(target) or target.kind.name


def local_device(target_text: str):
    """The device of this machine a build for the target runs on, or None: the CPU for
    a CPU target of this machine's architecture, ``cuda(0)`` (and the like) for a GPU
    target when this machine has that GPU and TVM's runtime for it."""
    import tvm

    target = _target(target_text)
    kind = target.kind.name
    if kind in ("llvm", "c"):
        triple = _triple(target)
        return tvm.cpu() if not triple or triple.split("-")[0] == _host_arch() else None
    try:
        device = tvm.device(kind, 0)
        return device if device.exist else None
    except Exception:  # noqa: BLE001 - a kind this runtime has no device API for
        return None


def runs_here(target_text: str) -> bool:
    """Whether a build for this target (as a lineage names it) runs on this machine."""
    return local_device(target_text) is not None


def exporter(target_text: str, compiler: str | None):
    """The ``fcompile`` that links the build for the device: ``compiler`` if given, the
    target triple's ``g++`` when the target is another machine's CPU, else the default
    (None). A compiler that is not installed is an error naming it."""
    from tvm.support import cc

    target = _target(target_text)
    host = target.host or target
    triple = _triple(host)
    if compiler is None and (not triple or triple.split("-")[0] == _host_arch()):
        return None
    compiler = compiler or f"{triple}-g++"
    if shutil.which(compiler) is None:
        hint = f"sudo apt-get install g++-{triple}" if compiler == f"{triple}-g++" else "install it"
        raise RelaytraceError(
            f"the build for {triple or host.kind.name} is linked with {compiler}, which is not "
            f"installed: {hint}, or name another compiler with --cc"
        )
    return cc.cross_compiler(compiler)


def address(text: str | None) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` with a port of 1 to 65535; anything else is an
    error saying the form (a larger port would wrap around in the socket layer)."""
    host, sep, port = (text or "").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RelaytraceError(f"a device address is HOST:PORT, not {text!r}")
    if not 0 < int(port) < 65536:
        raise RelaytraceError(f"a port is 1 to 65535, not {port} (in {text!r})")
    return host, int(port)


def _bounded(call, seconds: float, failure: str, late: str | None = None):
    """``call()`` in a thread, given ``seconds``: its result, or an error: ``failure``
    with the exception's first line, or ``late`` (default ``failure``) when time ran out."""
    result: dict = {}

    def run():
        try:
            result["value"] = call()
        except Exception as exc:  # noqa: BLE001 - reported below, one line
            result["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(min(seconds, threading.TIMEOUT_MAX))
    if "value" in result:
        return result["value"]
    if "error" in result:
        raise RelaytraceError(f"{failure}: {describe(result['error'])}")
    raise StoppedAnswering(f"{late or failure} within {seconds:g} s")


@frozen
class RemoteRun:
    """What a remote run times: each of ``captured`` (``[(kernel, call, argument
    arrays)]``) alone, and ``entry`` end to end on ``args`` (its inputs, numpy arrays):
    ``repeat`` timings each, of ``number`` calls averaged; ``say`` told each step."""

    entry: str
    args: list
    captured: list
    repeat: int
    number: int
    say: Callable[[str], None]


def run_remote(executable, kernel_library, target_text: str, run: RemoteRun, device: RemoteDevice):
    """(per-site timings, end-to-end seconds, device name) of ``run`` measured on
    ``device``; ``target_text`` is the build's target."""
    say = run.say
    fcompile = exporter(target_text, device.compiler)
    kind = _target(target_text).kind.name
    kind = "cpu" if kind in ("llvm", "c") else kind
    with tempfile.TemporaryDirectory(prefix="relaytrace-remote-") as tmp:
        paths = {"vm.so": executable, "kernels.so": kernel_library}
        for name, module in paths.items():
            try:
                module.export_library(os.path.join(tmp, name), fcompile=fcompile)
            except Exception as exc:
                raise RelaytraceError(f"could not link the build for the device: {describe(exc)}") from exc
        say(f"connecting to {device.describe()}")
        session = device.connect()
        held = _Held()
        try:
            say("uploading the executable")
            for name in paths:
                _step(device, f"uploading {name}", functools.partial(session.upload, os.path.join(tmp, name)))
            dev = _step(device, f"finding its {kind} device", functools.partial(session.device, kind, 0))
            result = _time_there(session, dev, kind, run, device, held)
        except (StoppedAnswering, KeyboardInterrupt):
            ABANDONED.append(held.take(session))  # freeing them would wait for the device
            raise
        except RelaytraceError:
            raise
        except Exception as exc:  # the server went away, a kernel failed there
            raise RelaytraceError(f"the remote run on {device.describe()} failed: {describe(exc)}") from exc
        owned = held.take(session)
        # Python's last references to the session (a remote device holds its session):
        # dropped while the device still answers, so that only ``owned`` frees it, bounded
        del session, dev
        try:
            _step(device, "releasing the build and closing the session", lambda: _free(owned))
        except StoppedAnswering as exc:  # every figure is in: keep them, leave the session
            ABANDONED.append(owned)
            say(f"{exc}; the session is left open, the figures are kept")
        except KeyboardInterrupt:
            ABANDONED.append(owned)  # a bounded step may still be freeing them
            raise
        return result


class _Held:
    """The remote objects of a run, each owned by one TVM list. Why: a remote object is
    freed by its destructor, which waits for the device's reply; run from Python it
    waits holding the interpreter lock, so on a stopped device every thread hangs, the
    time limits' too. Cleared by a packed call (``_free``), which waits without the
    lock, the last references go inside TVM and the wait can be bounded (``_step``).
    Objects are added as they are made; Python's own references are dropped before
    the list is cleared, so Python never frees one."""

    def __init__(self):
        import tvm_ffi

        self.lists: list = [tvm_ffi.List()]  # the run's; one more per site while it is timed

    def open(self) -> None:
        """Objects added from now on are taken out together by ``detach``."""
        import tvm_ffi

        self.lists.append(tvm_ffi.List())

    def detach(self):
        """The TVM list owning the objects added since ``open``, taken out of ``self``
        (in the caller's thread) before a bounded step frees it (``_free``): if the device
        stops meanwhile, ``take`` never reads a list that step is still clearing."""
        return self.lists.pop()

    def add(self, thing):
        """``thing`` (a TVM object, a list of them, or an object whose attributes hold
        them: a session, a VirtualMachine) owned by the newest list; returns it."""
        for value in _tvm_objects(thing):
            self.lists[-1].append(value)
        return thing

    def take(self, *more):
        """One TVM list owning every object held, and those of ``more``; ``self`` holds none."""
        import tvm_ffi

        for thing in more:
            self.add(thing)
        owned = tvm_ffi.List([value for owned in self.lists for value in owned])
        self.lists = [tvm_ffi.List()]
        return owned


def _tvm_objects(thing) -> list:
    from tvm_ffi.core import CObject

    if isinstance(thing, CObject):
        return [thing]
    if isinstance(thing, (list, tuple)):
        return [value for item in thing for value in _tvm_objects(item)]
    if isinstance(thing, dict):
        return _tvm_objects(list(thing.values()))
    if hasattr(thing, "__dict__") and not callable(thing):
        return _tvm_objects(list(vars(thing).values()))
    return []


def _free(owned) -> None:
    """Clears the TVM list ``owned`` in a packed call (run without the interpreter lock)."""
    import tvm_ffi

    tvm_ffi.get_global_func("ffi.ListClear")(owned)


def _step(device: RemoteDevice, what: str, call, failure: str | None = None):
    """One remote step other than timing, within the device's ``wait_s``: a server that
    stops answering (a stopped process, a cut link) never hangs a run, and Ctrl-C ends
    it while it waits. An error says ``failure`` (default: the run failed while
    ``what``), or, when time ran out, that the device stopped answering then."""
    return _bounded(
        call,
        device.wait_s,
        failure or f"the remote run on {device.describe()} failed {what}",
        f"{device.describe()} stopped answering while {what}",
    )


def _time_there(session, dev, kind: str, run: RemoteRun, device: RemoteDevice, held: _Held):
    """(site timings, end-to-end seconds, device name), every step bounded. Each remote
    object made is added to ``held``; a site's arguments and timer are freed after it
    (a model's every argument at once could fill a board), the build by the caller."""
    from tvm import relax

    entry, args, captured, repeat, number, say = run.entry, run.args, run.captured, run.repeat, run.number, run.say
    if not _step(device, f"finding its {kind} device", lambda: dev.exist):
        raise RelaytraceError(
            f"{device.describe()} has no {kind} device, which this build's target needs: "
            "profile it on a device of its kind, or build for this one's (--target)"
        )
    refused = f"{device.describe()} cannot load this build (is --target the device's own target?)"
    # each remote object held as soon as it is made: one Python let go of would be freed by
    # Python, waiting for the device with the interpreter lock held
    loaded = held.add(_step(device, "loading the build", functools.partial(session.load_module, "vm.so"), refused))
    vm = held.add(
        _step(device, "loading the build", functools.partial(relax.VirtualMachine, loaded, dev), refused)
    ).module
    kernels = held.add(_step(device, "loading the build", lambda: session.load_module("kernels.so"), refused))
    sites = []
    for i, (name, call, arrays) in enumerate(captured):
        say(f"remote isolated {i + 1}/{len(captured)}: {name}#{call}")
        held.open()
        remote_args = held.add(
            _step(device, f"sending the arguments of {name}#{call}", functools.partial(_tensors, arrays, dev))
        )
        timer = held.add(
            _step(
                device,
                f"preparing the timing of {name}#{call}",
                functools.partial(_timer, kernels, name, dev, number, repeat),
            )
        )
        results = _bounded(
            functools.partial(_timed, timer, remote_args, repeat),
            device.kernel_timeout_s,
            f"the remote run on {device.describe()} failed at {name}#{call}",
            f"kernel {name}#{call} did not finish on {device.describe()} (--kernel-timeout)",
        )
        sites.append((name, call, results))
        del remote_args, timer
        _step(device, f"releasing the arguments of {name}#{call}", functools.partial(_free, held.detach()))
    say("remote end-to-end timing")
    inputs = held.add(_step(device, f"sending the inputs of {entry}", functools.partial(_tensors, args, dev)))
    timer = held.add(
        _step(device, f"preparing the timing of {entry}", functools.partial(_timer, vm, entry, dev, 1, max(repeat, 3)))
    )
    e2e = _bounded(
        functools.partial(_timed, timer, inputs, max(repeat, 3)),
        device.kernel_timeout_s * max(len(captured), 1),
        f"the remote run on {device.describe()} failed timing {entry} end to end",
        f"{entry} did not finish on {device.describe()} (--kernel-timeout, per call site)",
    )
    return sites, e2e, f"remote {kind}(0)"  # str() of a remote device is an RPC table index


def _timer(module, name: str, dev, number: int, repeat: int):
    """TVM's timing function of ``name`` in the remote ``module`` (a packed function
    that returns ``repeat`` doubles as bytes): the one ``Module.time_evaluator`` wraps
    in a Python closure, which ``_Held`` could not own."""
    from tvm.runtime import _ffi_api

    return _ffi_api.RPCTimeEvaluator(
        module, name, dev.dlpack_device_type(), dev.index, number, repeat, 0, 100, 0, 1, 0, ""
    )


def _tensors(arrays, dev) -> list:
    """Each of ``arrays`` copied to the device ``dev``."""
    import tvm

    return [tvm.runtime.tensor(a, dev) for a in arrays]


def _timed(timer, arguments, repeat: int) -> tuple[float, ...]:
    """The per-repeat mean times (s) of one call of the timing function ``timer``."""
    return _seconds(timer(*arguments), repeat)


def _seconds(blob: bytes, repeat: int) -> tuple[float, ...]:
    """The ``repeat`` per-repeat mean times (s) in a timing function's result."""
    import struct

    return struct.unpack("@" + "d" * repeat, bytes(blob))
