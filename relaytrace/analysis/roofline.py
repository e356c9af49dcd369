"""Why a layer is slow: its work, the rates it achieved, and how far it is from the roofline.

Pure functions over a lineage (each kernel's ``KernelWork``), a profile (each site's
median time and argument shapes) and peaks (``model.peaks``). Per call site: FLOPs
and bytes at the shapes it ran with (``model.work.work_at``), achieved GFLOP/s and
GB/s, the roofline's lower bound ``max(FLOPs / peak, bytes / bandwidth)``, what bounds
it (compute or memory), efficiency (bound / measured) and the time above the bound
("wasted"). A layer, an op type, a kernel get the same figures summed over the shares
that bill them (``attribution.Share``): a site's work is cut in the proportions its
time is, so the roll-ups add up to the sites' as the times do.

Bytes are each tensor argument's size, read or written once: a kernel that re-reads
its data from cache moves more, one whose data stay in cache may beat the memory
ceiling (``over_ceiling`` says which sites did, and why that is no measurement error).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from attrs import define

from ..model.lineage import Lineage
from ..model.peaks import COMPUTE_BOUND, MEMORY_BOUND, Peaks
from ..model.profile import CACHE, KERNEL, Profile
from ..model.sitekey import SiteKey
from ..model.work import Work, cache_work, work_at
from .attribution import COMPUTE, Share

COMPUTE_OVER = "above the compute ceiling: the count or the timer is wrong for this site"
MEMORY_OVER = "above the memory ceiling: its data stayed in cache (the ceiling is DRAM's)"


@define(frozen=True)
class Roof:
    """The roofline figures of a call site or of a roll-up (a layer, an op type, a
    kernel): ``us`` measured (median per run), ``flops``, ``transcendentals``, ``bytes``
    (None when not counted), the lower bound ``bound_us`` and what sets it (``bound_by``
    compute or memory; None without peaks or work), ``notes`` (why a figure is missing),
    ``dtype`` (a roll-up's: that of most of its bound)."""

    name: str
    us: float
    flops: float | None
    transcendentals: float | None
    bytes: float | None
    bound_us: float | None
    bound_by: str | None
    notes: tuple[str, ...] = ()
    dtype: str = "float32"  # what most of its arithmetic is done in (the ceiling it is held to)

    @property
    def gflops_s(self) -> float | None:
        """Achieved GFLOP/s (FLOPs over the measured time)."""
        return self.flops / self.us / 1e3 if self.flops is not None and self.us > 0 else None

    @property
    def gbytes_s(self) -> float | None:
        """Achieved GB/s (bytes over the measured time)."""
        return self.bytes / self.us / 1e3 if self.bytes is not None and self.us > 0 else None

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


@define(frozen=True)
class Roofline:
    """Every site's ``Roof`` and their roll-ups by layer, op type and kernel (each
    sorted by time above the bound, most first; without peaks by time), the ``peaks``
    used (None: rates only), and how many sites' work is known."""

    peaks: Peaks | None
    sites: dict[SiteKey, Roof]
    layers: tuple[Roof, ...]
    op_types: tuple[Roof, ...]
    kernels: tuple[Roof, ...]
    counted: int  # sites whose FLOPs are known
    over_ceiling: tuple[tuple[str, str], ...]  # (site label, which ceiling and why) of sites above one

    def layer(self, name: str) -> Roof | None:
        """The roll-up of one layer, None if no time was billed to it."""
        return next((r for r in self.layers if r.name == name), None)


def site_roofs(lineage: Lineage, profile: Profile, peaks: Peaks | None) -> dict[SiteKey, Roof]:
    """Each kernel call site's ``Roof`` at the shapes it ran with (a site without
    recorded argument shapes has no bytes, and no bound)."""
    times = profile.by_site(KERNEL)
    out = {}
    for site in lineage.call_sites:
        arg = profile.arg(site.key)
        kernel_work = lineage.build.work.get(site.kernel)
        work = work_at(kernel_work, arg.shapes if arg else (), arg.dtypes if arg else ())
        dtype = kernel_work.dtype if kernel_work else "float32"
        bound, by = lower_bound(work.flops, work.bytes, peaks, dtype)
        notes = (work.why,) if work.why else ()
        out[site.key] = Roof(site.label, times.get(site.key, 0.0), work.flops, work.transcendentals, work.bytes,
                             bound, by, notes, dtype)
    cache = lineage.build.kv_cache
    for key, us in profile.by_site(CACHE).items():
        work = cache_work(cache, key.kernel, *profile.step) if cache and len(profile.step) == 2 else \
            Work(None, None, None, "the profile does not say the step's tokens and context")
        bound, by = lower_bound(work.flops, work.bytes, peaks, "float32")
        out[key] = Roof(key.label, us, work.flops, work.transcendentals, work.bytes, bound, by,
                        (work.why,) if work.why else (), "float32")
    return out


def lower_bound(flops: float | None, moved: float | None, peaks: Peaks | None,
                dtype: str) -> tuple[float | None, str | None]:
    """``peaks.bound`` of a site's figures, (None, None) when one is unknown."""
    if peaks is None or flops is None or moved is None:
        return None, None
    return peaks.bound(flops, moved, dtype)


def roofline(lineage: Lineage, profile: Profile, parts: tuple[Share, ...]) -> Roofline:
    """The ``Roofline`` of a profile of ``lineage``'s build (``lineage`` as the profiled
    entry sees it) against the profile's peaks, its roll-ups made of the same ``parts``
    as the time tables."""
    peaks = profile.peaks
    sites = site_roofs(lineage, profile, peaks)
    over = []
    for roof in sites.values():
        if peaks is None or not roof.us:
            continue
        if roof.gflops_s is not None and roof.gflops_s > peaks.for_dtype(roof.dtype) * 1.05:
            over.append((roof.name, COMPUTE_OVER))
        elif roof.gbytes_s is not None and roof.gbytes_s > peaks.gbps * 1.05:
            over.append((roof.name, MEMORY_OVER))
    rolled = {name: _roll_up(parts, sites, key) for name, key in (
        ("layer", lambda s: s.layer),
        ("op", lambda s: s.op if s.category == COMPUTE else f"{s.op} ({s.category})"),
        ("kernel", lambda s: s.kernel))}
    return Roofline(peaks, sites, rolled["layer"], rolled["op"], rolled["kernel"],
                    sum(r.flops is not None for r in sites.values()), tuple(over))


def _roll_up(parts: tuple[Share, ...], sites: dict[SiteKey, Roof], key: Callable[[Share], str]) -> tuple[Roof, ...]:
    """Sites' figures summed by ``key`` of the shares billing them, each share taking
    the part of its site's work its time is of the site's (an equal part of a site
    that took no time); a figure unknown at one site is unknown for the sum."""
    count: dict[SiteKey, int] = defaultdict(int)
    for s in parts:
        count[s.key] += 1
    sums: dict[str, dict] = {}
    for s in parts:
        roof = sites[s.key]
        part = s.us / roof.us if roof.us > 0 else 1.0 / count[s.key]
        acc = sums.setdefault(key(s), {"us": 0.0, "flops": 0.0, "trans": 0.0, "bytes": 0.0, "bound": 0.0,
                                       "compute": 0.0, "memory": 0.0, "notes": {}, "dtypes": defaultdict(float)})
        acc["us"] += s.us
        for field, value in (("flops", roof.flops), ("trans", roof.transcendentals), ("bytes", roof.bytes),
                             ("bound", roof.bound_us)):
            acc[field] = None if value is None or acc[field] is None else acc[field] + part * value
        if roof.bound_by is not None:
            acc[roof.bound_by] += part * (roof.bound_us or 0.0)
        acc["notes"].update(dict.fromkeys(roof.notes))
        acc["dtypes"][roof.dtype] += part * (roof.bound_us or roof.us)
    rows = [Roof(name, a["us"], a["flops"], a["trans"], a["bytes"], a["bound"],
                 None if a["bound"] is None else COMPUTE_BOUND if a["compute"] >= a["memory"] else MEMORY_BOUND,
                 tuple(a["notes"]), max(a["dtypes"], key=a["dtypes"].__getitem__))
            for name, a in sums.items()]
    return tuple(sorted(rows, key=lambda r: (-(r.wasted_us or 0.0), -r.us, r.name)))
