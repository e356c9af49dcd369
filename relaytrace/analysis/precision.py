"""Precision: the dtypes each call site and layer computes in, the casts and their time,
and the layers a float16 build left in float32, with why.

Pure functions over a lineage and the report's time shares. A site's dtypes come from
its kernel's TIR (``KernelWork``: ``dtype``, what most of its arithmetic is done in;
``accumulate``, what its reductions add into) and its arguments as the compiled IR
types them (``CallSite.arguments``, outputs last). An op's come from the member
PrimFunc it was lowered to (``BuildFacts.kernel_members``, matched to the site's
origins as verification matches them), counted before FuseTIR merged it: a float16 add
fused after a float32 matmul keeps its own dtype. Where no member is known the site's
figures stand for each of its ops.

A cast is an ``astype`` op: one ``ToMixedPrecision`` (or another pass) inserted, billed
to the layer it serves, or one of the model's own, billed to its layer. Its time is
what the report's policy bills it: under ``anchor`` a cast fused into another op's
kernel takes none (the kernel's op has it), under ``split`` its member's share.

A layer is left in float32 when, in a build that computes or stores anything in a
half-precision dtype, none of its ops reads, computes or stores one. Why, from the
first such op (``ToMixedPrecision``'s policy per op as the build's TVM registers it,
``BuildFacts.policies``): its inputs are integer; the model casts it (or its input)
to float32 itself; ``ToMixedPrecision`` never converts the op (policy "never": every
op registered without a policy, such as batch_norm, mean, softmax in TVM 0.27); or the
op follows its inputs' dtype (policy "follow": relu, add, max_pool2d, reshape) and an
input comes in float32 from a layer named with its own reason.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable

from attrs import define

from ..model.build_facts import PrecisionPolicy
from ..model.lineage import CallSite, Lineage
from ..model.origin import OP, UNRESOLVED, Origin
from ..model.sitekey import SiteKey
from ..model.verification import matching
from .attribution import Share

CAST = "cast"  # the key of the casts' time in ``Precision.by_dtype``
MODEL = "model"  # who inserted a cast the model has itself
ALWAYS, FOLLOW, NEVER = PrecisionPolicy.ALWAYS, PrecisionPolicy.FOLLOW, PrecisionPolicy.NEVER
_HALF = ("float16", "bfloat16", "float8")


def is_half(dtype: str | None) -> bool:
    """A dtype narrower than float32 that mixed precision computes or stores in."""
    return bool(dtype) and str(dtype).startswith(_HALF)


def is_cast(origin: Origin) -> bool:
    """An ``astype`` op (inserted by a pass or the model's own)."""
    return origin.op.rsplit(".", 1)[-1] == "astype"


@define(frozen=True)
class Dtypes:
    """The dtypes of one op (or one call site) as compiled: ``compute``, what most of
    its float arithmetic is done in (for one without arithmetic, data movement and
    casts, the dtype it stores); ``accumulate``, what its reductions add into (None:
    it reduces nothing, or the lineage predates the count); ``inputs``, the distinct
    float dtypes it reads; ``storage``, the dtype of its (first) output."""

    compute: str
    accumulate: str | None
    inputs: tuple[str, ...]
    storage: str

    @property
    def half(self) -> bool:
        """Whether it reads, computes or stores a half-precision dtype."""
        return any(is_half(d) for d in (self.compute, self.storage, *self.inputs))


@define(frozen=True)
class SitePrecision:
    """One kernel call site: its kernel's ``dtypes`` (``compute`` the TIR's
    ``KernelWork.dtype``, ``storage`` its last argument's), its median time ``us``, and
    the casts it runs (origin ids; ``casts_only``: it runs nothing else)."""

    label: str
    dtypes: Dtypes
    us: float
    casts: tuple[str, ...] = ()
    casts_only: bool = False


@define(frozen=True)
class LayerPrecision:
    """One layer: the compute dtypes of its ops other than casts (most time first, then
    in run order), the float dtypes they read, what their reductions accumulate in, the
    time billed to it (``us``) and to the casts it is billed (``cast_us``); in a float16
    build, whether it is left in float32 (``float32``) and ``why``."""

    layer: str
    compute: tuple[str, ...]
    inputs: tuple[str, ...]
    accumulate: tuple[str, ...]
    us: float
    cast_us: float
    float32: bool = False
    why: str = ""

    @property
    def dtype(self) -> str:
        """Its compute dtypes as one cell (``float16+float32`` for a layer of both;
        ``cast`` for a layer of casts alone)."""
        return "+".join(self.compute) or CAST

    @property
    def label(self) -> str:
        """``dtype``, with the half dtypes it reads when it computes wider
        (``float32 (reads float16)``: a float16 conv accumulating in float32)."""
        read = [d for d in self.inputs if is_half(d) and d not in self.compute]
        return self.dtype + (f" (reads {'+'.join(read)})" if read and self.compute else "")


@define(frozen=True)
class CastPrecision:
    """One cast (an ``astype`` origin): the ``layer`` its time is billed to (the one it
    serves, or its own for the model's), the origins it ``serves``, who inserted it
    (``by``: the pass, or ``MODEL``), the dtypes it converts ``source`` to ``target``
    (None where unknown), the call sites running it, whether it runs fused into another
    op's kernel, and the time the report's policy bills it (``us``)."""

    origin: str
    layer: str
    serves: tuple[str, ...]
    by: str
    source: str | None
    target: str | None
    sites: tuple[str, ...]
    fused: bool
    us: float


@define(frozen=True)
class Precision:
    """A build's precision: ``build`` in words; ``mixed``, whether it reads, computes or
    stores anything in a half-precision dtype (then ``layers`` say which are left in
    float32); each site's and layer's dtypes (``layers`` slowest first, then those
    without time of their own); every cast; time by compute dtype (``by_dtype``:
    ``(dtype, us, percent of kernel time)``, most first, the casts apart under
    ``CAST``); the casts' time and share; the casts eliminated at build time."""

    build: str
    mixed: bool
    sites: dict[SiteKey, SitePrecision]
    layers: tuple[LayerPrecision, ...]
    casts: tuple[CastPrecision, ...]
    by_dtype: tuple[tuple[str, float, float], ...]
    cast_us: float
    cast_percent: float
    folded: tuple[str, ...] = ()  # casts a pass eliminated (a weight's, folded into a constant): they never run

    @property
    def float32_layers(self) -> tuple[LayerPrecision, ...]:
        """The layers a float16 build left in float32, slowest first."""
        return tuple(r for r in self.layers if r.float32)

    def layer(self, name: str) -> LayerPrecision | None:
        """One layer's precision, None for a layer with no op in a kernel."""
        return next((r for r in self.layers if r.layer == name), None)

    def kernel_dtype(self, kernel: str) -> str:
        """The compute dtype of a kernel (its first site's; "" when none ran)."""
        return next((s.dtypes.compute for k, s in self.sites.items() if k.kernel == kernel), "")


def precision(lineage: Lineage, parts: Iterable[Share], site_us: dict[SiteKey, float]) -> Precision:
    """The ``Precision`` of ``lineage`` (as the profiled entry sees it) with its time
    cut as ``parts`` (the report's shares) and each site's median time ``site_us``."""
    parts = tuple(parts)
    sites: dict[SiteKey, SitePrecision] = {}
    ops: dict[SiteKey, dict[str, Dtypes]] = {}
    for site in lineage.call_sites:
        figures = site_dtypes(lineage, site)
        ops[site.key] = op_dtypes(lineage, site, figures)
        cast_ids = tuple(o for o in site.origin_ids if is_cast(lineage.origins[o]))
        sites[site.key] = SitePrecision(
            site.label,
            figures,
            site_us.get(site.key, 0.0),
            cast_ids,
            bool(cast_ids) and len(cast_ids) == len(site.origin_ids),
        )
    total = sum(s.us for s in parts)
    by: dict[str, float] = defaultdict(float)
    for s in parts:
        origin = lineage.origins[s.origin] if s.origin in lineage.origins else None
        if origin is None or s.key not in sites:  # a KV-cache kernel's call: in the dtype of the op that ran it
            by[origin.output_dtypes[0] if origin is not None and origin.output_dtypes else "unknown"] += s.us
            continue
        dtypes = ops[s.key].get(s.origin) or sites[s.key].dtypes
        by[CAST if is_cast(origin) else dtypes.compute] += s.us
    mixed = any(d.half for per_site in ops.values() for d in per_site.values())
    casts = _casts(lineage, parts, ops)
    layers = _layers(lineage, parts, ops, casts, mixed)
    cast_us = sum(c.us for c in casts)
    accumulate = lineage.build.accumulate
    build = (
        f"float16 through ToMixedPrecision, accumulating in {accumulate}"
        if accumulate
        else "mixed, as imported"
        if mixed
        else "float32"
    )
    return Precision(
        build,
        mixed,
        sites,
        layers,
        casts,
        tuple(sorted(((d, us, _percent(us, total)) for d, us in by.items()), key=lambda r: (-r[1], r[0]))),
        cast_us,
        _percent(cast_us, total),
        tuple(
            sorted(o for o, origin in lineage.origins.items() if is_cast(origin) and o in lineage.journal.eliminated_by)
        ),
    )


def site_dtypes(lineage: Lineage, site: CallSite) -> Dtypes:
    """A site's dtypes from its kernel's counted work and its arguments (outputs last)."""
    args = site.arguments
    storage = args[-1][1] if args else ""
    inputs = _floats(d for _, d in args[:-1])
    work = lineage.build.work.get(site.kernel)
    if work is not None and work.flops:
        return Dtypes(work.dtype, work.accumulate, inputs, storage or work.dtype)
    if not storage and work is not None and work.params:
        storage = work.params[-1][1]
    return Dtypes(storage or "float32", work.accumulate if work is not None else None, inputs, storage or "float32")


def op_dtypes(lineage: Lineage, site: CallSite, figures: Dtypes) -> dict[str, Dtypes]:
    """Each origin of a site -> its dtypes, from the member PrimFunc it was lowered to
    (its parameters, outputs last: as many as the origin has outputs), or the site's
    ``figures`` where no member is matched to it or counted."""
    origins = [lineage.origins[o] for o in site.origin_ids]
    members = [m for m in lineage.build.kernel_members.get(site.kernel, ()) if m.ops and not m.part]
    out = dict.fromkeys(site.origin_ids, figures)
    if len(origins) == 1 or not members:
        return out
    for i, j in matching(members, origins).items():
        work = lineage.build.work.get(members[i].prim_func)
        if work is None or not work.params:
            continue
        outputs = max(1, min(len(origins[j].output_dtypes), len(work.params) - 1))
        storage = work.params[-outputs][1]
        read = _floats(d for _, d in work.params[:-outputs])
        out[origins[j].id] = Dtypes(work.dtype if work.flops else storage, work.accumulate, read, storage)
    return out


def _casts(
    lineage: Lineage, parts: tuple[Share, ...], ops: dict[SiteKey, dict[str, Dtypes]]
) -> tuple[CastPrecision, ...]:
    """Every cast of the lineage's sites, with the time ``parts`` bill it, most first."""
    billed: dict[str, float] = defaultdict(float)
    for s in parts:
        billed[s.origin] += s.us
    found: dict[str, dict] = {}
    for site in lineage.call_sites:
        for oid in site.origin_ids:
            origin = lineage.origins[oid]
            if not is_cast(origin):
                continue
            entry = found.setdefault(oid, {"sites": [], "fused": False, "dtypes": ops[site.key][oid]})
            entry["sites"].append(site.label)
            entry["fused"] |= any(not is_cast(lineage.origins[o]) for o in site.origin_ids)
    out = []
    for oid, entry in found.items():
        origin, dtypes = lineage.origins[oid], entry["dtypes"]
        source = origin.input_dtypes[0] if origin.input_dtypes else (dtypes.inputs[0] if dtypes.inputs else None)
        target = origin.output_dtypes[0] if origin.output_dtypes else dtypes.storage or None
        out.append(
            CastPrecision(
                oid,
                origin.layer,
                origin.serves,
                MODEL if origin.kind == OP else origin.pass_name or "a pass",
                source,
                target,
                tuple(entry["sites"]),
                entry["fused"],
                billed.get(oid, 0.0),
            )
        )
    return tuple(sorted(out, key=lambda c: (-c.us, c.origin)))


def _layers(
    lineage: Lineage,
    parts: tuple[Share, ...],
    ops: dict[SiteKey, dict[str, Dtypes]],
    casts: tuple[CastPrecision, ...],
    mixed: bool,
) -> tuple[LayerPrecision, ...]:
    """Each layer with an op in a kernel: its ops' dtypes and time; in a ``mixed``
    build, whether none of its ops touches a half dtype (left in float32), and why."""
    us: dict[str, float] = defaultdict(float)
    op_us: dict[str, float] = defaultdict(float)
    for s in parts:
        us[s.layer] += s.us
        op_us[s.origin] += s.us
    cast_us: dict[str, float] = defaultdict(float)
    for c in casts:
        cast_us[c.layer] += c.us
    of_origin: dict[str, list[Dtypes]] = defaultdict(list)  # op origin -> its dtypes at each site
    order: dict[str, list[str]] = {}  # layer -> its op origins in kernels, in run order
    for site in lineage.call_sites:
        for oid in site.origin_ids:
            origin = lineage.origins[oid]
            of_origin[oid].append(ops[site.key][oid])
            if origin.kind != UNRESOLVED:
                order.setdefault(origin.layer, [])
                if oid not in order[origin.layer]:
                    order[origin.layer].append(oid)
    kept = {oid for oid, found in of_origin.items() if not any(d.half for d in found)}
    reasons = _Reasons(lineage, kept)
    rows = []
    for layer, oids in order.items():
        computing = [o for o in oids if not is_cast(lineage.origins[o])]
        compute: dict[str, float] = {}
        for oid in sorted(computing, key=lambda o: -op_us[o]):  # stable: run order among equals
            for d in of_origin[oid]:
                compute[d.compute] = compute.get(d.compute, 0.0) + op_us[oid]
        found = [d for o in computing for d in of_origin[o]]
        left = mixed and bool(computing) and all(o in kept for o in computing)
        why = "; ".join(dict.fromkeys(reasons.why(o) for o in computing)) if left else ""
        rows.append(
            LayerPrecision(
                layer,
                tuple(compute),
                _floats(x for d in found for x in d.inputs),
                tuple(dict.fromkeys(d.accumulate for d in found if d.accumulate)),
                us.get(layer, 0.0),
                cast_us.get(layer, 0.0),
                left,
                why,
            )
        )
    return tuple(sorted(rows, key=lambda r: (-r.us, r.layer)))


class _Reasons:
    """Why an op is left in float32; for one that follows its inputs, the op its float32
    comes from (up the data flow through other followers) and that op's reason."""

    def __init__(self, lineage: Lineage, kept: set[str]):
        self.lineage, self.kept = lineage, kept
        self.policies = lineage.build.policies
        self.producers: dict[str, list[str]] = defaultdict(list)
        for a, b in lineage.edges:
            self.producers[b].append(a)
        self.roots: dict[str, str | None] = {}

    def why(self, oid: str) -> str:
        origin = self.lineage.origins[oid]
        own = self._own(origin)
        if own is not None:
            return own
        root = self._root(oid)
        if root is None:
            return (
                f"{origin.short_op} follows its inputs (policy follow), which are float32: the model's inputs or "
                "constants"
            )
        src = self.lineage.origins[root]
        return f"{origin.short_op} follows its inputs (policy follow), float32 from {src.layer}: {self._own(src)}"

    def _own(self, origin: Origin) -> str | None:
        """The reason of an op that does not follow its inputs (None for one that does)."""
        op = origin.short_op
        if origin.input_dtypes and not _floats(origin.input_dtypes):
            return (
                f"{op} reads integers only ({', '.join(dict.fromkeys(origin.input_dtypes))}); ToMixedPrecision "
                "converts float32"
            )
        if is_cast(origin) and origin.kind == OP:
            return f"the model casts to {origin.output_dtypes[0] if origin.output_dtypes else 'float32'} itself"
        for p in self.producers.get(origin.id, ()):
            src = self.lineage.origins.get(p)
            if src is not None and is_cast(src) and src.kind == OP and not any(is_half(d) for d in src.output_dtypes):
                return f"the model casts its input to float32 itself ({src.layer})"
        if not self.lineage.build.accumulate:
            return "the model computes it in float32 (the build did not run ToMixedPrecision)"
        policy = self.policies.get(origin.op)
        if policy is None:
            return f"ToMixedPrecision kept {op} in float32 (its policy is not recorded in this lineage)"
        if policy == NEVER:
            return f"ToMixedPrecision never converts {op} (policy never)"
        if policy == FOLLOW:
            return None
        return f"ToMixedPrecision converts {op} (policy {policy}), yet it is float32 here"

    def _root(self, oid: str) -> str | None:
        """The nearest op up the data flow from ``oid``, through float32 followers, that
        is float32 for a reason of its own (None: none, its inputs are the model's);
        breadth first, each op's answer kept."""
        if oid in self.roots:
            return self.roots[oid]
        found, seen, queue = None, {oid}, deque([oid])
        while queue and found is None:
            for p in self.producers.get(queue.popleft(), ()):
                if p in seen or p not in self.kept or p not in self.lineage.origins:
                    continue
                seen.add(p)
                if self._own(self.lineage.origins[p]) is not None:
                    found = p
                    break
                if self.roots.get(p) is not None:
                    found = self.roots[p]
                    break
                queue.append(p)
        self.roots[oid] = found
        return found


def _floats(dtypes: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d for d in dtypes if str(d).startswith(("float", "bfloat"))))


def _percent(us: float, total: float) -> float:
    return 100.0 * us / total if total > 0 else 0.0
