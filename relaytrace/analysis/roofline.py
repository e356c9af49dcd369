"""Why a layer is slow: its work, the rates it achieved, and how far it is from the roofline.

Pure functions over a lineage (each kernel's ``KernelWork``), a profile (each site's
median time and argument shapes) and peaks (``model.peaks``). Per call site: FLOPs
and bytes at the shapes it ran with (``model.work.work_at``), achieved GFLOP/s and
GB/s, the roofline's lower bound ``max(FLOPs / peak, bytes / bandwidth)``, what bounds
it (compute or memory), efficiency (bound / measured) and the time above the bound
("wasted"). Beside the executed FLOPs (the TIR's) each site's useful FLOPs, what its
ops ask (``model.work.useful_flops``), and the model-FLOP/s rate they give; a site or
roll-up whose executed FLOPs exceed its useful ones by more than
``work_split.EXCESS`` says why (``Roof.excess``).

A layer, an op type, a kernel get the time, bytes and bound of the shares the policy
bills them (``attribution.Share``: a site's bytes and bound cut in the proportions its
time is, so those roll-ups add up as the times do), and the FLOPs of their own ops
(``work_split.op_works``: a fused kernel's executed count cut by each op's own
member's count, whatever the policy), so a layer whose op was fused into another
layer's kernel keeps its own work, and a layer billed no time is listed with its work.

Bytes are each tensor argument's size, read or written once: a kernel that re-reads
its data from cache moves more, one whose data stay in cache may beat the memory
ceiling (``over_ceiling`` says which sites did, and why that is no measurement error).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from attrs import define, field

from ..model.lineage import Lineage
from ..model.lineage_index import billed_layers
from ..model.origin import OP
from ..model.peaks import COMPUTE_BOUND, MEMORY_BOUND, Peaks
from ..model.profile import CACHE, KERNEL, Profile
from ..model.run_spec import PolicyName
from ..model.sitekey import SiteKey
from ..model.work import Work, cache_work, work_at
from .attribution import Category, Share, op_type_of
from .work_split import EXCESS, OpWork, op_works

COMPUTE_OVER = "above the compute ceiling: the count or the timer is wrong for this site"
UNTIMED = "no time billed to it: its ops ran in kernels the policy bills to other layers (anchor: to their anchor op)"
MEMORY_OVER = "above the memory ceiling: its data stayed in cache (the ceiling is DRAM's)"


@define(frozen=True)
class Roof:
    """The roofline figures of a call site or of a roll-up (a layer, an op type, a
    kernel): ``us`` measured (median per run), ``flops``, ``transcendentals``, ``bytes``
    (None when not counted), the lower bound ``bound_us`` and what sets it (``bound_by``
    compute or memory; None without peaks or work), ``notes`` (why a figure is missing),
    ``dtype`` (a roll-up's: that of most of its bound); ``useful`` the FLOPs its ops ask
    (``model.work.useful_flops``; the executed ones of an op with no formula), beside
    ``flops``, the executed (its TIR's); ``excess``: why the executed exceed the useful
    by more than ``work_split.EXCESS`` (empty when they do not)."""

    name: str
    us: float
    flops: float | None
    transcendentals: float | None
    bytes: float | None
    bound_us: float | None
    bound_by: str | None
    notes: tuple[str, ...] = ()
    dtype: str = "float32"  # what most of its arithmetic is done in (the ceiling it is held to)
    useful: float | None = None
    excess: tuple[str, ...] = ()

    @property
    def model_gflops_s(self) -> float | None:
        """The model-FLOP/s rate: useful FLOPs over the measured time."""
        return _rate(self.useful, self.us)

    @property
    def executed_ratio(self) -> float | None:
        """Executed FLOPs over useful ones (4.0: three quarters of the work is not asked)."""
        return self.flops / self.useful if self.flops is not None and self.useful else None

    @property
    def gflops_s(self) -> float | None:
        """Achieved GFLOP/s (FLOPs over the measured time)."""
        return _rate(self.flops, self.us)

    @property
    def gbytes_s(self) -> float | None:
        """Achieved GB/s (bytes over the measured time)."""
        return _rate(self.bytes, self.us)

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.bytes if self.flops is not None and self.bytes else None

    @property
    def efficiency(self) -> float | None:
        """The bound over the measured time: 1 on the roofline, 0.1 ten times above it."""
        return self.bound_us / self.us if self.bound_us is not None and self.us > 0 else None

    @property
    def wasted_us(self) -> float | None:
        """Time above the lower bound (never below 0)."""
        return max(self.us - self.bound_us, 0.0) if self.bound_us is not None else None


def _rate(amount: float | None, us: float) -> float | None:
    """Giga-units per second of ``amount`` done in ``us`` microseconds (None: unknown, or no time)."""
    return amount / us / 1e3 if amount is not None and us > 0 else None


@define(frozen=True)
class Roofline:
    """Every site's ``Roof`` and their roll-ups by layer, op type and kernel (each
    sorted by time above the bound, most first; without peaks by time), the ``peaks``
    used (None: rates only), how many sites' work is known, and the attribution
    ``policy`` that billed the roll-ups' time (their FLOPs are their own ops' under
    any)."""

    peaks: Peaks | None
    sites: dict[SiteKey, Roof]
    layers: tuple[Roof, ...]
    op_types: tuple[Roof, ...]
    kernels: tuple[Roof, ...]
    counted: int  # sites whose FLOPs are known
    over_ceiling: tuple[tuple[str, str], ...]  # (site label, which ceiling and why) of sites above one
    policy: PolicyName = PolicyName.ANCHOR

    def layer(self, name: str) -> Roof | None:
        """The roll-up of one layer, None if no time was billed to it."""
        return next((r for r in self.layers if r.name == name), None)


def site_roofs(lineage: Lineage, profile: Profile, peaks: Peaks | None) -> dict[SiteKey, Roof]:
    """Each kernel call site's ``Roof`` at the shapes it ran with (a site without
    recorded argument shapes has no bytes, and no bound)."""
    return {key: roof for key, (roof, _) in site_work(lineage, profile, peaks).items()}


def site_work(
    lineage: Lineage, profile: Profile, peaks: Peaks | None
) -> dict[SiteKey, tuple[Roof, tuple[OpWork, ...]]]:
    """Each call site's ``Roof`` and its ops' parts of its work (``work_split.op_works``;
    none for a KV-cache kernel call, which runs no op of its own)."""
    times = profile.by_site(KERNEL)
    out = {}
    for site in lineage.call_sites:
        arg = profile.arg(site.key)
        kernel_work = lineage.build.work.get(site.kernel)
        work = work_at(kernel_work, arg.shapes if arg else (), arg.dtypes if arg else ())
        dtype = kernel_work.dtype if kernel_work else "float32"
        bound, by = lower_bound(work.flops, work.bytes, peaks, dtype)
        notes = (work.why,) if work.why else ()
        ops = op_works(lineage, site, arg, work.flops, work.transcendentals)
        useful = _total(o.useful for o in ops)
        excess = _excess(work.flops, useful, (o.excess for o in ops))
        out[site.key] = (
            Roof(
                site.label,
                times.get(site.key, 0.0),
                work.flops,
                work.transcendentals,
                work.bytes,
                bound,
                by,
                notes,
                dtype,
                useful,
                excess,
            ),
            ops,
        )
    cache = lineage.build.kv_cache
    for key, us in profile.by_site(CACHE).items():
        work = (
            cache_work(cache, key.kernel, *profile.step, sequences=profile.sequences)
            if cache and len(profile.step) == 2
            else Work(None, None, None, "the profile does not say the step's tokens and context")
        )
        bound, by = lower_bound(work.flops, work.bytes, peaks, "float32")
        out[key] = (
            Roof(
                key.label,
                us,
                work.flops,
                work.transcendentals,
                work.bytes,
                bound,
                by,
                (work.why,) if work.why else (),
                "float32",
                work.flops,
            ),
            (),
        )
    return out


def _total(values) -> float | None:
    """The sum, None when one is unknown."""
    values = list(values)
    return None if None in values else float(sum(values))


def _excess(flops: float | None, useful: float | None, reasons) -> tuple[str, ...]:
    """Why ``flops`` executed exceed the ``useful`` by more than ``EXCESS``: the
    ``reasons`` of the ops that do, each once (empty when they do not)."""
    if flops is None or useful is None or flops <= useful * (1 + EXCESS):
        return ()
    return tuple(dict.fromkeys(r for r in reasons if r)) or (
        "executed beyond useful, in no single op: the kernel's count exceeds its ops' own",
    )


def lower_bound(
    flops: float | None, moved: float | None, peaks: Peaks | None, dtype: str
) -> tuple[float | None, str | None]:
    """``peaks.bound`` of a site's figures, (None, None) when one is unknown."""
    if peaks is None or flops is None or moved is None:
        return None, None
    return peaks.bound(flops, moved, dtype)


def roofline(
    lineage: Lineage, profile: Profile, parts: tuple[Share, ...], policy: PolicyName = PolicyName.ANCHOR
) -> Roofline:
    """The ``Roofline`` of a profile of ``lineage``'s build (``lineage`` as the profiled
    entry sees it) against the profile's peaks, its roll-ups' time made of the same
    ``parts`` as the time tables (billed by ``policy``), their work of their own ops."""
    peaks = profile.peaks
    work = site_work(lineage, profile, peaks)
    sites = {key: roof for key, (roof, _) in work.items()}
    over = []
    for roof in sites.values():
        if peaks is None or not roof.us:
            continue
        if roof.gflops_s is not None and roof.gflops_s > peaks.for_dtype(roof.dtype) * 1.05:
            over.append((roof.name, COMPUTE_OVER))
        elif roof.gbytes_s is not None and roof.gbytes_s > peaks.gbps * 1.05:
            over.append((roof.name, MEMORY_OVER))
    origins = lineage.origins
    owners = {s.key: s for s in lineage.call_sites}

    def layers_of(key, origin_id):
        origin = origins[origin_id]
        return (origin.layer,) if origin.kind == OP else billed_layers(origin, origins)

    rolled = {
        name: _roll_up(parts, work, key, owner)
        for name, key, owner in (
            ("layer", lambda s: s.layer, layers_of),
            (
                "op",
                lambda s: s.op if s.category == Category.COMPUTE else f"{s.op} ({s.category})",
                lambda key, o: (op_type_of(origins[o]),),
            ),
            ("kernel", lambda s: s.kernel, lambda key, o: (owners[key].kernel,)),
        )
    }
    return Roofline(
        peaks,
        sites,
        rolled["layer"],
        rolled["op"],
        rolled["kernel"],
        sum(r.flops is not None for r in sites.values()),
        tuple(over),
        policy,
    )


@define
class _Sum:
    """One name's running sums in ``_roll_up``: a figure is None once unknown at one of
    its sites; ``by_bound``, the bound time set by compute and by memory."""

    us: float = 0.0
    flops: float | None = 0.0
    trans: float | None = 0.0
    useful: float | None = 0.0
    bytes: float | None = 0.0
    bound: float | None = 0.0
    timed: bool = False
    by_bound: dict = field(factory=lambda: dict.fromkeys((COMPUTE_BOUND, MEMORY_BOUND), 0.0))
    notes: dict = field(factory=dict)
    dtypes: dict = field(factory=lambda: defaultdict(float))
    excess: dict = field(factory=dict)

    def _add(self, name: str, value: float | None, share: float) -> None:
        now = getattr(self, name)
        setattr(self, name, None if value is None or now is None else now + share * value)

    def bill(self, us: float, roof: Roof, part: float) -> None:
        """A share of ``us`` of a site whose figures are ``roof``: ``part`` of its bytes and bound."""
        self.us += us
        self.timed = True
        self._add("bytes", roof.bytes, part)
        self._add("bound", roof.bound_us, part)
        if roof.bound_by is not None:
            self.by_bound[roof.bound_by] += part * (roof.bound_us or 0.0)
        self.notes.update(dict.fromkeys(roof.notes))
        self.dtypes[roof.dtype] += part * (roof.bound_us or roof.us)

    def add_work(self, flops: float | None, trans: float | None, useful: float | None, share: float) -> None:
        """``share`` of a piece of work's FLOPs, transcendental calls and useful FLOPs."""
        self._add("flops", flops, share)
        self._add("trans", trans, share)
        self._add("useful", useful, share)

    def add_op(self, op: OpWork, roof: Roof, share: float) -> None:
        """``share`` of an op's own work at a site whose figures are ``roof``."""
        self.add_work(op.flops, op.transcendentals, op.useful, share)
        if op.excess:
            self.excess[op.excess] = None
        if op.flops is None:
            self.notes.update(dict.fromkeys(roof.notes))

    def roof(self, name: str) -> Roof:
        """The sums as the ``Roof`` of ``name``."""
        notes = {**self.notes, **({} if self.timed else {UNTIMED: None})}
        compute, memory = self.by_bound[COMPUTE_BOUND], self.by_bound[MEMORY_BOUND]
        by = None if self.bound is None or not self.timed else COMPUTE_BOUND if compute >= memory else MEMORY_BOUND
        return Roof(
            name,
            self.us,
            self.flops,
            self.trans,
            self.bytes,
            self.bound,
            by,
            tuple(notes),
            max(self.dtypes, key=self.dtypes.__getitem__, default="float32"),
            self.useful,
            _excess(self.flops, self.useful, self.excess),
        )


def _roll_up(
    parts: tuple[Share, ...],
    work: dict[SiteKey, tuple[Roof, tuple[OpWork, ...]]],
    key: Callable[[Share], str],
    owners: Callable[[SiteKey, str], tuple[str, ...]],
) -> tuple[Roof, ...]:
    """Sites' figures summed by name: the time, bytes and bound by ``key`` of the shares
    billing them, each share taking the part of its site's figures its time is of the
    site's (an equal part of a site that took no time); the FLOPs, transcendental calls
    and useful FLOPs by the names ``owners`` gives each op of a site (split evenly over
    several), each op's own (``OpWork``). A figure unknown at one site is unknown for the
    sum; a name billed no time has no bytes, a bound of 0 and nothing that sets it."""
    billing: dict[SiteKey, list[Share]] = defaultdict(list)
    for s in parts:
        billing[s.key].append(s)
    sums: dict[str, _Sum] = defaultdict(_Sum)
    for s in parts:
        roof = work[s.key][0]
        sums[key(s)].bill(s.us, roof, s.us / roof.us if roof.us > 0 else 1.0 / len(billing[s.key]))
    for site_key, (roof, ops) in work.items():
        if not ops:  # a KV-cache kernel call: its work goes where its time went
            for s in billing[site_key]:
                sums[key(s)].add_work(roof.flops, roof.transcendentals, roof.useful, 1.0 / len(billing[site_key]))
            continue
        for op in ops:
            names = owners(site_key, op.origin)
            for name in names:
                sums[name].add_op(op, roof, 1.0 / len(names))
    rows = [a.roof(name) for name, a in sums.items()]
    return tuple(sorted(rows, key=lambda r: (-(r.wasted_us or 0.0), -r.us, r.name)))
