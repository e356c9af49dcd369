"""How much memory a compiled entry needs, and which layers hold it at the peak: pure
functions over a lineage's memory plan (``model.memory``), no TVM.

Along the entry's kernel calls in run order (its *steps*), the bytes live at each are
the sizes of the blocks allocated before it and not yet freed (``MemoryPlan``); the
peak is the largest, and what is live there is each live block's value at that step,
billed to the layer whose op wrote it (the last model op of the kernel that writes
it: the value a fused kernel writes is its last op's). Weights are apart: each is
billed to the layer of the first call site that reads it, by its anchor (the conv or
matmul a fused kernel is built around reads the weights; its bias add is its layer's). Activations are what the
plan allocates; the entry's inputs are the caller's; values made at run time outside
the plan (by VM builtins) are listed, not counted.

Sizes are formulas over the symbolic dims; ``memory_at`` binds them to the dims of a
run (its inputs' shapes) or to dims given, so a decoder's prefill is read at any
length. The peak's formula (the live blocks at the peak step, summed) says how it
grows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import attrs
from attrs import define

from ..model.lineage import CallSite, Lineage
from ..model.memory import Block, Held, MemoryPlan
from ..model.names import Name
from ..model.origin import OP
from ..model.sitekey import SiteKey
from ..model.work import LIMIT, NotEvaluable, Poly, concrete, evaluate, itemsize, normal, tensor_bytes

NO_SITE = "(no kernel)"  # the layer of a value no kernel call writes
TVM_SAYS = "relax.analysis.estimate_memory_usage"


@define(frozen=True)
class LiveValue:
    """A value live at the peak: the ``block`` it is in (``bytes``: the block's size;
    ``value_bytes``: the value's own, less when the block is sized for a larger value
    it holds at another time; 0 when idle), its ``shape`` (at the dims bound) and
    ``dtype``, the call site that wrote it and that site's ``layer``; ``returned`` when
    the entry returns it; ``idle`` when the block holds no value being read at the peak
    but is kept for the next one written into it (then ``site`` and ``layer`` are that
    next value's): the plan keeps a block from its first value to its last;
    ``sized_for``: the layer of the largest value the block ever holds (what sets its
    size)."""

    block: str
    bytes: float
    shape: tuple
    dtype: str
    site: str
    layer: str
    returned: bool = False
    idle: bool = False
    value_bytes: float = 0.0
    sized_for: str = ""


class ValueKind(Name):
    """What a value of an entry's memory is: an activation the plan places in a block, a
    weight, or an input."""

    ACTIVATION = "activation"
    WEIGHT = "weight"
    INPUT = "input"


@define(frozen=True)
class Lifetime:
    """One value's life, as ``memory.csv`` lists them: ``kind`` (``activation``: a value
    the plan places in ``block``; ``weight``; ``input``), ``bytes`` (an activation's:
    its block's size), its ``shape`` and ``dtype``, the call ``site`` that writes it (a
    weight's: the first that reads it) and its ``layer``, the steps it is ``first``
    written (or read) and ``last`` read at (-1: none), whether it is live at the peak,
    and ``own``: its own bytes (an activation's block may be sized for a larger value;
    0 where a dim is not bound)."""

    kind: ValueKind
    name: str
    bytes: float
    shape: tuple
    dtype: str
    site: str
    layer: str
    first: int
    last: int
    at_peak: bool = False
    own: float = 0.0


@define(frozen=True)
class Span:
    """A block the plan allocates: its ``bytes``, live from step ``start`` to ``end``
    (both included; ``end < start``: at no step), ``returned`` when the entry returns a
    value in it. With the activations' ``Lifetime`` rows, what ``live_at`` reads."""

    block: str
    bytes: float
    start: int
    end: int
    returned: bool = False


@define(frozen=True)
class LayerMemory:
    """One layer's memory: ``weights`` (bytes of the weights it reads first),
    ``activations`` (bytes of the values its kernels write, each once), ``at_peak``
    (bytes of the live values it wrote, at the peak: the values' own bytes, not the
    blocks' they are in)."""

    layer: str
    weights: float
    activations: float
    at_peak: float


class Verdict(Name):
    """What holding a figure of the plan against independent evidence found."""

    AGREES = "agrees"
    DIFFERS = "differs"
    NOT_CHECKED = "not checked"  # the evidence has no figure to hold it against
    MEASURED = "measured"  # a figure of the run, beside the plan's, judging nothing


@define(frozen=True)
class Check:
    """One check of a memory plan: ``against`` what (``TVM_SAYS``, or a run's argument
    addresses), its ``verdict``, and the ``text`` that says both figures."""

    against: str
    verdict: Verdict
    text: str


@define(frozen=True)
class Memory:
    """One entry's memory at concrete sizes (``dims``: each symbolic dim's value).

    ``steps``: the kernel call sites in run order; ``live``: bytes live at each;
    ``peak`` (bytes) at step ``peak_step`` (-1: no step), ``peak_formula`` the same as a
    formula over the dims; ``at_peak`` the values live there, largest first;
    ``lifetimes``: every activation, weight and input, in program order; ``layers``
    by bytes at the peak, then weights; ``planned``: every block's size added up (what
    the VM allocates with no reuse across blocks); ``weights``, ``inputs``, ``returned``
    (bytes of the values the entry returns); ``unplanned``: values made outside the
    plan; ``checks``: what the plan's figures were held against (``Check``s: TVM's own
    estimate, a run's allocations), each with its verdict; ``notes``: what was not
    counted. ``known`` is False when the sizes could not be bound (``why`` says).
    ``spans``: each block's size and the steps it is live at, in program order (what is
    live at any step: ``live_at``). ``kv_cache``: bytes of the KV cache's pages as a
    served run saw them (one tensor per layer; 0 without one: they are no block of the
    entry's plan, made by another entry and held across steps), ``kv_pages`` those
    tensors' (shape, dtype)."""

    entry: str
    dims: dict[str, int]
    steps: tuple[str, ...] = ()
    live: tuple[float, ...] = ()
    peak: float = 0.0
    peak_step: int = -1
    peak_formula: Poly = ()
    at_peak: tuple[LiveValue, ...] = ()
    lifetimes: tuple[Lifetime, ...] = ()
    layers: tuple[LayerMemory, ...] = ()
    planned: float = 0.0
    blocks: int = 0
    weights: float = 0.0
    inputs: float = 0.0
    returned: float = 0.0
    unplanned: tuple[tuple[str, tuple, str], ...] = ()
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()
    known: bool = True
    why: str = ""
    spans: tuple[Span, ...] = ()
    kv_cache: float = 0.0
    kv_pages: tuple[tuple[tuple[int, ...], str], ...] = ()

    @property
    def peak_site(self) -> str:
        """The label of the call site at the peak ("" when none)."""
        return self.steps[self.peak_step] if 0 <= self.peak_step < len(self.steps) else ""

    def layer(self, name: str) -> LayerMemory | None:
        """The row of layer ``name``, or None."""
        return next((r for r in self.layers if r.layer == name), None)


def entry_dims(lineage: Lineage, entry: str, inputs) -> dict[str, int]:
    """Each symbolic dim of ``entry``'s parameters with its value in ``inputs`` (``(name,
    concrete shape, dtype)`` of each, as a profile records them), matched by name."""
    given = {name: shape for name, shape, _ in inputs}
    dims: dict[str, int] = {}
    for name, shape, _ in lineage.build.entries.get(entry, ()):
        got = given.get(name)
        if got is None or len(got) != len(shape):
            continue
        for dim, value in zip(shape, got):
            if isinstance(dim, str) and dim.isidentifier():
                dims.setdefault(dim, int(value))
    return dims


def profiled_memory(lineage: Lineage, profile, dims: Mapping[str, int] | None = None) -> Memory | None:
    """The memory of the entry ``profile`` ran, at the dims it ran with (each overridden
    by ``dims``), checked against the addresses that run recorded when the dims are its
    own."""
    ran = {**entry_dims(lineage, profile.entry, profile.inputs), **{dim: value for dim, value, _ in profile.bound}}
    env = {**ran, **(dims or {})}
    run = {key: arg.addresses for key, arg in profile.args.items() if arg.addresses} if env == ran else None
    found = memory_at(lineage, profile.entry, env, run)
    pages = profile.kv_pages
    if found is None or not pages:
        return found
    return attrs.evolve(found, kv_pages=pages, kv_cache=sum(_bytes(shape, dtype, {}) for shape, dtype in pages))


def memory_at(
    lineage: Lineage, entry: str, dims: Mapping[str, int], run: Mapping[str, tuple[int, ...]] | None = None
) -> Memory | None:
    """``entry``'s memory (``Memory``) with its symbolic dims at ``dims``; None when the
    lineage has no plan of it (a lineage saved before plans were read, a build without
    the VM's memory passes). A size that does not evaluate at ``dims`` gives a ``Memory``
    whose ``known`` is False, ``why`` naming the dim. ``run``: each call site's argument
    addresses in a run at these dims (``kernel#call`` -> ``ArgInfo.addresses``), against
    which the plan is checked (``_run_checks``)."""
    plan = lineage.build.memory.get(entry)
    if plan is None:
        return None
    env = dict(dims)
    try:
        sizes = [_size(block.bytes, env) for block in plan.blocks]
        weights = [(w, _bytes(w.shape, w.dtype, env)) for w in plan.weights]
        inputs = sum(_bytes(shape, dtype, env) for _, shape, dtype in plan.inputs)
    except NotEvaluable as exc:
        return Memory(
            entry,
            env,
            plan.steps,
            known=False,
            why=f"a size depends on {exc.args[0]}, which no input gave: give its value",
        )
    live = [0.0] * len(plan.steps)
    for block, size in zip(plan.blocks, sizes):
        for step in range(max(block.start, 0), min(block.end, len(live) - 1) + 1):
            live[step] += size
    peak_step = max(range(len(live)), key=live.__getitem__, default=-1)
    layer_of, anchor_of = _layers_of_sites(lineage, entry)
    spans = tuple(Span(b.name, size, b.start, b.end, b.returned) for b, size in zip(plan.blocks, sizes))
    lives = (*_activations(plan, sizes, peak_step, layer_of, env), *_weights_and_inputs(plan, weights, anchor_of, env))
    at_peak = _live(spans, lives, peak_step) if peak_step >= 0 else ()
    layers = _layers(plan, weights, at_peak, layer_of, anchor_of, env)
    formula = normal(term for b in plan.blocks if b.start <= peak_step <= b.end for term in b.bytes)
    returned = sum(size for block, size in zip(plan.blocks, sizes) if block.returned)
    planned = sum(sizes)
    return Memory(
        entry,
        env,
        plan.steps,
        tuple(live),
        live[peak_step] if peak_step >= 0 else 0.0,
        peak_step,
        formula,
        at_peak,
        lives,
        layers,
        planned,
        len(plan.blocks),
        sum(b for _, b in weights),
        inputs,
        returned,
        plan.unplanned,
        _checks(plan, planned) + (_run_checks(plan, sizes, run) if run else ()),
        _notes(plan),
        spans=spans,
    )


def live_at(memory: Memory, step: int) -> tuple[LiveValue, ...]:
    """The values live at ``step`` of ``memory``'s run (any step: ``at_peak`` is this at
    the peak), largest first; empty at no step."""
    return _live(memory.spans, memory.lifetimes, step)


def _size(poly: Poly, env: Mapping[str, int]) -> float:
    value = evaluate(poly, env)
    if not 0 <= value <= LIMIT:
        raise NotEvaluable(f"a size out of range ({value})")
    return value


def _bytes(shape, dtype: str, env: Mapping[str, int]) -> float:
    dims = concrete(shape, env)
    if dims is None:
        raise NotEvaluable(next((str(d) for d in shape if not isinstance(d, int)), "a dim"))
    if itemsize(dtype) is None:
        return 0.0  # a dtype of no known size (an opaque handle) is counted as none
    found = tensor_bytes((dims,), (dtype,))
    if found is None:
        raise NotEvaluable(f"a size out of range ({dims} of {dtype})")
    return found


def _layers_of_sites(lineage: Lineage, entry: str) -> tuple[dict[str, str], dict[str, str]]:
    """(site label -> the layer of the value it writes: its last model op's, the op a
    fused kernel's output is the value of, else its first origin's; site label -> its
    anchor's layer, else the same)."""
    writer, anchor = {}, {}
    for site in lineage.for_entry(entry).call_sites:
        writer[site.label] = _writer_layer(lineage, site)
        anchored = lineage.origins.get(site.anchor) if site.anchor is not None else None
        anchor[site.label] = anchored.layer if anchored is not None else writer[site.label]
    return writer, anchor


def _writer_layer(lineage: Lineage, site: CallSite) -> str:
    origins = [lineage.origins[o] for o in site.origin_ids if o in lineage.origins]
    ops = [o for o in origins if o.kind == OP]
    if ops:
        return max(ops, key=lambda o: o.index).layer
    return origins[0].layer if origins else NO_SITE


def _live(spans, lifetimes, step: int) -> tuple[LiveValue, ...]:
    """Each block live at ``step`` with the value it holds there (the latest written at or
    before it still read then; idle: none, and the next written into it), largest first."""
    held: dict[str, list[Lifetime]] = defaultdict(list)
    for value in lifetimes:
        if value.kind == ValueKind.ACTIVATION:
            held[value.name].append(value)
    out = []
    for span in spans:
        if not span.start <= step <= span.end:
            continue
        values = held.get(span.block, [])
        now = [v for v in values if v.first <= step <= v.last]
        value = now[-1] if now else next((v for v in values if v.first > step), None)
        largest = max(values, key=lambda v: v.own, default=None)
        sized_for = largest.layer if largest is not None else NO_SITE
        if value is None:
            out.append(LiveValue(span.block, span.bytes, (), "", "", NO_SITE, span.returned, True, sized_for=sized_for))
        else:
            out.append(
                LiveValue(
                    span.block,
                    span.bytes,
                    value.shape,
                    value.dtype,
                    value.site,
                    value.layer,
                    span.returned,
                    not now,
                    value.own if now else 0.0,
                    sized_for,
                )
            )
    return tuple(sorted(out, key=lambda v: -v.bytes))


def _own(held: Held, env) -> float:
    try:
        return _bytes(held.shape, held.dtype, env)
    except NotEvaluable:
        return 0.0


def _held_at(block: Block, step: int) -> Held | None:
    """The value a block holds at ``step``: the latest written at or before it that is
    still read then (None when it holds none then)."""
    now = [t for t in block.tensors if t.first <= step <= t.last]
    return now[-1] if now else None


def _activations(plan: MemoryPlan, sizes, peak_step: int, layer_of, env) -> list[Lifetime]:
    """The lifetime of each tensor the plan's blocks hold (``sizes``: each block's bytes),
    billed to the layer of the site that made it; the one live at ``peak_step`` in each
    block marked."""
    out = []
    for block, size in zip(plan.blocks, sizes):
        live = _held_at(block, peak_step) if block.start <= peak_step <= block.end else None
        for held in block.tensors:
            out.append(
                Lifetime(
                    ValueKind.ACTIVATION,
                    block.name,
                    size,
                    concrete(held.shape, env) or held.shape,
                    held.dtype,
                    held.site,
                    layer_of.get(held.site, NO_SITE),
                    held.first,
                    held.last,
                    held is live,
                    _own(held, env),
                )
            )
    return out


def _weights_and_inputs(plan: MemoryPlan, weights, anchor_of, env) -> list[Lifetime]:
    """The lifetime of each weight (``weights``: ``(weight, bytes)``), from the first
    step that reads it to the last, billed to the layer anchoring its first site; then
    each input's, for the whole run."""
    out = []
    steps = {label: i for i, label in enumerate(plan.steps)}
    for w, size in weights:
        where = [steps[s] for s in w.sites if s in steps]
        site = w.sites[0] if w.sites else ""
        out.append(
            Lifetime(
                ValueKind.WEIGHT,
                w.name,
                size,
                w.shape,
                w.dtype,
                site,
                anchor_of.get(site, NO_SITE),
                min(where, default=-1),
                max(where, default=-1),
            )
        )
    for name, shape, dtype in plan.inputs:
        out.append(Lifetime(ValueKind.INPUT, name, _bytes(shape, dtype, env), shape, dtype, "", "", -1, -1))
    return out


def _layers(plan: MemoryPlan, weights, at_peak, layer_of, anchor_of, env) -> tuple[LayerMemory, ...]:
    weight: dict[str, float] = defaultdict(float)
    for w, size in weights:
        weight[anchor_of.get(w.sites[0], NO_SITE) if w.sites else NO_SITE] += size
    written: dict[str, float] = defaultdict(float)
    for block in plan.blocks:
        for held in block.tensors:
            try:
                written[layer_of.get(held.site, NO_SITE)] += _bytes(held.shape, held.dtype, env)
            except NotEvaluable:
                continue
    peak: dict[str, float] = defaultdict(float)
    for value in at_peak:
        if not value.idle:
            peak[value.layer] += value.value_bytes
    names = dict.fromkeys([*peak, *written, *weight])
    rows = [LayerMemory(n, weight.get(n, 0.0), written.get(n, 0.0), peak.get(n, 0.0)) for n in names]
    return tuple(sorted(rows, key=lambda r: (-r.at_peak, -r.weights, -r.activations, r.layer)))


def _checks(plan: MemoryPlan, planned: float) -> tuple[Check, ...]:
    """The plan held against TVM's own figure of the same program."""
    if plan.tvm is None:
        return (
            Check(
                TVM_SAYS,
                Verdict.NOT_CHECKED,
                f"{TVM_SAYS} gives no figure for this entry (a symbolic size): not checked",
            ),
        )
    count, gb = plan.tvm
    ours = planned / 2**30
    agrees = count == len(plan.blocks) and abs(ours - gb) <= max(abs(gb), 1e-12) * 1e-3
    verdict = Verdict.AGREES if agrees else Verdict.DIFFERS
    return (
        Check(
            TVM_SAYS,
            verdict,
            f"{TVM_SAYS}: {count} allocations, {gb:.4g} GB; the plan read here: "
            f"{len(plan.blocks)} blocks, {ours:.4g} GB: {'agrees' if agrees else 'DIFFERS'}",
        ),
    )


RUN = "a run"  # what ``_run_checks`` hold the plan against: where a run put each value


def _run_checks(plan: MemoryPlan, sizes, run: Mapping[str, tuple[int, ...]]) -> tuple[Check, ...]:
    """The plan held against where a run put each value (its writer's argument address):
    the values of one block at one address, and no two blocks the plan has live at one
    step overlapping there; and how much memory the run's blocks spanned (the VM's
    allocator gives a freed block's memory to a later one, so it can be less than the
    plan's total)."""
    base: dict[int, set[int]] = {}
    for i, block in enumerate(plan.blocks):
        for held in block.tensors:
            addresses = run.get(SiteKey.parse(held.site, plan.entry).in_entry) if held.site else None
            if addresses is not None and 0 <= held.argument < len(addresses):
                base.setdefault(i, set()).add(addresses[held.argument])
    if not base:
        return (
            Check(
                RUN,
                Verdict.NOT_CHECKED,
                "a run: no address of a planned value was recorded (a profile "
                "made before relaytrace recorded them, or on a remote device): "
                "not checked",
            ),
        )
    split = [plan.blocks[i].name for i, found in base.items() if len(found) > 1]
    placed = {i: min(found) for i, found in base.items()}
    overlap = _overlap(plan, sizes, placed)
    spans = sorted((a, a + sizes[i]) for i, a in placed.items())
    spanned, end = 0.0, -1.0
    for start, stop in spans:
        spanned += max(0.0, stop - max(start, end))
        end = max(end, stop)
    found = f"a run: the values of {len(base)} of {len(plan.blocks)} blocks were found at their writers' addresses; "
    return (
        Check(
            RUN, Verdict.DIFFERS, found + f"DIFFERS: the values of {', '.join(split[:3])} were at different addresses"
        )
        if split
        else Check(RUN, Verdict.AGREES, found + "each block's values at one address: agrees"),
        Check(RUN, Verdict.DIFFERS, f"a run: {overlap}")
        if overlap
        else Check(RUN, Verdict.AGREES, "a run: no two blocks the plan has live at one step overlapped: agrees"),
        Check(
            RUN,
            Verdict.MEASURED,
            f"a run: the blocks spanned {spanned:.0f} bytes at "
            f"{len(set(placed.values()))} distinct addresses (the VM's allocator gives a "
            "freed block's memory to a later one)",
        ),
    )


def _overlap(plan: MemoryPlan, sizes, placed: Mapping[int, int]) -> str:
    """The first step at which two blocks the plan has live both sat on the same memory
    in the run ("" when none did): the plan's lifetimes would be wrong there."""
    for step in range(len(plan.steps)):
        live = sorted(
            (placed[i], placed[i] + sizes[i], plan.blocks[i].name)
            for i in placed
            if plan.blocks[i].start <= step <= plan.blocks[i].end
        )
        for (_, end, a), (start, _, b) in zip(live, live[1:]):
            if start < end:
                return f"DIFFERS: {a} and {b} are both live at {plan.steps[step]} but sat on the same memory"
    return ""


def _notes(plan: MemoryPlan) -> tuple[str, ...]:
    notes = list(plan.notes)
    if plan.unplanned:
        notes.append(
            f"{len(plan.unplanned)} value(s) made at run time outside the plan (by VM builtins) are not "
            "counted: " + ", ".join(sorted({what for what, _, _ in plan.unplanned}))
        )
    return tuple(notes)
