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

from attrs import define

from ..model.lineage import CallSite, Lineage
from ..model.memory import Block, Held, MemoryPlan
from ..model.origin import OP
from ..model.work import LIMIT, Poly, concrete, evaluate, itemsize

NO_SITE = "(no kernel)"  # the layer of a value no kernel call writes
TVM_SAYS = "relax.analysis.estimate_memory_usage"


@define(frozen=True)
class LiveValue:
    """A value live at the peak: the ``block`` it is in (``bytes``: the block's size),
    its ``shape`` (at the dims bound) and ``dtype``, the call site that wrote it and
    that site's ``layer``; ``returned`` when the entry returns it; ``idle`` when the
    block holds no value being read at the peak but is kept for the next one written
    into it (then ``site`` and ``layer`` are that next value's): the plan keeps a block
    from its first value to its last."""

    block: str
    bytes: float
    shape: tuple
    dtype: str
    site: str
    layer: str
    returned: bool = False
    idle: bool = False


@define(frozen=True)
class Lifetime:
    """One value's life, as ``memory.csv`` lists them: ``kind`` (``activation``: a value
    the plan places in ``block``; ``weight``; ``input``), ``bytes`` (an activation's:
    its block's size), its ``shape`` and ``dtype``, the call ``site`` that writes it (a
    weight's: the first that reads it) and its ``layer``, the steps it is ``first``
    written (or read) and ``last`` read at (-1: none), and whether it is live at the
    peak."""

    kind: str
    name: str
    bytes: float
    shape: tuple
    dtype: str
    site: str
    layer: str
    first: int
    last: int
    at_peak: bool = False


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
    (bytes of the live values it wrote, at the peak)."""

    layer: str
    weights: float
    activations: float
    at_peak: float


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
    plan; ``checks``: what the plan's figures were held against, each saying whether it
    agrees (TVM's own estimate; a run's allocations); ``notes``: what was not
    counted. ``known`` is False when the sizes could not be bound (``why`` says).
    ``spans``: each block's size and the steps it is live at, in program order (what is
    live at any step: ``live_at``)."""

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
    checks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    known: bool = True
    why: str = ""
    spans: tuple[Span, ...] = ()

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


def memory_at(lineage: Lineage, entry: str, dims: Mapping[str, int]) -> Memory | None:
    """``entry``'s memory (``Memory``) with its symbolic dims at ``dims``; None when the
    lineage has no plan of it (a lineage saved before plans were read, a build without
    the VM's memory passes). A size that does not evaluate at ``dims`` gives a ``Memory``
    whose ``known`` is False, ``why`` naming the dim."""
    plan = lineage.build.memory.get(entry)
    if plan is None:
        return None
    env = dict(dims)
    try:
        sizes = [_size(block.bytes, env) for block in plan.blocks]
        weights = [(w, _bytes(w.shape, w.dtype, env)) for w in plan.weights]
        inputs = sum(_bytes(shape, dtype, env) for _, shape, dtype in plan.inputs)
    except KeyError as exc:
        return Memory(entry, env, plan.steps, known=False,
                      why=f"a size depends on {exc.args[0]}, which no input gave: give its value")
    live = [0.0] * len(plan.steps)
    for block, size in zip(plan.blocks, sizes):
        for step in range(max(block.start, 0), min(block.end, len(live) - 1) + 1):
            live[step] += size
    peak_step = max(range(len(live)), key=live.__getitem__, default=-1)
    layer_of, anchor_of = _layers_of_sites(lineage, entry)
    spans = tuple(Span(b.name, size, b.start, b.end, b.returned) for b, size in zip(plan.blocks, sizes))
    lives = _lifetimes(plan, sizes, weights, peak_step, layer_of, anchor_of, env)
    at_peak = _live(spans, lives, peak_step) if peak_step >= 0 else ()
    layers = _layers(plan, weights, at_peak, layer_of, anchor_of, env)
    formula = _sum_polys(b.bytes for b in plan.blocks if b.start <= peak_step <= b.end)
    returned = sum(size for block, size in zip(plan.blocks, sizes) if block.returned)
    planned = sum(sizes)
    return Memory(
        entry, env, plan.steps, tuple(live), live[peak_step] if peak_step >= 0 else 0.0, peak_step, formula,
        at_peak, lives, layers, planned, len(plan.blocks), sum(b for _, b in weights), inputs, returned, plan.unplanned,
        _checks(plan, planned), _notes(plan), spans=spans)


def live_at(memory: Memory, step: int) -> tuple[LiveValue, ...]:
    """The values live at ``step`` of ``memory``'s run (any step: ``at_peak`` is this at
    the peak), largest first; empty at no step."""
    return _live(memory.spans, memory.lifetimes, step)


def _size(poly: Poly, env: Mapping[str, int]) -> float:
    value = evaluate(poly, env)
    if not 0 <= value <= LIMIT:
        raise KeyError(f"a size out of range ({value})")
    return value


def _bytes(shape, dtype: str, env: Mapping[str, int]) -> float:
    dims = concrete(shape, env)
    size = itemsize(dtype)
    if dims is None:
        raise KeyError(next((str(d) for d in shape if not isinstance(d, int)), "a dim"))
    total = float(size or 0)
    for d in dims:
        total *= d
    return total


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
        if value.kind == "activation":
            held[value.name].append(value)
    out = []
    for span in spans:
        if not span.start <= step <= span.end:
            continue
        values = held.get(span.block, [])
        now = [v for v in values if v.first <= step <= v.last]
        value = now[-1] if now else next((v for v in values if v.first > step), None)
        if value is None:
            out.append(LiveValue(span.block, span.bytes, (), "", "", NO_SITE, span.returned, True))
        else:
            out.append(LiveValue(span.block, span.bytes, value.shape, value.dtype, value.site, value.layer,
                                 span.returned, not now))
    return tuple(sorted(out, key=lambda v: -v.bytes))


def _held_at(block: Block, step: int) -> Held | None:
    """The value a block holds at ``step``: the latest written at or before it that is
    still read then (None when it holds none then)."""
    now = [t for t in block.tensors if t.first <= step <= t.last]
    return now[-1] if now else None


def _lifetimes(plan: MemoryPlan, sizes, weights, peak_step: int, layer_of, anchor_of, env) -> tuple[Lifetime, ...]:
    out = []
    for block, size in zip(plan.blocks, sizes):
        live = _held_at(block, peak_step) if block.start <= peak_step <= block.end else None
        for held in block.tensors:
            out.append(Lifetime("activation", block.name, size, concrete(held.shape, env) or held.shape, held.dtype,
                                held.site,
                                layer_of.get(held.site, NO_SITE), held.first, held.last, held is live))
    steps = {label: i for i, label in enumerate(plan.steps)}
    for w, size in weights:
        where = [steps[s] for s in w.sites if s in steps]
        site = w.sites[0] if w.sites else ""
        out.append(Lifetime("weight", w.name, size, w.shape, w.dtype, site, anchor_of.get(site, NO_SITE),
                            min(where, default=-1), max(where, default=-1)))
    for name, shape, dtype in plan.inputs:
        out.append(Lifetime("input", name, _bytes(shape, dtype, env), shape, dtype, "", "", -1, -1))
    return tuple(out)


def _layers(plan: MemoryPlan, weights, at_peak, layer_of, anchor_of, env) -> tuple[LayerMemory, ...]:
    weight: dict[str, float] = defaultdict(float)
    for w, size in weights:
        weight[anchor_of.get(w.sites[0], NO_SITE) if w.sites else NO_SITE] += size
    written: dict[str, float] = defaultdict(float)
    for block in plan.blocks:
        for held in block.tensors:
            try:
                written[layer_of.get(held.site, NO_SITE)] += _bytes(held.shape, held.dtype, env)
            except KeyError:
                continue
    peak: dict[str, float] = defaultdict(float)
    for value in at_peak:
        peak[value.layer] += value.bytes
    names = dict.fromkeys([*peak, *written, *weight])
    rows = [LayerMemory(n, weight.get(n, 0.0), written.get(n, 0.0), peak.get(n, 0.0)) for n in names]
    return tuple(sorted(rows, key=lambda r: (-r.at_peak, -r.weights, -r.activations, r.layer)))


def _sum_polys(polys) -> Poly:
    sums: dict[tuple, int] = defaultdict(int)
    for poly in polys:
        for coef, atoms in poly:
            sums[atoms] += coef
    return tuple(sorted(((c, a) for a, c in sums.items() if c), key=lambda t: (len(t[1]), t[1])))


def _checks(plan: MemoryPlan, planned: float) -> tuple[str, ...]:
    """The plan held against TVM's own figure of the same program."""
    if plan.tvm is None:
        return (f"{TVM_SAYS} gives no figure for this entry (a symbolic size): not checked",)
    count, gb = plan.tvm
    ours = planned / 2**30
    agrees = count == len(plan.blocks) and abs(ours - gb) <= max(abs(gb), 1e-12) * 1e-3
    verdict = "agrees" if agrees else "DIFFERS"
    return (f"{TVM_SAYS}: {count} allocations, {gb:.4g} GB; the plan read here: {len(plan.blocks)} blocks, "
            f"{ours:.4g} GB: {verdict}",)


def _notes(plan: MemoryPlan) -> tuple[str, ...]:
    notes = list(plan.notes)
    if plan.unplanned:
        notes.append(f"{len(plan.unplanned)} value(s) made at run time outside the plan (by VM builtins) are not "
                     "counted: " + ", ".join(sorted({what for what, _, _ in plan.unplanned})))
    return tuple(notes)
