"""``follow(recording) -> Lineage``: the tracking core in one function.

The recorder (``recorder.Recorder``) only writes down what each pass left; once the build
is done, this assigns origins to the input, follows them pass by pass (``Tracker``),
reads what each kernel is made of from the recorded IR (``truth``), and extracts the
call sites, verified (``callsites``). A fault anywhere is said in ``Journal.degraded``
and never raised: the user's build has already succeeded.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import attrs

from ..model.build_facts import BuildFacts
from ..model.frontend import Program
from ..model.journal import Journal
from ..model.lineage import Lineage
from ..model.ops import is_shape_computation
from ..model.origin import INSERTED, OP
from ..model.verification import verify
from . import ir, reader
from .callsites import lineage_from
from .memory import memory_plans
from .origins import LayerNamer, assign_origins
from .recorder import Recording
from .tracker import Tracker
from .truth import kernel_members, shape_consumers, tuned_kernels
from .work import kernel_works


def follow(recording: Recording, layer_of: LayerNamer | None = None, *, model: str = "model", target: str = "",
           pipeline: str = "user", on_step: Callable[[str], None] | None = None,
           program: Program | None = None) -> Lineage:
    """The verified lineage of a recorded build. ``layer_of`` names the input's ops
    (the frontend's namer) and ``program`` is what the frontend translated (the
    evidence its layers are verified against); ``on_step(name)`` is called as each step
    ends (origin assignment, each pass, kernel members, call sites, the IR's facts;
    ``benchmarks/tracking_breakdown.py`` times them)."""
    done = on_step or (lambda name: None)
    reads = reader.SharedReads()  # the tracker's reads, read again by verification
    degraded = list(recording.degraded)
    table = tracker = members = None
    step = recording.first_pass
    try:
        table = assign_origins(recording.input, layer_of, reads.read)
        tracker = Tracker(table, reads.read)
        tracker.start(recording.input)
        done("origins + input walk")
        for record in recording.passes:
            step = record.pass_name
            tracker.observe(record.functions, record.pass_name)
            done(step)
        step = "verification"
        members = kernel_members(recording.input, recording.passes, reads.read)
        done("kernel members (verification)")
    except Exception as exc:
        degraded.append(f"tracking stopped at pass {step}: {_describe(exc)}")
    if tracker is not None:
        try:
            lineage = lineage_from(tracker, model, target, pipeline, degraded, entries=recording.entries,
                                   members=members)
            done("call sites")
            tuned = [k for k in tuned_kernels(recording.passes) if k in lineage.kernels]
            consumers = shape_consumers(recording.passes, reads.read)
            done("tuned kernels, shape consumers")
            faults: list[str] = []
            work = _work(recording, lineage, faults)
            done("work")
            memory = _memory(recording, lineage, faults)
            done("memory plans")
            build = attrs.evolve(lineage.build, tuned=tuple(tuned), shape_consumers=consumers, work=work, memory=memory)
            journal = attrs.evolve(lineage.journal, degraded=lineage.journal.degraded + tuple(faults))
            lineage = attrs.evolve(lineage, build=build, origins=_served_shapes(lineage, consumers), program=program,
                                   journal=journal)
            done("served shapes")
            return attrs.evolve(lineage, verification=verify(lineage))
        except Exception as exc:
            degraded.append(f"lineage extraction failed: {_describe(exc)}")
    origins = tracker.origins if tracker is not None else table.origins if table is not None else {}
    return Lineage(BuildFacts(model, target, pipeline), dict(origins), journal=Journal(degraded=tuple(degraded)),
                   program=program)


def layers_of_callees(recording: Recording, layer_of: LayerNamer | None = None) -> dict[str, tuple[str, ...]]:
    """For a build that stopped (a pass or code generation failed): each callee (a
    PrimFunc, an op) of the Relax functions as the last recorded pass left them -> the
    layers of the bindings calling it, in order. Raises what tracking raises."""
    tracker = Tracker(assign_origins(recording.input, layer_of, reader.read))
    tracker.start(recording.input)
    for record in recording.passes:
        tracker.observe(record.functions, record.pass_name)
    layers: dict[str, dict[str, None]] = {}
    for func in ir.model_functions(tracker.last_functions).values():
        d = reader.read(func)
        for position, handle in enumerate(d.vars):
            callee, tok = reader.callee_of(d, position), tracker.tokens.of(handle)
            if callee is not None and tok is not None:
                found = layers.setdefault(callee, {})
                found.update(dict.fromkeys(tracker.origins[o].layer for o in tracker.tokens.origins[tok]))
    return {callee: tuple(found) for callee, found in layers.items()}


def _work(recording: Recording, lineage: Lineage, degraded: list[str]) -> dict:
    """Each kernel's work (``work.kernel_works``); a fault in counting it is said in
    ``degraded`` and leaves the work unknown, the lineage whole."""
    try:
        return kernel_works(recording.passes, lineage.kernels, lineage.build.kernel_members)
    except Exception as exc:
        degraded.append(f"kernel work not counted: {_describe(exc)}")
        return {}


def _memory(recording: Recording, lineage: Lineage, degraded: list[str]) -> dict:
    """Each entry's memory plan (``memory.memory_plans``); a fault in reading it is said
    in ``degraded`` and leaves the memory unknown, the lineage whole."""
    try:
        return memory_plans(recording.passes, tuple(lineage.build.entries))
    except Exception as exc:
        degraded.append(f"memory plan not read: {_describe(exc)}")
        return {}


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
        served = list(dict.fromkeys(
            o for site in lineage.call_sites if site.kernel in sized for o in site.origin_ids
            if lineage.origins[o].kind == OP and lineage.origins[o].function == origin.function))
        if served:
            origins[oid] = attrs.evolve(origin, serves=tuple(served), layer=lineage.origins[served[0]].layer)
    return origins


def _describe(exc: Exception) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
