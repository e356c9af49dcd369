"""``python run.py``: profile the bundle beside run.py into its ``profile.json``
(``run_bundle``, the orchestration ``profiling.vm.profile`` runs too: capture, check the
calls against the lineage, warm up, time, end to end, peaks)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import BundleError
from .files import BUNDLE_SCHEMA, check_seal
from .gpu import CudaEvents, Nvtx
from .kvcache import Host, Server, machine_memory
from .rates import measure_peaks
from .runtime import DEVICE_TYPES, POOLED, Runtime, check_library, external, load_runtime, saved_inputs
from .timing import (
    Plan,
    Sites,
    Stamping,
    capture,
    clocked,
    count_mismatches,
    do_nothing,
    ran_counts,
    timed_rows,
)


@dataclass(frozen=True)
class RunOptions:
    """How run.py profiles a bundle: ``repeat`` timed runs in ``mode`` (``timeline`` or
    ``isolated``) after ``warmup`` untimed ones, ``number`` calls averaged per isolated
    timing, on ``device`` (None: the bundle's), with NVTX ranges (``nvtx``), timed by
    CUDA events (``events``), the device's peak rates measured (``peaks``)."""

    mode: str = "timeline"
    repeat: int = 5
    warmup: int = 1
    number: int = 3
    device: str | None = None
    nvtx: bool = False
    events: bool = False
    peaks: bool = True


def run_bundle(bundle: Path, options: RunOptions, say) -> dict:
    """Profile the bundle's entry here as ``profiling.vm.profile`` does: the profile's
    JSON (the bundle's template filled in)."""
    manifest, ffi, library, device = _open_bundle(bundle, options.device, say)
    mode, repeat = options.mode, options.repeat
    vm = library["vm_load_executable"]()
    vm["vm_initialization"](DEVICE_TYPES[device], 0, POOLED, *(() if device == "cpu" else (1, 0, POOLED)))
    runtime = Runtime(ffi, device)
    set_instrument = vm["set_instrument"]
    sites = Sites(frozenset(manifest["kernels"]), frozenset(manifest["subfunctions"]))
    spec, server = manifest.get("serve"), None
    if spec:  # an entry that takes a KV cache: served through the cache the build's create entry makes
        if mode != "timeline" or options.events:
            raise BundleError(
                f"{manifest['entry']} takes a KV cache: it is profiled in timeline mode, its cache's "
                "kernels timed with a synchronisation around each (not --mode isolated, not --events)"
            )
        sync, memory = (do_nothing, machine_memory()) if device == "cpu" else (runtime.sync, None)
        server = Server(Host(vm, set_instrument, ffi, runtime.tensor, sync, memory), spec, say=say)
        sites = Sites(sites.kernels, sites.skip, frozenset(spec["cache"]["kernels"]))
        say(server.describe())
        call = server.step
    else:
        function, args = vm[manifest["entry"]], saved_inputs(bundle, manifest, runtime, ffi)

        def call():
            return function(*args)

    say("capturing argument shapes")
    info, captured = capture(
        set_instrument, call, sites.skip, sites.kernels, runtime.copy if mode == "isolated" else None
    )
    problems = count_mismatches(manifest["kernels"], ran_counts(info, frozenset(manifest["builtins"])), sites.skip)
    if problems:
        raise BundleError("the lineage does not match this library: " + "; ".join(problems[:8]))
    stamping, how = _stamping(options, runtime, manifest["layers"], say)
    plan = Plan(call, set_instrument, sites, stamping, mode, repeat, options.warmup, server)
    timer_of = _timer_of(library, runtime, manifest, options) if mode == "isolated" else None
    rows = timed_rows(plan, captured, timer_of, say)
    how = how if mode == "timeline" else "each site timed alone"
    say("end-to-end timing")
    e2e = []
    for _ in range(max(repeat, 3)):
        start = time.perf_counter()
        call()
        runtime.sync()
        e2e.append((time.perf_counter() - start) * 1e6)
    found = measure_peaks(bundle, manifest, runtime, ffi, say) if options.peaks else None
    measured: dict[str, object] = {"peaks": found} if found else {}
    if server is not None:
        measured.update(
            step=[server.tokens, server.context],
            sequences=server.sequences,
            bound=server.spec.get("bound", []),
            inputs=[[name, list(a.shape), str(a.dtype)] for name, a in server.inputs],
            kv_pages=[[list(shape), dtype] for shape, dtype in server.pages.values()],
        )
    return {
        **manifest["profile"],
        "device": str(runtime.device),
        "mode": mode,
        "repeat": repeat,
        "records": [list(r[:6]) + ([r[6]] if r[6] else []) for r in rows],
        "args": {f"{n}#{k}": {"shapes": s, "dtypes": d, "addresses": a} for (n, k), (s, d, a) in info.items()},
        "e2e_us": e2e,
        "remote": f"host {platform.node() or '(unnamed)'} (a bundle's run.py; {how})",
        **measured,
    }


def _open_bundle(bundle: Path, device: str | None, say):
    """(its manifest, ``tvm_ffi``, its library loaded, the device) of a bundle checked:
    of this runner's schema, sealed, built for ``device`` (None: the one it was built
    for), each of its kernels in its library; else a ``BundleError`` saying what to do."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    if manifest.get("schema") != BUNDLE_SCHEMA:
        raise BundleError(
            f"{bundle / 'bundle.json'} is not a relaytrace bundle of this runner ({BUNDLE_SCHEMA}): "
            "bundle the model again"
        )
    check_seal(bundle, manifest)
    device = device or manifest["device"]
    if device != manifest["device"]:
        raise BundleError(
            f"this bundle was built for {manifest['device']}, not {device}: bundle a build for "
            f"{device} (relaytrace bundle --target ...)"
        )
    ffi = load_runtime(bundle, manifest, device)
    say(f"loading {manifest['library']} on {device}")
    library = ffi.load_module(str(bundle / manifest["library"]))
    missing = check_library(library, manifest)
    if missing:
        raise BundleError(
            f"the lineage does not belong to this library: {len(missing)} of its kernels are not "
            f"compiled in it ({', '.join(missing[:6])}); bundle the model again"
        )
    return manifest, ffi, library, device


def _stamping(options: RunOptions, runtime: Runtime, layers: dict, say) -> tuple[Stamping, str]:
    """How a timeline run stamps each call on this device, and how the profile says it
    was timed: a GPU's calls each synchronised, or timed by CUDA events (``--events``,
    never with ``--nvtx``); NVTX ranges named by ``layers`` when ``--nvtx`` finds the
    library."""
    sync_each = runtime.kind != "cpu"
    timer = None
    if options.events:
        if runtime.kind == "cpu" or options.mode != "timeline" or options.nvtx:
            raise BundleError(
                "--events times a timeline run on a GPU, without --nvtx (whose calls would sit between "
                "the events): give --device cuda and --mode timeline, and --nvtx in another run"
            )
        timer = CudaEvents.find()
        if timer is None:
            raise BundleError("--events needs the CUDA runtime library (libcudart.so.13), which did not load")
        sync_each = False
    ranges = None
    if options.nvtx:
        ranges = Nvtx.find(layers)
        say(
            "NVTX ranges per call site"
            if ranges
            else "--nvtx: no libnvToolsExt found (set RELAYTRACE_NVTX to its "
            "path, or pip install nvidia-nvtx-cu12); running without ranges"
        )
    how = (
        "each call timed by CUDA events around it"
        if timer is not None
        else "each call timed with a device synchronisation after it"
        if sync_each
        else "each call timed by the clock around it"
    )
    return Stamping(runtime.sync, sync_each, ranges, timer), how


def _timer_of(library, runtime: Runtime, manifest: dict, options: RunOptions):
    """How isolated mode times a site alone, by its name: a kernel by the runtime's time
    evaluator on the library that holds the kernels, a library call by the clock around it."""
    kernel_lib = next(
        (lib for lib in library.imports if any(lib.implements_function(k, True) for k in manifest["kernels"])), library
    )
    repeat, number = options.repeat, options.number
    externals = {
        name: clocked(external(library, runtime.ffi, name), runtime.sync, repeat, number)
        for name in manifest["library_calls"]
    }

    def timer_of(name):
        return externals[name] if name in externals else runtime.time_evaluator(kernel_lib, name, number, repeat)

    return timer_of


def main(argv=None) -> int:
    """``python run.py [--mode timeline|isolated] [--repeat N] [--device cpu|cuda]
    [--nvtx]``: profile the bundle beside this file into its ``profile.json``."""
    p = argparse.ArgumentParser(
        description="profile the relaytrace bundle beside this file into its profile.json; "
        "read it back with `relaytrace report DIR`"
    )
    p.add_argument("--mode", choices=["timeline", "isolated"], default="timeline")
    p.add_argument("--repeat", type=int, default=3, help="timed runs (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first, the capturing run among them")
    p.add_argument("--number", type=int, default=3, help="isolated: calls averaged per timing (default 3)")
    p.add_argument("--device", choices=sorted(DEVICE_TYPES), help="default: the device the bundle was built for")
    p.add_argument("--nvtx", action="store_true", help="an NVTX range per call, named after its layer and site")
    p.add_argument(
        "--events",
        action="store_true",
        help="cuda timeline: time each call by CUDA events (default: a synchronisation after each call)",
    )
    p.add_argument(
        "--no-peaks",
        action="store_true",
        help="do not measure the device's peak rates (the roofline then needs them given to report)",
    )
    here = Path(__file__).resolve().parent.parent  # run.py's folder: the bundle holds this package as runner/
    p.add_argument("--bundle", default=str(here), help="the bundle DIR (default: the one run.py is in)")
    p.add_argument("--out", help="where to write the profile (default: DIR/profile.json)")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.number < 1 or args.warmup < 1:
        p.error("--repeat, --number and --warmup are whole numbers at least 1")
    bundle = Path(args.bundle)
    out = Path(args.out) if args.out else bundle / "profile.json"

    # A Ctrl-C is noted as well as raised, and acted on again at the next progress line:
    # raised inside the VM's instrument (a callback from TVM's runtime) it is lost there
    interrupted: list[int] = []

    def on_interrupt(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)

    def say(message: str) -> None:
        if interrupted:
            raise KeyboardInterrupt
        print(f"run.py: {message}", file=sys.stderr, flush=True)

    try:
        if not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
            raise BundleError(f"cannot write {out}: {out.parent} is no writable directory (give --out FILE)")
        options = RunOptions(
            args.mode, args.repeat, args.warmup, args.number, args.device, args.nvtx, args.events, not args.no_peaks
        )
        data = run_bundle(bundle, options, say)
        say("writing the profile")
        partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(data))
        os.replace(partial, out)
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - every failure is one line, never a traceback
        if interrupted or isinstance(exc, KeyboardInterrupt):  # the runtime's error for a callback's interrupt
            print("run.py: interrupted", file=sys.stderr)
            return 130
        print(f"run.py: error: {exc if isinstance(exc, BundleError) else _failure(exc)}", file=sys.stderr)
        return 1
    say(f"wrote {out}: read it back with `relaytrace report {bundle}`")
    return 0


def _failure(exc: Exception) -> str:
    """A failure ``run_bundle`` did not foresee, in one line: a ``bundle.json`` field
    missing or of the wrong kind names the bundle as damaged."""
    if isinstance(exc, (KeyError, TypeError, ValueError, IndexError, AttributeError)):
        return f"the bundle is damaged ({type(exc).__name__}: {exc}): bundle the model again"
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else 'no message'}"
