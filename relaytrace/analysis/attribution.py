"""Kernel time -> layers, op types and categories: pure functions over Lineage + Profile.

Every kernel call site's mean time per run is cut into *shares*, one per
(origin, category). All roll-ups sum shares, so per-layer times always add up to the
total kernel time.

Policies for a kernel that runs several model ops:
- ``anchor`` (default): all its time goes to its heaviest op (conv, matmul, pool;
  ties by order); the others are listed as fused into it.
- ``split``: time is divided among its ops by the roofline bound of the member
  PrimFunc each was lowered to, at the shapes the call ran with (``work_split``);
  by each op's estimated FLOPs where the build's work is not known.
Inserted ops (layout transforms, casts) are their own category, billed to the layers
they serve: under ``anchor`` a kernel holding only inserted ops is all "inserted";
under ``split`` inserted ops also take their FLOP share of mixed kernels. Ops no rule
explains are "unresolved", never counted as inserted. Every share carries the
verification verdict of its call site, and every roll-up the worst of its sites'.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs
from attrs import define

from ..errors import RelaytraceError
from ..model.layer_name import module_path
from ..model.lineage import ANCHOR, Lineage
from ..model.lineage_index import billed_layers
from ..model.names import Name
from ..model.ops import estimated_flops
from ..model.origin import OP, UNRESOLVED
from ..model.profile import BUILTIN, CACHE, KERNEL, Profile
from ..model.run_spec import PolicyName
from ..model.sense import profile_mismatches
from ..model.sitekey import SiteKey
from ..model.verification import SUSPECT, UNVERIFIED, VERIFIED
from .work_split import call_dims, work_weights


class Category(Name):
    """What a share of a call site's time was spent on: a model op's ``compute``, an op a
    pass ``inserted`` (billed to the layers it serves), or an ``unresolved`` op."""

    COMPUTE = "compute"
    INSERTED = "inserted"
    UNRESOLVED = "unresolved"


_WORST = {VERIFIED: 0, UNVERIFIED: 1, SUSPECT: 2}


def worst(statuses) -> str:
    """The worst of some verification verdicts (suspect > unverified > verified)."""
    return max(statuses, key=_WORST.__getitem__, default=VERIFIED)


@define(frozen=True)
class Share:
    """Part of one call site's time, billed to one layer."""

    key: SiteKey  # the call site
    layer: str
    origin: str
    op: str
    category: Category
    us: float
    status: str = VERIFIED  # the worst of the site's and the layer's verification verdicts

    @property
    def site(self) -> str:
        """The call site's label (``SiteKey.label``)."""
        return self.key.label

    @property
    def kernel(self) -> str:
        """The kernel the call site calls."""
        return self.key.kernel


@define(frozen=True)
class LayerRow:
    """One layer's time: its shares summed (``us`` = ``compute_us`` + ``inserted_us`` +
    unresolved), its percent of kernel time, the ops and call sites billed to it."""

    layer: str
    us: float
    percent: float
    compute_us: float
    inserted_us: float
    ops: tuple[str, ...]
    kernels: tuple[str, ...]
    status: str = VERIFIED  # the worst verdict of the sites that bill this layer and of the layer itself


@define(frozen=True)
class OpTypeRow:
    """One op type's time over the model (conv2d, matmul, ...), its share, how often
    it ran and in how many layers."""

    op: str
    us: float
    percent: float
    count: int  # ops of this type that ran (each layer's occurrence counts)
    layers: int


@define(frozen=True)
class KernelRow:
    """One kernel's time over its call sites (medians added), how often it ran, where,
    its argument shapes, the layers it runs and its worst verdict."""

    name: str
    us: float
    percent: float
    count: int
    device: str
    shapes: str
    layers: tuple[str, ...]
    status: str = VERIFIED  # the worst verdict of this kernel's call sites
    tuned: bool = False  # its schedule came from a MetaSchedule database
    min_us: float = 0.0  # its sites' fastest runs, added up (``us`` adds their medians)
    max_us: float = 0.0  # its sites' slowest runs, added up
    library: str = ""  # what runs it when it is a library call, not a kernel TVM compiled (``CallSite.library``)


@define(frozen=True)
class Categories:
    """Where the end-to-end time went: model compute, ops passes inserted, unresolved
    ops, VM builtins and the gap no recorded call explains; they add up to ``e2e_us``."""

    compute_us: float
    inserted_us: float
    builtin_us: float
    gap_us: float
    e2e_us: float
    inserted_by_layer: tuple[tuple[str, float], ...]
    unresolved_us: float = 0.0  # ops no rule explains: neither compute nor inserted
    suspect_us: float = 0.0  # kernel time at call sites whose attribution the IR contradicts
    unverified_us: float = 0.0  # kernel time at call sites the IR could not confirm
    library_us: float = 0.0  # of the kernel time, what ran in library calls (``CallSite.library``)

    def rows(self):
        """(category, us, percent of end-to-end) for each category, in table order."""
        total = self.e2e_us or 1.0
        return [
            (name, us, 100.0 * us / total)
            for name, us in (
                ("compute", self.compute_us),
                ("inserted layout/casts/shapes", self.inserted_us),
                ("unresolved ops", self.unresolved_us),
                ("VM builtins", self.builtin_us),
                ("unexplained gap", self.gap_us),
            )
        ]


def check_match(lineage: Lineage, profile: Profile) -> None:
    """A profile must come from an executable of this lineage: same kernels, same calls,
    its inputs and each site's arguments of the shapes compiled (``sense.profile_mismatches``)."""
    ran: dict[str, int] = defaultdict(int)
    for site in profile.by_site(KERNEL):
        ran[site.kernel] = max(ran[site.kernel], site.call + 1)
    problems = lineage.call_count_mismatches(ran) or profile_mismatches(lineage, profile)
    if problems:
        raise RelaytraceError(
            f"profile of {profile.model!r} does not match lineage of {lineage.build.model!r} "
            f"({len(problems)} mismatch(es)): " + "; ".join(problems[:6])
        )


def shares(lineage: Lineage, profile: Profile, policy: PolicyName | str = PolicyName.ANCHOR) -> tuple[Share, ...]:
    """Every call site's median time cut into ``Share``s, one per layer it is billed to:
    under ``anchor`` a kernel with model ops goes to its anchor op's layer, under
    ``split`` over all its ops by their members' work (``work_split``); time of an inserted op (a kernel of
    them only, or its part under ``split``) is split evenly over the layers it serves.
    The shares add up to the profile's kernel time; each carries the worst of its
    site's and its layer's verdicts. A profile of another build is refused."""
    bill = POLICIES[policy_named(policy)].bill
    lineage = lineage.for_entry(profile.entry)
    check_match(lineage, profile)
    times = profile.by_site(KERNEL)
    checks = lineage.site_checks()
    layer_checks = lineage.verification.by_layer() if lineage.verification is not None else {}
    out: list[Share] = []
    for site in lineage.call_sites:
        us = times[site.key]
        for share in bill(lineage, site, us, profile):
            layer = layer_checks.get(share.layer)
            status = worst((checks[site.position].status, layer.status if layer else VERIFIED))
            out.append(attrs.evolve(share, status=status) if status != VERIFIED else share)
    return tuple(out) + cache_shares(lineage, profile)


KV_CACHE = "(KV cache)"  # the layer of a KV-cache kernel call no single op's builtin ran


def cache_shares(lineage: Lineage, profile: Profile) -> tuple[Share, ...]:
    """Each KV-cache kernel call's time (a profile of a served LLM step), billed whole
    to the op of the builtin call it ran inside (``attention_with_fused_qkv`` of
    ``layers.3.self_attn``): the run itself shows which builtin call ran it, and the
    compiled IR which op that call site computes; verified when that op is a call of
    the builtin the run saw, suspect otherwise. A call inside no builtin site with one
    op is billed to ``KV_CACHE``, unverified."""
    parents = profile.within()
    if not parents:
        return ()
    sites: dict[str, list] = defaultdict(list)
    for builtin in sorted((b for b in lineage.builtins if b.function == profile.entry), key=lambda b: b.position):
        sites[builtin.name].append(builtin)
    out = []
    for key, us in profile.by_site(CACHE).items():
        parent = parents.get(key)
        listed = sites.get(parent.kernel, []) if parent else []
        ran_in = listed[parent.call].origins if parent is not None and parent.call < len(listed) else ()
        ops = [lineage.origins[o] for o in ran_in if o in lineage.origins and lineage.origins[o].kind == OP]
        if len(ops) == 1:  # the op must be a call of the very builtin the run saw it inside
            status = VERIFIED if parent is not None and parent.kernel == ops[0].op else SUSPECT
            out.append(Share(key, ops[0].layer, ops[0].id, ops[0].short_op, Category.COMPUTE, us, status))
        else:
            out.append(Share(key, KV_CACHE, key.kernel, key.kernel, Category.UNRESOLVED, us, UNVERIFIED))
    return tuple(out)


def _by_anchor(lineage: Lineage, site, us: float, profile: Profile) -> list[Share]:
    """A kernel with model ops: all its time to its anchor op's layer; one without: as
    ``_by_work``."""
    ops = [lineage.origins[r.origin] for r in site.roles if lineage.origins[r.origin].kind == OP]
    if not ops:
        return _by_work(lineage, site, us, profile)
    anchor = lineage.origins[site.anchor] if site.anchor else ops[0]
    return [Share(site.key, anchor.layer, anchor.id, anchor.short_op, Category.COMPUTE, us)]


def _by_work(lineage: Lineage, site, us: float, profile: Profile) -> list[Share]:
    """The time cut over all the kernel's ops by their members' work at the call's
    shapes (``work_split``), by estimated FLOPs at the call's dims where that cannot be
    weighed; an inserted
    op's part split evenly over the layers it serves."""
    return _weighed(lineage, site, us, work_weights_of(lineage, site, profile))


def work_weights_of(lineage: Lineage, site, profile: Profile) -> list[tuple[Any, float]]:
    """Each of the site's origins with its weight by work, as ``--policy split`` weighs
    them: its member's roofline bound at the call's shapes, else its estimated FLOPs."""
    origins = [lineage.origins[r.origin] for r in site.roles]
    arg = profile.arg(site.key)
    by_work = work_weights(lineage, site, origins, arg, profile.peaks) if len(origins) > 1 else None
    dims = call_dims(lineage, site, arg)
    return list(zip(origins, by_work)) if by_work else [(o, estimated_flops(o, dims)) for o in origins]


def _by_measure(lineage: Lineage, site, us: float, profile: Profile) -> list[Share]:
    """The time cut over the kernel's ops by what an instrumented copy measured inside
    it (``Profile.inside``): each part's measured share to the ops its blocks compute,
    shared by their weights by work where one part runs several; a part of no op's
    blocks is left out of the shares. A site not timed inside: as ``_by_work``."""
    inside = profile.inside_of(site.key)
    work = work_weights_of(lineage, site, profile)
    if inside is None or not any(p.origins for p in inside.parts):
        return _weighed(lineage, site, us, work)
    by_work = {o.id: w for o, w in work}
    measured = dict.fromkeys(by_work, 0.0)
    for op in inside.ops:
        mine = [o for o in op.origins if o in by_work]
        total = sum(by_work[o] for o in mine)
        for o in mine:
            measured[o] += op.median_us * (by_work[o] / total if total else 1 / len(mine))
    return _weighed(lineage, site, us, [(o, measured[o.id]) for o, _ in work])


def _weighed(lineage: Lineage, site, us: float, weights) -> list[Share]:
    """The site's time cut over its origins by ``weights`` (``(origin, weight)``); an
    inserted op's part split evenly over the layers it serves."""
    total = sum(w for _, w in weights) or 1.0
    result = []
    for origin, weight in weights:
        part = us * weight / total
        if origin.kind == OP:
            result.append(Share(site.key, origin.layer, origin.id, origin.short_op, Category.COMPUTE, part))
        elif origin.kind == UNRESOLVED:  # billed to the layers it sits among, but not as inserted
            result.extend(
                attrs.evolve(share, category=Category.UNRESOLVED)
                for share in _inserted_shares(lineage, site, origin, part)
            )
        else:
            result.extend(_inserted_shares(lineage, site, origin, part))
    return result


@define(frozen=True)
class Policy:
    """How a call site's time is billed to layers: ``bill(lineage, site, us, profile)``
    gives its shares; ``about`` says so in the CLI's help."""

    name: PolicyName
    about: str
    bill: Callable[[Lineage, Any, float, Profile], list[Share]]


POLICIES: dict[PolicyName, Policy] = {
    p.name: p
    for p in (
        Policy(PolicyName.ANCHOR, "a fused kernel's time to its anchor op's layer", _by_anchor),
        Policy(PolicyName.SPLIT, "a fused kernel's time over its ops by their members' roofline bounds", _by_work),
        Policy(
            PolicyName.MEASURED,
            "a fused kernel's time over its ops as measured inside it (profile --inside; else as split)",
            _by_measure,
        ),
    )
}


def policy_named(policy: PolicyName | str) -> PolicyName:
    """The policy ``policy`` names, or an error listing those there are."""
    if policy not in POLICIES:
        raise RelaytraceError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
    return PolicyName(policy)


def _inserted_shares(lineage, site, origin, us):
    """An inserted op's time, split evenly over the layers it serves (``billed_layers``:
    a shape function of the whole entry has a row of its own)."""
    served = billed_layers(origin, lineage.origins)
    return [Share(site.key, layer, origin.id, origin.short_op, Category.INSERTED, us / len(served)) for layer in served]


def by_layer(lineage: Lineage, profile: Profile, policy: PolicyName | str = PolicyName.ANCHOR) -> tuple[LayerRow, ...]:
    """``layers_from(shares(...))``: time per layer, slowest first."""
    return layers_from(shares(lineage, profile, policy))


def layers_from(parts: tuple[Share, ...]) -> tuple[LayerRow, ...]:
    """Shares summed by layer, slowest first; they add up to the kernel time."""
    total = sum(s.us for s in parts) or 1.0
    rows: dict[str, dict] = {}
    for s in parts:
        row = rows.setdefault(s.layer, {**dict.fromkeys(Category, 0.0), "ops": {}, "kernels": {}, "status": set()})
        row[s.category] += s.us
        row["ops"][s.op if s.category != Category.UNRESOLVED else "unresolved"] = None  # its op is a kernel's name
        row["kernels"][s.site] = None
        row["status"].add(s.status)
    result = [
        LayerRow(
            layer,
            sum(r[c] for c in Category),
            100.0 * sum(r[c] for c in Category) / total,
            r[Category.COMPUTE],
            r[Category.INSERTED],
            tuple(r["ops"]),
            tuple(r["kernels"]),
            worst(r["status"]),
        )
        for layer, r in rows.items()
    ]
    return tuple(sorted(result, key=lambda r: -r.us))


def by_prefix(rows: tuple[LayerRow, ...], depth: int) -> tuple[tuple[str, float, float], ...]:
    """Layer times summed by module-hierarchy prefix: depth 1 gives ``layer1``, ``fc``..."""
    sums: dict[str, float] = defaultdict(float)
    for r in rows:
        sums[module_prefix(r.layer, depth)] += r.us
    total = sum(sums.values()) or 1.0
    return tuple(sorted(((k, v, 100.0 * v / total) for k, v in sums.items()), key=lambda x: -x[1]))


def edges_between(lineage: Lineage, group_of: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The dataflow edges between groups of origins (``group_of``: origin id -> its
    group, e.g. its layer or module prefix), sorted, each once; an edge inside a group
    and one from or to an origin in no group are left out. The one way the layer
    graphs (graphviz, the HTML report, diff and error graphs) draw layer-to-layer edges."""
    return tuple(
        sorted(
            {
                (group_of[a], group_of[b])
                for a, b in lineage.edges
                if a in group_of and b in group_of and group_of[a] != group_of[b]
            }
        )
    )


def layer_of_ops(lineage: Lineage) -> dict[str, str]:
    """Each model op's origin id -> its layer (inserted and unresolved ops have none)."""
    return {o.id: o.layer for o in lineage.origins.values() if o.kind == OP}


def module_prefix(layer: str, depth: int) -> str:
    """``layer3.1.conv2`` at depth 1 -> ``layer3``; ONNX ``/layer3/...`` alike."""
    sep = "/" if layer.startswith("/") else "."
    parts = [p for p in module_path(layer).split(sep) if p]
    return sep.join(parts[:depth]) if sep == "." else "/" + "/".join(parts[:depth])


def by_op_type(
    lineage: Lineage, profile: Profile, policy: PolicyName | str = PolicyName.ANCHOR
) -> tuple[OpTypeRow, ...]:
    """Time per op type, with how many ops of that type ran (repeats counted): a
    type's total is its ops' calls, each counted as often as it runs."""
    return op_types_from(lineage, shares(lineage, profile, policy))


def op_type_of(origin) -> str:
    """The op type an origin is counted under: its op (``conv2d``), with its kind for an
    inserted or unresolved one (``layout_transform (inserted)``)."""
    return origin.short_op if origin.kind == OP else f"{origin.short_op} ({origin.kind})"


def op_type_layers(lineage: Lineage) -> dict[str, tuple[str, ...]]:
    """Each op type (``op_type_of``) that ran -> the layers of its ops, in run order."""
    out: dict[str, dict[str, None]] = defaultdict(dict)
    for site in lineage.call_sites:
        for o in site.origin_ids:
            origin = lineage.origins[o]
            out[op_type_of(origin)][origin.layer] = None
    return {k: tuple(v) for k, v in out.items()}


def op_types_from(lineage: Lineage, parts: tuple[Share, ...]) -> tuple[OpTypeRow, ...]:
    """Shares summed by op type, slowest first, with each type's count of ops that ran."""
    total = sum(s.us for s in parts) or 1.0
    us: dict[str, float] = defaultdict(float)
    for s in parts:
        us[s.op if s.category == Category.COMPUTE else f"{s.op} ({s.category})"] += s.us
    ran = [lineage.origins[o] for site in lineage.call_sites for o in site.origin_ids]
    counts: dict[str, set] = defaultdict(set)
    layers: dict[str, set] = defaultdict(set)
    for o in ran:
        key = op_type_of(o)
        counts[key].add(o.id)
        layers[key].add(o.layer)
    rows = [
        OpTypeRow(op, us.get(op, 0.0), 100.0 * us.get(op, 0.0) / total, len(counts[op]), len(layers[op]))
        for op in counts
    ]
    return tuple(sorted(rows, key=lambda r: (-r.us, r.op)))


def by_kernel(lineage: Lineage, profile: Profile) -> tuple[KernelRow, ...]:
    """TVM-report-like rows (Name, Duration, Percent, Count, Device, Argument Shapes)
    plus the layers each kernel runs."""
    lineage = lineage.for_entry(profile.entry)
    check_match(lineage, profile)
    spread = profile.site_times(KERNEL)
    total = profile.kernel_us or 1.0  # the KV-cache kernels' too: every row a percent of all kernel time
    checks = lineage.site_checks()
    rows = []
    for name, sites in lineage.kernels.items():
        us = sum(spread[s.key].median_us for s in sites)
        arg = profile.arg(sites[0].key)
        shapes = ", ".join(f"{d}{list(s)}" for s, d in zip(arg.shapes, arg.dtypes)) if arg else ""
        layers = tuple(
            dict.fromkeys(
                lineage.origins[r.origin].layer
                for s in sites
                for r in s.roles
                if r.role == ANCHOR or lineage.origins[r.origin].kind == OP
            )
        )
        rows.append(
            KernelRow(
                name,
                us,
                100.0 * us / total,
                len(sites),
                profile.device,
                shapes,
                layers,
                worst(checks[s.position].status for s in sites),
                name in lineage.build.tuned,
                sum(spread[s.key].min_us for s in sites),
                sum(spread[s.key].max_us for s in sites),
                sites[0].library,
            )
        )
    return tuple(sorted(rows + _cache_rows(lineage, profile, total), key=lambda r: -r.us))


def _cache_rows(lineage: Lineage, profile: Profile, kernel_total: float) -> list[KernelRow]:
    """One row per KV-cache kernel that ran: its calls' medians added, the layers
    ``cache_shares`` billed them to; percents of all kernel time, as the others'."""
    spread = profile.site_times(CACHE)
    by_name: dict[str, list[Share]] = defaultdict(list)
    for share in cache_shares(lineage, profile):
        by_name[share.key.kernel].append(share)
    return [
        KernelRow(
            name,
            sum(s.us for s in parts),
            100.0 * sum(s.us for s in parts) / kernel_total,
            len(parts),
            profile.device,
            "",
            tuple(dict.fromkeys(s.layer for s in parts)),
            worst(s.status for s in parts),
            False,
            sum(spread[s.key].min_us for s in parts),
            sum(spread[s.key].max_us for s in parts),
        )
        for name, parts in by_name.items()
    ]


def by_category(lineage: Lineage, profile: Profile, policy: PolicyName | str = PolicyName.ANCHOR) -> Categories:
    """``categories_from(shares(...), profile, lineage)``."""
    return categories_from(shares(lineage, profile, policy), profile, lineage)


def categories_from(parts: tuple[Share, ...], profile: Profile, lineage: Lineage | None = None) -> Categories:
    """Where end-to-end time went: compute, inserted, unresolved, VM builtins, gap; and
    how much of the kernel time ran in ``lineage``'s library calls."""
    inserted: dict[str, float] = defaultdict(float)
    for s in parts:
        if s.category == Category.INSERTED:
            inserted[s.layer] += s.us
    builtin = sum(profile.by_site(BUILTIN).values())
    compute = sum(s.us for s in parts if s.category == Category.COMPUTE)
    unresolved = sum(s.us for s in parts if s.category == Category.UNRESOLVED)
    ins = sum(inserted.values())
    e2e = profile.e2e_median_us
    library = lineage.library_calls if lineage is not None else {}
    return Categories(
        compute,
        ins,
        builtin,
        e2e - compute - ins - unresolved - builtin,
        e2e,
        tuple(sorted(inserted.items(), key=lambda kv: -kv[1])),
        unresolved,
        sum(s.us for s in parts if s.status == SUSPECT),
        sum(s.us for s in parts if s.status == UNVERIFIED),
        sum(s.us for s in parts if s.kernel in library),
    )
