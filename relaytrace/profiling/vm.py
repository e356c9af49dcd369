"""A per-call profiler on the Relax VM (TVM removed its own in v0.24).

One entry function is profiled (``main`` by default, or the only one):
timeline: every call of one run of it, in order, timed by ``set_instrument``.
isolated: every kernel call site timed alone with ``time_evaluator`` on the
arguments it saw in a real run, like the old debug executor's per-op figures.
Both also time the entry end to end, so the Profile can say what the per-call sum
leaves out (the VM's own dispatch, Python in the instrument). Calls of Relax
subfunctions are not records of their own: their kernels are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import tvm
from attrs import frozen
from tvm import relax

from ..errors import RelaytraceError, UsageError, describe, expect, expect_number
from ..model.entry import ParamKind, default_context, grouped
from ..model.lineage import Lineage
from ..model.profile import FROM_IR, LOCAL_RUN, ArgInfo, CallKind, CallRecord, Mode, Profile
from ..model.shapes import bind
from ..model.sitekey import SiteKey
from .runner import timing
from .serve import Server, Serving, served_spec, takes_cache


@frozen
class Runs:
    """How an entry is timed: ``warmup`` runs untimed (the first also captures each
    site's arguments), then ``repeat`` timed runs in ``mode``, ``number`` calls averaged
    per isolated timing; ``say`` is told each step."""

    mode: Mode
    repeat: int
    warmup: int = 1
    number: int = 3
    say: Callable[[str], None] = lambda message: None


@frozen
class Local:
    """An entry run on this machine: its VM, its device, and the entry's lineage
    (``Lineage.for_entry``)."""

    vm: Any
    device: Any
    lineage: Lineage


@frozen
class Measured:
    """What the runs measured, before it is a ``Profile``: each call's records, each
    site's argument shapes (``SiteKey`` -> ``ArgInfo``), the entry's end-to-end times in
    seconds, the device they ran on, the remote device (``""``: here) and where the
    timed arguments came from (``LOCAL_RUN`` or ``FROM_IR``)."""

    records: list[CallRecord]
    arg_info: dict
    e2e_s: list[float]
    device: str
    remote: str = ""
    arguments: str = LOCAL_RUN


def profile(  # noqa: PLR0913 - the public API's keyword options, each checked and then held in a record
    executable,
    lineage: Lineage,
    inputs,
    device=None,
    warmup: int = 1,
    repeat: int = 5,
    mode: Mode | str = Mode.TIMELINE,
    number: int = 3,
    progress=None,
    entry: str | None = None,
    remote=None,
    peaks=None,
    serving: Serving | None = None,
) -> Profile:
    """Run the entry function ``entry`` (default ``main``, or the only one) on
    ``inputs`` and time every call; see the module docstring for the modes. Inputs
    may take any sizes the entry's symbolic dims allow; the profile records them.
    ``remote`` (a ``remote.RemoteDevice``) times the kernels and the entry on a device
    over RPC instead, isolated (``remote.run_remote``): a build for this machine has
    each site's arguments captured in one local run, a build for another CPU or a GPU
    gets arguments of the shapes its IR gives each site (``site_arguments``).
    ``repeat`` (timed runs) and ``number`` (calls averaged per isolated timing) are
    whole numbers at least 1, refused before any work otherwise. ``peaks``
    (``model.peaks.Peaks``): the device's ceilings, saved in the profile; by default
    measured here for the build's CPU target (``profiling.peaks.measure``, cached), none
    for a remote device. An entry that takes a KV cache (an LLM's ``prefill`` or
    ``decode``) is run as served (``serve.Server``): ``inputs`` are not taken, its
    tensors are seeded random data, ``serving`` says how many tokens and how much
    context (default: 32 new tokens for an entry of any length, one after a context of 32
    for the rest); timeline mode only, here only. An argument of the wrong type or out
    of its range is a ``UsageError`` saying what to give, before any work."""
    runs = _checked_runs(warmup, repeat, number, progress)
    _check_arguments(executable, lineage, entry, remote, peaks, serving)
    served = serving is not None or (entry is not None and takes_cache(lineage, entry))
    if served:
        _check_served(inputs, entry, remote, mode)
    elif remote is not None:
        mode = Mode.ISOLATED
    elif mode not in (Mode.TIMELINE, Mode.ISOLATED):
        raise RelaytraceError(f"unknown profiling mode {mode!r}: use 'timeline' or 'isolated'")
    runs = attrs.evolve(runs, mode=Mode(mode))
    entry = lineage.entry(entry)
    lineage = lineage.for_entry(entry)  # a run of one entry runs its sites only
    library = _kernel_library(executable, lineage)
    if served:
        device = device or device_here(lineage.build.target)
        found = _served_profile(Local(_vm(executable, device), device, lineage), entry, runs, serving)
        return attrs.evolve(found, peaks=_local_peaks(lineage, peaks, runs.say))
    arrays = check_inputs(lineage, inputs, entry)
    if remote is not None:
        from .remote import ABANDONED

        left = len(ABANDONED)
        found = _remote_profile(executable, library, lineage, arrays, remote, runs)
        return attrs.evolve(found, peaks=peaks if peaks is not None else _remote_peaks(lineage, remote, left, runs.say))
    device = device or device_here(lineage.build.target)
    args = [on_device(a, device) for a in arrays]
    vm = _vm(executable, device)
    try:
        function = vm[entry]
    except AttributeError:  # the VM's own words: "Module has no function 'main'"
        raise RelaytraceError(
            f"the built executable has no function {entry}: the build's pipeline dropped it "
            "(a pipeline must keep the module's Relax functions)"
        ) from None
    externals = (
        {name: _external(executable, name) for name in lineage.library_calls} if runs.mode == Mode.ISOLATED else {}
    )
    at = Local(vm, device, lineage)
    records, arg_info = _local_runs(at, lambda: function(*args), runs, (library, externals))
    e2e = vm.time_evaluator(entry, device, number=1, repeat=max(runs.repeat, 3))(*args).results
    return attrs.evolve(
        _profile(lineage, entry, arrays, runs, Measured(records, arg_info, list(e2e), str(device))),
        peaks=_local_peaks(lineage, peaks, runs.say),
    )


def _checked_runs(warmup, repeat, number, progress) -> Runs:
    """``profile``'s timing options, each of its type and range (or a ``UsageError``
    naming it), as ``Runs`` (the mode is settled after: it depends on the entry)."""
    for name, value in (("repeat", repeat), ("number", number)):  # they count timed runs
        expect_number(f"profile({name}=)", value, 1)
    expect_number("profile(warmup=)", warmup, 0)
    expect("profile(progress=)", progress, (Callable, None), "a function called with each progress line")
    return Runs(Mode.TIMELINE, repeat, warmup, number, progress or (lambda message: None))


def _check_arguments(executable, lineage, entry, remote, peaks, serving) -> None:
    """``profile``'s other arguments, each of its type, or a ``UsageError`` naming it;
    the options first, so that each is refused without a look at the model."""
    from ..model.peaks import Peaks
    from .remote import RemoteDevice

    expect("profile(entry=)", entry, (str, None), "an entry function's name")
    expect("profile(remote=)", remote, (RemoteDevice, None), "relaytrace.RemoteDevice(rpc='HOST:PORT')")
    expect("profile(peaks=)", peaks, (Peaks, None), "relaytrace.model.peaks.Peaks (given(gflops, gbps) or named(NAME))")
    expect("profile(serving=)", serving, (Serving, None), "relaytrace.profiling.serve.Serving(tokens=, context=)")
    expect("profile's executable", executable, tvm.runtime.Executable, "the executable relaytrace.build returned")
    expect("profile's lineage", lineage, Lineage, "the Lineage relaytrace.build returned with the executable")


def _check_served(inputs, entry, remote, mode) -> None:
    """An entry that takes a KV cache is served: no inputs given, on this machine, in
    timeline mode; anything else is a ``UsageError`` saying why."""
    if list(inputs):
        raise UsageError(
            f"{entry} takes a KV cache: it is profiled as served, on inputs relaytrace makes "
            "(seeded random embeddings and weights); pass no inputs ([])"
        )
    if remote is not None:
        raise UsageError(
            f"{entry} takes a KV cache: it is profiled as served on this machine only (the cache's "
            "kernels are timed inside the builtin that runs them, in this process)"
        )
    if mode != Mode.TIMELINE:
        raise UsageError(
            f"{entry} takes a KV cache: it is profiled in timeline mode, where the cache's own kernels "
            "are timed inside the builtin that runs them"
        )


def _local_runs(at: Local, call, runs: Runs, compiled=None, server=None):
    """(records, argument shapes) of ``call`` (one run of the entry) at ``at``: one run
    captures each site's arguments, ``warmup - 1`` more run untimed, then ``repeat``
    timed runs in ``runs.mode`` (isolated: each site timed alone with ``compiled``, the
    kernel library and the library calls' functions); a ``server``'s KV-cache kernels
    stamp the timeline too."""
    skip = frozenset(at.lineage.subfunctions)
    runs.say("capturing argument shapes")
    arg_info, captured = _capture(at.vm, call, at.lineage, skip, copy=(runs.mode == Mode.ISOLATED))
    _check_names(at.lineage, arg_info)
    plan = timing.Plan(
        call,
        at.vm.set_instrument,
        _sites(at.lineage, skip, server),
        timing.Stamping(at.device.sync),
        runs.mode.value,
        runs.repeat,
        runs.warmup,
        server,
    )
    timer_of = _timer_of(at.device, runs, compiled) if runs.mode == Mode.ISOLATED else None
    records = _records(timing.timed_rows(plan, captured, timer_of, runs.say))
    runs.say("end-to-end timing")
    return records, arg_info


def _local_peaks(lineage, peaks, say):
    """``peaks`` as given, else measured here for the build's CPU target (None for another)."""
    if peaks is not None:
        return peaks
    from .peaks import measure

    try:
        return measure(lineage.build.target, progress=say)
    except RelaytraceError:  # not a CPU target: no ceilings, the rates stand alone
        return None


def _served_profile(at: Local, entry: str, runs: Runs, serving: Serving | None) -> Profile:
    """``profile`` of an entry that takes a KV cache, run as served (``serve.Server``),
    without the device's ceilings."""
    default = Serving(context=default_context(at.lineage.build.params[entry]))
    server = Server(at.vm, at.device, served_spec(at.lineage, entry, serving or default), say=runs.say)
    runs.say(server.describe())
    records, arg_info = _local_runs(at, server.step, runs, server=server)
    e2e = []
    for _ in range(max(runs.repeat, 3)):
        start = time.perf_counter()
        server.step()
        at.device.sync()
        e2e.append(time.perf_counter() - start)
    arrays = [a for _, a in server.inputs]
    found = _profile(at.lineage, entry, arrays, runs, Measured(records, arg_info, e2e, str(at.device)))
    return attrs.evolve(
        found,
        step=(server.tokens, server.context),
        sequences=server.sequences,
        bound=tuple((d, v, where) for d, v, where in server.spec["bound"]),
        inputs=tuple((n, tuple(a.shape), str(a.dtype)) for n, a in server.inputs),
        kv_pages=tuple(server.pages.values()),
    )


def device_here(target_text: str):
    """This machine's device for the build, or an error pointing to a remote one."""
    from .remote import local_device, target_name

    device = local_device(target_text)
    if device is None:
        raise RelaytraceError(
            f"a build for {target_name(target_text)} does not run on this machine: profile it on its device with "
            "--rpc HOST:PORT or --tracker HOST:PORT --key KEY (API: remote=relaytrace.RemoteDevice(...), or "
            "device= for a device of this machine)"
        )
    return device


def _vm(executable, device, why: str = ""):
    try:
        return relax.VirtualMachine(executable, device)
    except Exception as exc:
        raise RelaytraceError(f"this build cannot run on {device}{why}: {describe(exc)}") from exc


def _remote_profile(executable, library, lineage, arrays, remote, runs: Runs) -> Profile:
    """Every site of the lineage's entry timed isolated on ``remote``, plus the entry end
    to end: on the arguments a local run gives each site when the build runs here, else
    on arguments of the shapes the compiled IR gives it (``site_arguments``). A build
    with library calls is refused: the device is sent the compiled kernels only."""
    from .remote import RemoteRun, local_device, run_remote

    if lineage.library_calls:
        raise RelaytraceError(
            f"{len(lineage.library_calls)} library call(s) ({', '.join(sorted(lineage.library_calls)[:3])}) are timed "
            "in a local profile only: a remote one sends the device the kernels TVM compiled, not external "
            "functions; profile on the machine that runs them"
        )
    entry, say = lineage.entry(), runs.say
    device = local_device(lineage.build.target)
    if device is not None:
        say("capturing each site's arguments in a local run")
        vm = _vm(
            executable,
            device,
            " (a remote profile of a build for this machine captures each site's arguments in one local run)",
        )
        args = [on_device(a, device) for a in arrays]
        function = vm[entry]
        arg_info, captured = _capture(vm, lambda: function(*args), lineage, frozenset(lineage.subfunctions), copy=True)
        _check_names(lineage, arg_info)
        captured = [(name, k, [t.numpy() for t in tensors]) for name, k, tensors in captured]
        source = LOCAL_RUN
    else:
        arg_info, captured = site_arguments(lineage)
        source = FROM_IR
    run = RemoteRun(entry, arrays, captured, runs.repeat, runs.number, say)
    timings, e2e, where = run_remote(executable, library, lineage.build.target, run, remote)
    records = _site_records(timings, runs.repeat)
    return _profile(lineage, entry, arrays, runs, Measured(records, arg_info, e2e, where, remote.describe(), source))


def _remote_peaks(lineage, remote, left: int, say):
    """The remote device's ceilings, measured there; None (said) when it stopped answering
    during the profile (``ABANDONED`` grew past ``left``) or the measurement failed: the
    profile stands, its rates without ceilings."""
    from .peaks import measure_remote
    from .remote import ABANDONED

    if len(ABANDONED) > left:  # it stopped answering once every figure was in
        say(f"peak rates not measured: {remote.describe()} stopped answering")
        return None
    try:
        return measure_remote(lineage.build.target, remote, progress=say)
    except RelaytraceError as exc:
        say(f"peak rates not measured on {remote.describe()}: {exc}")
        return None


def site_arguments(lineage: Lineage, seed: int = 0):
    """(``SiteKey`` -> ArgInfo, ``[(kernel, call, arrays)]``) for every kernel site of the
    lineage, in run order, made from the shapes the compiled IR gives its arguments:
    floats drawn from a normal distribution, integers zero (an index is never out of
    range). A site whose shapes are known only at run time is an error naming it."""
    rng = np.random.default_rng(seed)
    info, captured = {}, []
    for site in lineage.call_sites:
        if not site.arguments:
            raise RelaytraceError(
                f"the lineage has no argument shapes for {site.label} (made before relaytrace "
                "recorded them): rebuild it"
            )
        open_dims = [shape for shape, _ in site.arguments if any(not isinstance(d, int) for d in shape)]
        if open_dims:
            raise RelaytraceError(
                f"{site.label} takes arguments whose shapes are known only at run time {open_dims[0]}: only a run "
                "sizes them; profile a build with static shapes, or on a machine that runs its target"
            )
        arrays = [_values(rng, shape, dtype, site.label) for shape, dtype in site.arguments]
        info[site.key] = ArgInfo(tuple(s for s, _ in site.arguments), tuple(d for _, d in site.arguments))
        captured.append((site.kernel, site.call, arrays))
    return info, captured


def _values(rng, shape, dtype: str, where: str) -> np.ndarray:
    """Zeros for integers and booleans (valid indices), normal draws for the rest."""
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        raise RelaytraceError(f"{where} takes a {dtype} argument, which numpy cannot make here") from None
    return np.zeros(shape, dtype) if kind in "iub" else rng.standard_normal(shape).astype(dtype)


def _profile(lineage, entry, arrays, runs: Runs, measured: Measured) -> Profile:
    """The ``Profile`` of what ``runs`` measured of ``entry`` on ``arrays`` (a tuple
    parameter's list of arrays counts as its tensors)."""
    tensors = lineage.build.entries.get(entry, ())
    arrays = [a for value in arrays for a in (value if isinstance(value, list) else [value])]
    return Profile(
        model=lineage.build.model,
        target=lineage.build.target,
        device=measured.device,
        mode=runs.mode,
        repeat=runs.repeat,
        records=tuple(measured.records),
        args={site.in_entry: a for site, a in measured.arg_info.items()},
        e2e_us=tuple(t * 1e6 for t in measured.e2e_s),
        entry=entry,
        inputs=tuple((name, tuple(a.shape), str(a.dtype)) for (name, _, _), a in zip(tensors, arrays)),
        remote=measured.remote,
        arguments=measured.arguments,
    )


def check_inputs(lineage: Lineage, inputs, entry: str | None = None) -> list:
    """Inputs as numpy arrays (a tuple parameter's, packed weights, as a list of them),
    after checking count, shapes (symbolic dims bound consistently,
    ``model.shapes.bind``) and dtypes against the entry's parameters as compiled
    (``BuildFacts.params``; a lineage saved before them: its tensor inputs)."""
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    entry = lineage.entry(entry)
    what = lineage.build.model if entry == "main" else f"{lineage.build.model}.{entry}"
    params = lineage.build.params.get(entry)
    if not params:
        arrays = [_array(value) for value in inputs]
        if lineage.build.entries.get(entry):
            bind(lineage.build.entries[entry], [(tuple(a.shape), str(a.dtype)) for a in arrays], what)
        return arrays
    if len(inputs) != len(params):
        raise RelaytraceError(
            f"{what} takes {len(params)} input(s) ({', '.join(_said(p) for p in params)}), got {len(inputs)}"
        )
    flat: list = []
    for param, value in zip(params, inputs):
        if param.kind == ParamKind.TUPLE:
            if not isinstance(value, (list, tuple)) or len(value) != len(param.tensors):
                raise RelaytraceError(
                    f"{what}: {param.name} is a tuple of {len(param.tensors)} tensors: give it as "
                    f"a list of {len(param.tensors)} arrays"
                )
            flat.extend(_array(v) for v in value)
        elif param.kind == ParamKind.TENSOR:
            flat.append(_array(value))
        else:
            raise RelaytraceError(
                f"{what}: {param.name} is a {param.kind}, which relaytrace cannot give it; an entry "
                "that takes a KV cache is profiled as served (profile(..., entry=...) makes it)"
            )
    bind(lineage.build.entries[entry], [(tuple(a.shape), str(a.dtype)) for a in flat], what)
    return grouped(params, flat)


def _array(value) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def _said(param) -> str:
    return (
        f"{param.name}: a tuple of {len(param.tensors)} tensors"
        if param.kind == ParamKind.TUPLE
        else f"{param.name}: a {param.kind}"
    )


def on_device(value, device):
    """An input on ``device``: a tensor, or a tuple parameter's list of them."""
    return (
        [tvm.runtime.tensor(v, device) for v in value] if isinstance(value, list) else tvm.runtime.tensor(value, device)
    )


def _kernel_library(executable, lineage: Lineage):
    """The compiled module holding the kernels; every kernel TVM compiled for the
    lineage must be there (a library call runs a function the executable imports or the
    process registers: ``Lineage.library_calls``)."""
    libs = list(executable.mod.imports)
    compiled = [k for k in lineage.kernels if k not in lineage.library_calls]
    missing = [k for k in compiled if not any(lib.implements_function(k, True) for lib in libs)]
    if missing:
        raise RelaytraceError(
            f"the lineage does not belong to this executable: {len(missing)} of its kernels are not "
            f"compiled in it ({', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}); "
            "profile with the lineage returned by the same build"
        )
    first = next(iter(compiled), None)
    return next((lib for lib in libs if first and lib.implements_function(first, True)), None)


def _capture(vm, call, lineage, skip: frozenset, copy: bool):
    """One run (``call()``) of the lineage's entry that notes every call's argument
    shapes (and copies kernel arguments for isolated timing): ``timing.capture`` on the
    VM, its sites keyed by ``SiteKey``; calls of ``skip`` (Relax subfunctions) are no
    sites."""
    entry = lineage.entry()
    copier = (lambda a: tvm.runtime.tensor(a.numpy(), a.device)) if copy else None
    try:
        noted, captured = timing.capture(vm.set_instrument, call, skip, lineage.kernels, copier)
    except Exception as exc:  # the VM's own checks (a match_cast the inputs break)
        raise RelaytraceError(f"the model failed to run on these inputs: {describe(exc)}") from exc
    return {SiteKey(entry, name, k): ArgInfo(*found) for (name, k), found in noted.items()}, captured


def _check_names(lineage: Lineage, info: dict[SiteKey, ArgInfo]) -> None:
    """The kernels and library calls that ran must be the lineage's, call for call; a
    VM builtin, or an external call the lineage lists among its builtins (it computes
    no model op), may run as it likes."""
    ran = timing.ran_counts(((s.kernel, s.call) for s in info), {b.name for b in lineage.builtins})
    problems = lineage.call_count_mismatches(ran)
    if problems:
        raise RelaytraceError("the lineage does not match this executable: " + "; ".join(problems[:8]))


def _sites(lineage: Lineage, skip: frozenset, server) -> timing.Sites:
    """The calls a timeline run of the lineage's entry records: its kernels, not the
    Relax subfunctions in ``skip``; a ``server``'s KV-cache kernels as records of their own."""
    cache = frozenset(lineage.build.kv_cache.kernels) if server is not None and lineage.build.kv_cache else frozenset()
    return timing.Sites(frozenset(lineage.kernels), skip, cache)


def _records(rows) -> list[CallRecord]:
    """``runner``'s rows as ``CallRecord``s."""
    return [
        CallRecord(name, k, run, start, duration, CallKind(kind), within)
        for name, k, run, start, duration, kind, within in rows
    ]


def _timer_of(device, runs: Runs, compiled):
    """How isolated mode times a site alone, by its name, with ``compiled``, the kernel
    library and the library calls' functions (name -> function): a kernel by
    ``time_evaluator`` on its compiled module, a library call by the clock around
    ``runs.number`` calls of it."""
    library, externals = compiled

    def timer_of(name):
        if name in externals:
            return timing.clocked(externals[name], device.sync, runs.repeat, runs.number)
        timer = library.time_evaluator(name, device, number=runs.number, repeat=runs.repeat)
        return lambda *tensors: timer(*tensors).results

    return timer_of


def _external(executable, name: str):
    """The function a library call calls, as the VM finds it: in a module the
    executable imports, else in the registry."""
    for lib in executable.mod.imports:
        if lib.implements_function(name, True):
            return lib.get_function(name, query_imports=True)
    return tvm.get_global_func(name)


def _site_records(timings, repeat: int) -> list[CallRecord]:
    """Records of sites timed alone (``(kernel, call, seconds per run)``), laid end to
    end in each run (``timing.site_rows``)."""
    return _records(timing.site_rows(timings, repeat))
