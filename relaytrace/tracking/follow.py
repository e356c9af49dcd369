"""``follow(recording) -> Lineage``: the tracking core in one function.

The recorder (``recorder.Recorder``) only writes down what each pass left; once the build
is done, this assigns origins to the input, follows them pass by pass (``Tracker``),
reads what each kernel is made of from the recorded IR (``truth``), and extracts the
call sites, verified (``callsites``). A fault anywhere is said in ``Journal.degraded``
and never raised: the user's build has already succeeded.
"""

from __future__ import annotations

import threading
import traceback
import warnings
from collections.abc import Callable

import attrs

from ..model.build_facts import BuildFacts
from ..model.code import Code
from ..model.frontend import Program
from ..model.journal import Journal
from ..model.lineage import Lineage
from ..model.ops import is_shape_computation
from ..model.origin import INSERTED, OP, Origin
from ..model.verification import verify
from ..model.work import library_work
from . import ir, reader
from .callsites import lineage_from
from .code import code_later
from .entries import entry_params, kv_cache
from .memory import memory_plans, planned_by
from .origins import LayerNamer, assign_origins
from .recorder import Recording
from .tracker import Tracker
from .truth import kernel_members, offloads, shape_consumers, tuned_kernels
from .work import kernel_works


def follow(
    recording: Recording,
    layer_of: LayerNamer | None = None,
    *,
    build: BuildFacts | None = None,
    on_step: Callable[[str], None] | None = None,
    program: Program | None = None,
    read_code: bool = False,
) -> Lineage:
    """The verified lineage of a recorded build: ``build`` is its model's name, its
    target and its options (default: ``model``, no target, the user's pipeline), the rest
    of its facts read from the recording. ``layer_of`` names the input's ops
    (the frontend's namer) and ``program`` is what the frontend translated (the
    evidence its layers are verified against); ``on_step(name)`` is called as each step
    ends (origin assignment, each pass, kernel members, call sites, the IR's facts;
    ``benchmarks/tracking_breakdown.py`` times them). The code view's code is read at
    the first ask of ``lineage.code`` (``code_later``), and each entry's memory plan at the
    first ask of ``lineage.build.memory``; both are read here with ``read_code`` (a build
    whose outputs show them: a fault in the memory plans is then said in the journal)."""
    done = on_step or (lambda name: None)
    build = build or BuildFacts("model", "", "user")
    reads = reader.SharedReads()  # the tracker's reads, read again by verification
    degraded = list(recording.degraded)
    table = tracker = members = offloaded = None
    step = recording.first_pass
    try:
        functions = _input(recording)
        table = assign_origins(functions, layer_of, reads.read)
        tracker = Tracker(table, reads.read)
        tracker.start(functions)
        done("origins + input walk")
        for record in recording.passes:
            step = record.pass_name
            tracker.observe(record.functions, record.pass_name)
            done(step)
        step = "verification"
        members = kernel_members(functions, recording.passes, reads.read)
        offloaded = offloads(recording.passes, reads.read)
        done("kernel members (verification)")
    except Exception as exc:
        degraded.append(f"tracking stopped at pass {step}: {_describe(exc)}")
    if tracker is not None:
        try:
            found = attrs.evolve(
                build,
                params=entry_params(recording.last_functions()),
                kernel_members=members or {},
                offloads=offloaded or {},
            )
            lineage = lineage_from(tracker, found, degraded, entries=recording.entries)
            done("call sites")
            tuned = [k for k in tuned_kernels(recording.passes) if k in lineage.kernels]
            consumers = shape_consumers(recording.passes, reads.read)
            done("tuned kernels, shape consumers")
            faults: list[str] = []
            work = _work(recording, lineage, faults)
            done("work")
            memory, memory_later = _memory(recording.passes, tuple(lineage.build.entries), faults, now=read_code)
            done("memory plans")
            build = attrs.evolve(
                lineage.build,
                tuned=tuple(tuned),
                shape_consumers=consumers,
                work=work,
                memory=memory,
                memory_later=memory_later,
                kv_cache=kv_cache(recording.last_functions(), reads.read),
            )
            journal = attrs.evolve(lineage.journal, degraded=lineage.journal.degraded + tuple(faults))
            lineage = attrs.evolve(
                lineage, build=build, origins=_served_shapes(lineage, consumers), program=program, journal=journal
            )
            done("served shapes")
            lineage = attrs.evolve(lineage, verification=verify(lineage))
            try:
                make = code_later(recording.passes, lineage)
            except Exception as exc:  # the lineage stands without its code, which says why
                make = _unreadable(exc)
            if read_code:
                lineage = attrs.evolve(lineage, code=_guarded(make)(lineage))
            done("code")
            return lineage if read_code else attrs.evolve(lineage, code_later=_guarded(make))
        except Exception as exc:
            degraded.append(f"lineage extraction failed: {_describe(exc)}")
    origins = tracker.origins if tracker is not None else table.origins if table is not None else {}
    return Lineage(build, dict(origins), journal=Journal(degraded=tuple(degraded)), program=program)


def _guarded(make):
    """``make`` (``code_later``'s), made to give a ``Code`` that says why when reading
    the code fails: the lineage stands without it."""

    def code(lineage):
        try:
            return make(lineage)
        except Exception as exc:
            return _unreadable(exc)(lineage)

    return code


def _unreadable(exc: Exception):
    """What makes the ``Code`` of a build whose code could not be read: why, alone (the
    words, not the exception, whose traceback holds the recording)."""
    why = f"the code could not be read: {_describe(exc)}"
    return lambda lineage: Code(problems=(why,))


def _input(recording: Recording) -> dict:
    """The functions tracking starts from; raises when the build ran no pass over a Relax function."""
    if recording.input is None:
        raise RuntimeError("the build ran no pass over a module with a Relax function: there is nothing to follow")
    return recording.input


def origins_of_callees(recording: Recording, layer_of: LayerNamer | None = None) -> dict[str, tuple[Origin, ...]]:
    """For a build that stopped (a pass or code generation failed): each callee (a
    PrimFunc, an op) of the Relax functions as the last recorded pass left them -> the
    origins of the bindings calling it, in order. Raises what tracking raises."""
    functions = _input(recording)
    tracker = Tracker(assign_origins(functions, layer_of, reader.read))
    tracker.start(functions)
    for record in recording.passes:
        tracker.observe(record.functions, record.pass_name)
    found: dict[str, dict[str, None]] = {}
    for func in ir.model_functions(tracker.last_functions).values():
        d = reader.read(func)
        for position, handle in enumerate(d.vars):
            callee, tok = d.callee(position), tracker.tokens.of(handle)
            if callee is not None and tok is not None:
                found.setdefault(callee, {}).update(dict.fromkeys(sorted(tracker.tokens.origins[tok])))
    return {callee: tuple(tracker.origins[o] for o in ids) for callee, ids in found.items()}


def _work(recording: Recording, lineage: Lineage, degraded: list[str]) -> dict:
    """Each kernel's work (``work.kernel_works``), each library call's from its ops
    (``model.work.library_work``) over its group's signature, or its one op's, or its
    arguments as compiled; a fault in counting it is said in
    ``degraded`` and leaves the work unknown, the lineage whole."""
    try:
        works = kernel_works(recording.passes, lineage.kernels, lineage.build.kernel_members)
        for name in lineage.library_calls:  # its code is not TVM's: its ops' work, over its dims
            site, offload = lineage.kernels[name][0], lineage.build.offloads.get(name)
            ops = [lineage.origins[o] for o in site.origin_ids]
            works[name] = library_work(
                ops, offload.params if offload is not None else _signature(ops[0]) if len(ops) == 1 else site.arguments
            )
        return works
    except Exception as exc:
        degraded.append(f"kernel work not counted: {_describe(exc)}")
        return {}


def _signature(origin) -> tuple:
    """``(shape, dtype)`` of an op's inputs and outputs as the input model has them (a
    symbolic dim by its name): the arguments of a function that computes it alone,
    destination-passing (outputs last)."""
    return tuple(zip(origin.input_shapes, origin.input_dtypes)) + tuple(zip(origin.output_shapes, origin.output_dtypes))


def _memory(passes, entries: tuple[str, ...], degraded: list[str], now: bool) -> tuple[dict, Callable | None]:
    """(plans, what reads them later): each entry's memory plan (``memory.memory_plans``)
    read ``now``, a fault said in ``degraded``; or a ``_PlansLater`` that reads them when
    first asked (``BuildFacts.memory``). A fault leaves the memory unknown, the lineage
    whole."""
    if now:
        return _plans(passes, entries, degraded), None
    planned = planned_by(passes)
    return {}, _PlansLater(planned, entries) if planned is not None else None  # no plan to read: none later


def _plans(passes, entries: tuple[str, ...], degraded: list[str]) -> dict:
    try:
        return memory_plans(passes, entries)
    except Exception as exc:
        degraded.append(f"memory plan not read: {_describe(exc)}")
        return {}


class _PlansLater:
    """Each entry's memory plan, read at the first call from the module of ``planned``
    (the ``PLANNED_BY`` pass's record, picked during the build: the lineage holds no
    other), once for the lineage and every entry view that shares this object, two
    threads calling at once reading it once; the module is dropped once read. A fault
    leaves the memory unknown and is said as a ``RuntimeWarning``, once, after the
    result is kept (the journal was written with the build)."""

    def __init__(self, planned, entries: tuple[str, ...]):
        self._lock = threading.Lock()
        self._planned = planned
        self._entries = entries
        self._read: dict | None = None

    def __call__(self) -> dict:
        faults: list[str] = []
        with self._lock:
            if self._read is None:
                planned, self._planned = self._planned, None
                self._read = _plans((planned,), self._entries, faults)
        for fault in faults:  # the caller of ``BuildFacts.memory``'s line
            warnings.warn(f"relaytrace: {fault}", RuntimeWarning, stacklevel=3)
        return self._read


def _served_shapes(lineage: Lineage, consumers: dict[str, tuple[str, ...]]) -> dict:
    """The origins, each shape function's (``ops.is_shape_computation``) now serving
    the ops of its own function that run at the kernels whose allocations it sizes
    (``truth.shape_consumers``: heap slots it writes, read by their shapes), its layer
    theirs. The tracker cannot tell this: its views hold no heap slot numbers."""
    origins = dict(lineage.origins)
    for oid, origin in lineage.origins.items():
        if origin.kind != INSERTED or not is_shape_computation(origin.op):
            continue
        sized = consumers.get(origin.op, ())
        served = list(
            dict.fromkeys(
                o
                for site in lineage.call_sites
                if site.kernel in sized
                for o in site.origin_ids
                if lineage.origins[o].kind == OP and lineage.origins[o].function == origin.function
            )
        )
        if served:
            origins[oid] = attrs.evolve(origin, serves=tuple(served), layer=lineage.origins[served[0]].layer)
    return origins


def _describe(exc: Exception) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
