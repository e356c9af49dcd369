"""Inside a fused kernel: each of its loop nests timed, in an instrumented copy of the
build (``relaytrace profile --inside``).

A fused kernel's time is one figure to the profiler; which of its ops took what was a
model (``--policy split``: the members' roofline bounds). Here it is measured. The
build is made again through the same pipeline with one pass more at its end
(``Instrumented``), which leaves the user's build alone and changes only the copy: in
every kernel whose root block runs several top-level statements (on llvm, a fused
kernel runs each member's blocks as a loop nest of its own: the conv's padding, the
conv, the bias add, the ReLU), the CPU's cycle counter (``llvm.readcyclecounter``) is
stored before the first and after each statement, straight into a buffer relaytrace
holds (its address compiled in: no call, no copy, a few cycles a stamp). After each
call of a kernel the VM's instrument copies its stamps out, so each statement of each
call site gets its time in every run. A statement's blocks are named, and the code
view names the origin each block computes at each call site, so each part's time goes
to the ops it computes: alone when the statement computes one op, shared by their
modelled weights when it computes several (an epilogue scheduled into its producer's
loop nest: said per part, never a made-up split).

Only x86-64 llvm builds are timed so (the counter is the TSC, which runs at one rate;
its rate is measured against the clock before the runs); any other target is refused.
The instrumented copy's kernels are checked against the lineage's code (the same
kernels, each with the same blocks) before any figure is taken from it.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import tvm
import tvm_ffi
from attrs import frozen
from tvm import relax, tirx
from tvm.s_tir.stmt import SBlock, SBlockRealize
from tvm.script import tirx as T

from ..errors import RelaytraceError
from ..model.code import code_sites
from ..model.entry import default_context
from ..model.inside import InsidePart, InsideSite
from .runner.timing import NO_OP, do_nothing, numbering

if TYPE_CHECKING:
    from .serve import Serving

ONE_NEST = "its ops run in one loop nest, which no stamp divides: billed as modelled"
UNOWNED = "the code view gives none of its blocks an op at this call: billed as modelled"

_COUNTER = "llvm.readcyclecounter"


@frozen
class Stamped:
    """One instrumented kernel: its stamps start at ``slot`` of the buffer: one as it
    starts, one before its first top-level statement that holds blocks, one after each,
    one as it ends; ``parts``: each such statement's block names, in order."""

    kernel: str
    slot: int
    parts: tuple[tuple[str, ...], ...]


def statements(func) -> list:
    """The top-level statements of a PrimFunc's root block, in order (one for a body
    that is no sequence)."""
    body = func.body
    if not isinstance(body, SBlockRealize):
        return [body]
    inner = body.block.body
    return list(inner.seq) if isinstance(inner, tirx.SeqStmt) else [inner]


def block_names(stmt) -> tuple[str, ...]:
    """The names of the blocks a statement holds, in the order the text prints them."""
    found: list = []
    tvm_ffi.structural_walk(stmt, (SBlock, found.append), order="pre")
    return tuple(b.name_hint for b in found)


def stamp_buffer(size: int, address: int, dtype: str = "int64"):
    """(the ``DeclBuffer`` statement, the buffer) of ``size`` stamps of ``dtype`` at
    ``address`` (a host address here, a device one for ``inside_gpu``), as TVMScript
    declares a buffer over a pointer it is given."""

    @T.prim_func(private=True)
    def template():
        stamps = T.decl_buffer((size,), dtype, data=T.reinterpret("handle", T.uint64(address)))
        stamps[0] = T.cast(0, dtype)

    declare = template.body.seq[0]
    return declare, declare.buffer


def _stamped(func, slot: int, declare, buffer):
    """``func`` with the cycle counter stored at ``slot`` as it starts (before its root
    block allocates its buffers), at ``slot + 1`` before its first top-level statement
    that holds blocks and at ``slot + i + 1`` after the ``i``-th such statement (one
    that holds none, a buffer's declaration, stays where it is), and after the root
    block (its buffers freed) as it ends."""

    def stamp(at: int):
        return tirx.BufferStore(buffer, tirx.call_llvm_intrin("int64", _COUNTER), [tirx.IntImm("int32", at)])

    body = between(statements(func), lambda k: stamp(slot + 1 + k))
    parts = sum(1 for stmt in statements(func) if block_names(stmt))
    realize = root_with(func, tirx.SeqStmt(body))
    return func.with_body(tirx.SeqStmt([declare, stamp(slot), realize, stamp(slot + parts + 2)]))


def between(stmts, stamp: Callable) -> list:
    """``stmts`` with ``stamp(0)`` before the first that holds blocks and ``stamp(k)``
    after the ``k``-th such (one that holds none, a buffer's declaration, stays where it
    is)."""
    out: list = []
    k = 0
    for stmt in stmts:
        holds = bool(block_names(stmt))
        if holds and not k:
            out.append(stamp(0))
        out.append(stmt)
        if holds:
            k += 1
            out.append(stamp(k))
    return out


def root_with(func, body):
    """``func``'s root block realize with ``body`` in place of its block's body."""
    root = func.body.block
    block = SBlock(
        root.iter_vars,
        root.reads,
        root.writes,
        root.name_hint,
        body,
        root.init,
        root.alloc_buffers,
        root.match_buffers,
        root.annotations,
    )
    return SBlockRealize(func.body.iter_values, func.body.predicate, block)


class Instrumented:
    """The pass that instruments a module's kernels (``kernels``: their names), and what
    it did: ``stamps`` (the buffer the kernels write, allocated when the pass runs) and
    ``plans`` (kernel -> ``Stamped``). A kernel of one top-level statement is left as it
    is: there is nothing inside it to tell apart (its ops are billed as modelled)."""

    def __init__(self, kernels):
        self.kernels = frozenset(kernels)
        self.stamps = np.zeros(0, dtype="int64")
        self.plans: dict[str, Stamped] = {}
        self.pass_ = tvm.transform.module_pass(self._run, opt_level=0, name="relaytrace.InsideStamps")

    def _run(self, mod, _ctx):
        mod = mod.clone()  # the module the pipeline gave is not changed in place
        funcs = {gv.name_hint: (gv, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}
        slot = 0
        for name in sorted(self.kernels & set(funcs)):
            parts = [names for names in map(block_names, statements(funcs[name][1])) if names]
            if len(parts) > 1 and isinstance(funcs[name][1].body, SBlockRealize):
                self.plans[name] = Stamped(name, slot, tuple(parts))
                slot += len(parts) + 3
        self.stamps = np.zeros(max(slot, 1), dtype="int64")
        declare, buffer = stamp_buffer(len(self.stamps), self.stamps.ctypes.data)
        for name, plan in self.plans.items():
            gv, func = funcs[name]
            mod[gv] = _stamped(func, plan.slot, declare, buffer)
        return mod


def cycles_per_us(stamps: np.ndarray, seconds: float = 0.05) -> float:
    """The cycle counter's rate (cycles per microsecond), measured against the clock
    over ``seconds`` by a kernel that stamps it into ``stamps[0]``; a rate that two
    measurements do not agree on within 1 % is refused (a counter that does not run at
    one rate cannot time anything)."""
    declare, buffer = stamp_buffer(len(stamps), stamps.ctypes.data)

    @T.prim_func(private=True)
    def tick():
        T.evaluate(0)

    body = tirx.SeqStmt([declare, tirx.BufferStore(buffer, tirx.call_llvm_intrin("int64", _COUNTER), [0])])
    read = tvm.compile(tvm.IRModule({"tick": tick.with_body(body).with_attr("global_symbol", "tick")}), "llvm")["tick"]

    def point() -> tuple[float, float]:
        """(cycles, seconds) read together: of five tries, the one whose two counter
        reads around the clock's lie closest (no preemption between them)."""
        tries = []
        for _ in range(5):
            read()
            before, now = int(stamps[0]), time.perf_counter()
            read()
            tries.append((int(stamps[0]) - before, (before + int(stamps[0])) / 2, now))
        _, cycles, now = min(tries)
        return cycles, now

    def rate() -> float:
        c0, t0 = point()
        while time.perf_counter() - t0 < seconds:
            pass
        c1, t1 = point()
        return (c1 - c0) / ((t1 - t0) * 1e6)

    first, second = rate(), rate()
    if not first > 0 or abs(first - second) > 0.01 * first:
        raise RelaytraceError(
            f"this CPU's cycle counter did not run at one rate ({first:.1f} then {second:.1f} cycles per us): "
            "--inside cannot time the inside of kernels here"
        )
    return (first + second) / 2


def check_target(target: str) -> None:
    """``--inside`` times an llvm build on an x86-64 CPU; anything else, one line saying so."""
    kind = tvm.target.Target(target).kind.name
    if kind != "llvm" or platform.machine() not in ("x86_64", "AMD64"):
        raise RelaytraceError(
            f"--inside times the inside of kernels of an llvm build on an x86-64 CPU (its cycle counter), "
            f"not a {kind} build on {platform.machine()} (a CUDA build's copy is made and checked, not yet timed): "
            "profile without --inside"
        )


def stamped_runs(vm, call: Callable, instrumented: Instrumented, repeat: int, warmup: int = 1) -> dict:
    """``(kernel, call) -> [cycles of each part, per timed run]``: ``warmup`` untimed
    runs of ``call`` (one run of the entry on ``vm``), then ``repeat`` runs whose
    kernels' stamps the VM's instrument copies out after each call."""
    stamps, plans = instrumented.stamps, instrumented.plans
    found: dict[tuple[str, int], list[np.ndarray]] = {}
    number = [numbering()]  # each run numbers its calls from 0

    def note(func, name, before, ret, *args):
        if not before and name in plans:
            plan = plans[name]
            stamped = stamps[plan.slot : plan.slot + len(plan.parts) + 3]
            found.setdefault((name, number[0](name)), []).append(np.diff(stamped))
        return NO_OP

    for _ in range(warmup):
        call()
    vm.set_instrument(note)
    try:
        for _ in range(repeat):
            number[0] = numbering()
            call()
    finally:
        vm.set_instrument(do_nothing)
    return found


def inside_sites(lineage, instrumented: Instrumented, found: dict, rate: float) -> tuple[InsideSite, ...]:
    """Each call site's parts with their times per run (µs) and the origins their blocks
    compute there (the code view's owners, ``code_sites``, which lists the lineage's call
    sites first and in their order), in run order; a site of several origins whose
    kernel runs them in one loop nest, or whose blocks the code view gives no origin
    there, has no parts and says so (``note``): it is billed as modelled."""
    code = lineage.code
    owners = code_sites(lineage, code)  # the lineage's call sites first, in their order (then cache runs)
    out = []
    for site, owned in zip(lineage.call_sites, owners):
        plan = instrumented.plans.get(site.kernel)
        runs = found.get((site.kernel, site.call))
        if plan is None and len(site.origin_ids) > 1 and site.kernel in code.kernels:
            out.append(InsideSite(site.kernel, site.call, (), ONE_NEST))
        if plan is None or not runs:
            continue
        kernel = code.kernels[site.kernel]
        index = {b.name: i for i, b in enumerate(kernel.blocks)}
        sources = {b.name: b.sources for b in kernel.built_blocks} if kernel.built else {}
        by_block = dict(owned.owners)
        parts = []
        for j, names in enumerate(plan.parts):
            fused = [f for n in names for f in (sources.get(n) or (n,))]
            origins = tuple(dict.fromkeys(by_block[index[f]] for f in fused if f in index and index[f] in by_block))
            parts.append(InsidePart(names, origins, tuple(float(r[j + 1]) / rate for r in runs)))
        outside = tuple(float(r[0] + r[-1]) / rate for r in runs)  # before the first nest and after the last
        parts.append(InsidePart((), (), outside))
        owned_any = any(p.origins for p in parts)
        out.append(InsideSite(site.kernel, site.call, tuple(parts) if owned_any else (), "" if owned_any else UNOWNED))
    return tuple(out)


def check_same_kernels(lineage, plans: Mapping) -> None:
    """Each instrumented kernel (``plans``: name -> its plan, whose ``parts`` name its
    blocks) holds the blocks the lineage's code says it holds (the
    same pipeline made the same kernels); otherwise no figure of the copy is about the
    user's build, and it is said so."""
    code = lineage.code
    for name, plan in plans.items():
        kernel = code.kernels.get(name)
        want = [b.name for b in (kernel.built_blocks if kernel.built else kernel.blocks)] if kernel else []
        got = [n for part in plan.parts for n in part]
        if sorted(want) != sorted(got):
            raise RelaytraceError(
                f"the instrumented copy's kernel {name} is not the traced build's (blocks {got[:4]} against "
                f"{want[:4]}): the pipeline does not make the same kernels twice; profile without --inside"
            )


def time_inside(  # noqa: PLR0913 - the public API's keyword options
    model,
    lineage,
    inputs=(),
    *,
    example_args=None,
    entry: str | None = None,
    repeat: int = 3,
    serving: Serving | None = None,
    progress=None,
) -> tuple[InsideSite, ...]:
    """Each fused kernel's ops timed inside it (``relaytrace.time_inside``): ``model``
    and ``example_args`` as ``relaytrace.build`` was given them, ``lineage`` that build's
    (it says the pipeline and its options, ``pipeline_of``), run on ``inputs`` (or, for
    an entry that takes a KV cache, served as ``serving`` says), ``repeat`` times.
    ``attrs.evolve(profile, inside=...)`` of a profile of the same build then bills by
    it under ``make_report(..., policy="measured")``."""
    from ..errors import expect_number
    from ..frontends.loader import load

    expect_number("time_inside(repeat=)", repeat, low=1)
    say = progress or (lambda message: None)
    pipeline = pipeline_of(lineage.build)
    imported = load(model, example_args, with_inputs=False).model
    run = InsideRun(tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,), serving, repeat)
    return measure_inside(imported.mod, pipeline, lineage, lineage.entry(entry), run, say)


def pipeline_of(build):
    """The Relax pipeline ``build`` (``BuildFacts``) was made by, made again from its
    options (``build.build_pipeline``): a tuned build's, and one made by a pipeline
    relaytrace was not given by name (``trace()``'s, a ``Pass``), cannot be, and are
    refused saying so."""
    from ..build import build_pipeline

    options = build.options
    if options.database:
        raise RelaytraceError("--inside rebuilds the model through its pipeline: not a tuned build's (not yet)")
    try:
        return build_pipeline(
            options.pipeline,
            tvm.target.Target(build.target),
            {op: list(layouts) for op, layouts in options.convert_layout.items()} or None,
            options.mixed_precision,
            options.fold_batch_norm,
            options.lift_params,
        )
    except RelaytraceError as exc:
        raise RelaytraceError(
            f"--inside rebuilds the model through its pipeline, which the lineage names {options.pipeline!r} "
            f"and relaytrace cannot make again ({exc}): build with a pipeline given by name"
        ) from None


def measure_inside(mod, pipeline, lineage, entry: str, run: InsideRun, say) -> tuple[InsideSite, ...]:
    """Each fused kernel's parts timed at each call site of ``entry``: ``mod`` (the
    imported module the traced build was made from) built again through ``pipeline``
    (the same Relax pipeline, ``build.build_pipeline``'s) with the stamps added at its
    end, checked to make the lineage's kernels, and run as ``run`` says: on its inputs
    (checked as ``profile`` checks them), or, for an entry that takes a KV cache,
    served as ``profile`` serves it (``run.serving``; None: its defaults); once
    untimed, then ``run.repeat`` times stamped."""
    target = lineage.build.target
    check_target(target)
    if lineage.code is None:
        raise RelaytraceError("--inside needs the build's code (its blocks and their ops): build it traced again")
    instrumented = Instrumented(lineage.kernels)
    say("building the instrumented copy (--inside)")
    with tvm.transform.PassContext(opt_level=3):
        executable = tvm.compile(
            mod, tvm.target.Target(target), relax_pipeline=tvm.transform.Sequential([pipeline, instrumented.pass_])
        )
    check_same_kernels(lineage, instrumented.plans)
    vm, call = _runner(executable, lineage, entry, run, say)
    rate = cycles_per_us(np.zeros(1, dtype="int64"))
    say(f"timing the inside of {len(instrumented.plans)} kernels ({run.repeat} runs; {rate:.0f} cycles per us)")
    found = stamped_runs(vm, call, instrumented, run.repeat)
    return inside_sites(lineage.for_entry(entry), instrumented, found, rate)


@frozen
class InsideRun:
    """How the instrumented copy's entry is run: on ``inputs``, or served as ``serving``
    says (an entry that takes a KV cache; None: the defaults), ``repeat`` times."""

    inputs: tuple = ()
    serving: Serving | None = None
    repeat: int = 3


def _runner(executable, lineage, entry: str, run: InsideRun, say):
    """(the VM of ``executable`` on this machine, one run of ``entry`` on it)."""
    from .serve import Server, Serving, served_spec, takes_cache
    from .vm import check_inputs, device_here, on_device

    device = device_here(lineage.build.target)
    vm = relax.VirtualMachine(executable, device)
    if takes_cache(lineage, entry):
        default = Serving(context=default_context(lineage.build.params[entry]))
        server = Server(vm, device, served_spec(lineage, entry, run.serving or default), timed=False, say=say)
        return vm, server.step
    arrays = check_inputs(lineage, list(run.inputs), entry)
    args = [on_device(a, device) for a in arrays]
    function = vm[entry]
    return vm, lambda: function(*args)
