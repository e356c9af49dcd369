"""Verification: does each call site's lineage account for what its kernel is made of?

Coverage says every site has *an* origin; this says whether they are the *right*
ones, against ground truth read from the recorded IR, not from the tracker:

- **Members.** A fused kernel is the Relax function FuseOps made (FuseTIR keeps its
  name); its body lists the PrimFuncs it is made of, one call each. An unfused
  kernel is one PrimFunc.
- **What a PrimFunc computes.** A pass that lowers an op to a PrimFunc (LegalizeOps)
  or swaps one PrimFunc for another (AlterOpImpl) keeps the binding's Var: the same
  Var bound to ``relax.nn.conv2d`` before and to ``call_tir(conv2d4, ...)`` after says
  that ``conv2d4`` computes a ``relax.nn.conv2d``.

``truth.kernel_members`` reads that truth once per build (it needs TVM); ``verify``
here is pure: each site's origins must match its members one to one,
op for op, and the lineage must keep its invariants (a fusion pass eliminates no
compute op; an origin runs at one site per run of its function, and only in a run of
its own function; the model's data flow runs forwards through the sites; an inserted
op sits next to the layer it serves). A site that fails is **suspect**, with the
reasons; one whose truth is not known is **unverified**, with why. Nothing is waived.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import define

from .frontend import check_program, missing_reason
from .names import Name
from .ops import is_data_movement, is_shape_computation
from .origin import INSERTED, OP, UNRESOLVED


class Status(Name):
    """A verdict on a call site or a layer: its origins agree with the evidence
    (``verified``), contradict it (``suspect``), or the evidence says nothing
    (``unverified``)."""

    VERIFIED = "verified"
    SUSPECT = "suspect"
    UNVERIFIED = "unverified"


VERIFIED, SUSPECT, UNVERIFIED = Status.VERIFIED, Status.SUSPECT, Status.UNVERIFIED
# passes that group ops into kernels or hand groups to an external codegen: none removes a compute op
FUSION_PASSES = frozenset({"FuseOps", "FuseTIR", "FuseOpsByPattern", "MergeCompositeFunctions", "RunCodegen"})
# LiftTransformParams moves the bindings of function X computed from weights alone into a
# new function X + TRANSFORM_SUFFIX (``tracking.params`` follows them there); a verdict
# that accepts an op of X there names the fact TRANSFORM_PARAMS in ``SiteCheck.shared``
TRANSFORM_SUFFIX, TRANSFORM_PARAMS = "_transform_params", "transform-params"


@define(frozen=True)
class Member:
    """One PrimFunc a kernel is made of, and the ops it is known to compute (empty:
    no pass showed which op it came from)."""

    prim_func: str
    ops: tuple[str, ...]
    part: bool = False  # computes a part of its op; another member (or kernel) finishes it
    # the facts about TVM's passes its ops rest on that the tracker relies on too
    # (``tracking.facts``: "lowered-part", "layout-reuse"): evidence that is not independent
    shared: tuple[str, ...] = ()


@define(frozen=True)
class SiteCheck:
    """The verdict on one kernel call site (``position`` as in ``CallSite``)."""

    position: int
    status: Status
    reasons: tuple[str, ...] = ()
    # the facts shared with the tracker the verdict rests on (its members' ``shared``,
    # ``TRANSFORM_PARAMS`` for ops moved into a transform function)
    shared: tuple[str, ...] = ()


@define(frozen=True)
class LayerCheck:
    """The verdict on one layer: the worst of its ops' sites and of its ops held
    against the frontend's program (``model.frontend``), with the reasons."""

    layer: str
    status: Status
    reasons: tuple[str, ...] = ()


@define(frozen=True)
class Verification:
    """Every kernel site's and every layer's verdict, and what is wrong beyond single
    sites."""

    sites: tuple[SiteCheck, ...] = ()
    problems: tuple[str, ...] = ()  # broken invariants not tied to one site
    layers: tuple[LayerCheck, ...] = ()

    def by_layer(self) -> dict[str, LayerCheck]:
        """Layer -> its verdict."""
        return {c.layer: c for c in self.layers}

    def by_position(self) -> dict[int, SiteCheck]:
        """Call-site position -> its verdict."""
        return {s.position: s for s in self.sites}

    def count(self, status: str) -> int:
        """How many call sites have the verdict ``status``."""
        return sum(1 for s in self.sites if s.status == status)

    @property
    def ok(self) -> bool:
        """True when every site and layer is verified and no invariant is broken."""
        return (
            not self.problems
            and all(s.status == VERIFIED for s in self.sites)
            and all(c.status == VERIFIED for c in self.layers)
        )

    def summary(self) -> str:
        """One line: the counts of each verdict, sites and layers."""
        layers = sum(1 for c in self.layers if c.status == VERIFIED)
        return (
            f"{self.count(VERIFIED)} verified, {self.count(SUSPECT)} suspect, "
            f"{self.count(UNVERIFIED)} unverified call sites; {layers} of {len(self.layers)} layers verified; "
            f"{len(self.problems)} other problems"
        )


# -- the check (pure) -----------------------------------------------------------


def _added_by_pipeline(site, origins) -> str:
    """Why a site of a function no op of the model is in belongs to no layer of it: a
    pass added the function (MLC-LLM's sampling and speculative-decoding helpers)."""
    passes = sorted({origins[oid].pass_name for oid in site.origin_ids if origins[oid].pass_name})
    by = f" (first seen after {', '.join(passes)})" if passes else ""
    return f"{site.function} holds no op of the model: the pipeline added it{by}, so no layer of the model runs here"


def verify(lineage, members: Mapping[str, tuple[Member, ...]] | None = None) -> Verification:
    """Check every kernel call site of ``lineage`` against ``members`` (kernel ->
    its PrimFuncs; default: the lineage's own ``kernel_members``)."""
    members = lineage.build.kernel_members if members is None else members
    origins = lineage.origins
    sites = lineage.call_sites
    # (op origin, frame) -> the sites that run it (not only a part of it); a frame is one
    # run of a function body (``_frame``): each call of a subfunction runs its ops again
    where: dict[tuple[str, tuple], list] = {}
    for site in sites:
        whole = {op for m in members.get(site.kernel, ()) if not m.part for op in m.ops}
        partial = {op for m in members.get(site.kernel, ()) if m.part for op in m.ops}
        for oid in site.origin_ids:
            op = origins[oid].op
            if origins[oid].kind == OP and (op in whole or op not in partial):
                where.setdefault((oid, _frame(site)), []).append(site)
    running: dict[str, list] = {}  # op origin -> every site that runs it, in any frame
    for (oid, _), found in where.items():
        running.setdefault(oid, []).extend(found)
    neighbours = _neighbours(lineage)
    out_of_order = _out_of_order(lineage, where)
    program = check_program(origins, lineage.program)
    checks = []
    model_functions = {origin.function for origin in origins.values() if origin.kind == OP}
    for site in sites:
        if site.function not in model_functions and not any(origins[oid].kind == OP for oid in site.origin_ids):
            checks.append(SiteCheck(site.position, VERIFIED, (_added_by_pipeline(site, origins),)))
            continue
        if site.kernel not in members:
            checks.append(
                SiteCheck(
                    site.position, UNVERIFIED, (f"kernel {site.kernel} was not seen being made by any recorded pass",)
                )
            )
            continue
        reasons, unknown = _account(site, members[site.kernel], origins)
        for oid in site.origin_ids:
            if len(where.get((oid, _frame(site)), ())) > 1:
                others = [s.label for s in where[(oid, _frame(site))] if s is not site]
                reasons.append(f"{oid} is also attributed to {', '.join(others)}")
        reasons += _misplaced_inserted(site, lineage, where, neighbours)
        foreign, moved = _foreign_ops(site, origins)
        reasons += foreign
        wrong, untold = _shape_claims(site, lineage, where)
        reasons += wrong
        unknown += untold
        reasons += out_of_order.get(site.position, [])
        reasons += [program.wrong[oid] for oid in site.origin_ids if oid in program.wrong]
        unknown += [program.unknown[oid] for oid in site.origin_ids if oid in program.unknown]
        shared = tuple(sorted({fact for m in members[site.kernel] for fact in m.shared}.union(moved)))
        if reasons:
            checks.append(SiteCheck(site.position, SUSPECT, tuple(reasons + unknown), shared))
        elif unknown:
            checks.append(SiteCheck(site.position, UNVERIFIED, tuple(unknown), shared))
        else:
            checks.append(SiteCheck(site.position, VERIFIED, (), shared))
    problems = [
        f"{oid} ({origins[oid].short_op}) is reported eliminated by {pass_name}, a fusion pass, "
        f"which eliminates no compute op"
        for oid, pass_name in lineage.journal.eliminated_by.items()
        if pass_name in FUSION_PASSES and origins[oid].kind == OP and not is_data_movement(origins[oid].op)
    ]
    eliminated = lineage.journal.eliminated_by
    problems += [
        f"{oid} is reported eliminated by {eliminated[oid]} but runs at {', '.join(s.label for s in running[oid])}"
        for oid in eliminated
        if oid in running
    ]
    at_sites = {oid for site in sites for oid in site.origin_ids}
    problems += [why for oid, why in program.wrong.items() if oid not in at_sites]
    problems += [missing_reason(node) for node in program.missing]
    return Verification(tuple(checks), tuple(problems), _layer_checks(lineage, checks, program))


def _layer_checks(lineage, checks: list[SiteCheck], program) -> tuple[LayerCheck, ...]:
    """Each layer of op origins: suspect when one of its ops is wrong for its node, a
    node of it has no op or a site running its ops is suspect; unverified when the
    frontend's table cannot tell one of its ops, a site running them is unverified, or
    a pass eliminated one of them without the IR bearing it out (``Journal.explained``:
    folded to a constant or dead; an op that runs at a site is not eliminated). A layer
    is verified only if each of its ops is."""
    status = {c.position: c for c in checks}
    wrong: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for site in lineage.call_sites:
        check = status[site.position]
        if check.status == VERIFIED:
            continue
        for layer in dict.fromkeys(lineage.origins[o].layer for o in site.origin_ids if lineage.origins[o].kind == OP):
            (wrong if check.status == SUSPECT else unknown).setdefault(layer, []).append(
                f"its ops run at {site.label}, which is {check.status}"
            )
    for oid, why in program.wrong.items():
        wrong.setdefault(lineage.origins[oid].layer, []).append(why)
    for oid, why in program.unknown.items():
        unknown.setdefault(lineage.origins[oid].layer, []).append(why)
    for node in program.missing:
        wrong.setdefault(node.layer, []).append(missing_reason(node))
    journal = lineage.journal
    for oid, pass_name in journal.eliminated_by.items():
        origin = lineage.origins[oid]
        if origin.kind == OP and oid not in journal.explained:
            unknown.setdefault(origin.layer, []).append(
                f"its op {oid} was eliminated by {pass_name}, which neither folded it (its value was made of more "
                "than constants) nor dropped it as dead code (its value was used), and it runs at no site"
            )
    layers = dict.fromkeys(o.layer for o in lineage.origins.values() if o.kind == OP)
    layers.update(dict.fromkeys(node.layer for node in program.missing))
    out = []
    for layer in layers:
        if layer in wrong:
            out.append(LayerCheck(layer, SUSPECT, tuple(wrong[layer] + unknown.get(layer, []))))
        elif layer in unknown:
            out.append(LayerCheck(layer, UNVERIFIED, tuple(unknown[layer])))
        else:
            out.append(LayerCheck(layer, VERIFIED))
    return tuple(out)


def _account(site, kernel_members: tuple[Member, ...], origins) -> tuple[list[str], list[str]]:
    """Match the site's origins to the kernel's members one to one by op; return
    (reasons it is wrong, reasons it cannot be told)."""
    reasons: list[str] = []
    unknown: list[str] = []
    claimants = []
    for oid in site.origin_ids:
        origin = origins[oid]
        if origin.kind == UNRESOLVED:
            unknown.append(f"{oid}: an op no tracking rule explains (made by {origin.pass_name})")
        claimants.append(origin)
    known = [m for m in kernel_members if m.ops and not m.part]
    for m in kernel_members:
        if not m.ops:
            unknown.append(f"member {m.prim_func}: no recorded pass shows which op it computes")
        elif m.part and not any(origin.op in m.ops for origin in claimants):
            reasons.append(
                f"member {m.prim_func} (a part of {'/'.join(_short(o) for o in m.ops)}) is not "
                f"explained by any origin at this site"
            )
    match = matching(known, claimants)
    for i, m in enumerate(known):
        if i not in match:
            reasons.append(
                f"member {m.prim_func} ({'/'.join(_short(o) for o in m.ops)}) is not explained "
                f"by any origin at this site"
            )
    matched = set(match.values())
    for j, origin in enumerate(claimants):
        if (
            j not in matched
            and origin.kind != UNRESOLVED
            and all(m.ops for m in kernel_members)
            and not any(m.part and origin.op in m.ops for m in kernel_members)
        ):
            reasons.append(
                f"{origin.id} ({origin.short_op}) is attributed here, but the kernel computes "
                f"no {origin.short_op} for it"
            )
    return reasons, unknown


def matching(members: list[Member], origins: list) -> dict[int, int]:
    """member index -> origin index: a maximum one-to-one matching of members to
    origins of one of their ops (augmenting paths: kernels have a few dozen members at
    most). Verification holds a site to it; a fused kernel's time is split by it
    (``analysis.work_split``)."""
    owner: dict[int, int] = {}  # origin index -> member index
    for i in range(len(members)):
        _place(i, set(), members, origins, owner)
    return {i: j for j, i in owner.items()}


def _place(i: int, seen: set[int], members: list[Member], origins: list, owner: dict[int, int]) -> bool:
    """``matching``'s augmenting path from member ``i``: True when ``i`` was given an
    origin (``owner``, origin index -> member index, updated along the path; ``seen``,
    the origins tried, grows). A function of the module, not a closure that calls
    itself (a reference cycle for the collector, one per site)."""
    for j, origin in enumerate(origins):
        if j in seen or origin.op not in members[i].ops:
            continue
        seen.add(j)
        if j not in owner or _place(owner[j], seen, members, origins, owner):
            owner[j] = i
            return True
    return False


def _out_of_order(lineage, where) -> dict[int, list[str]]:
    """Reasons per site position where the model's data flow runs backwards: an op
    whose result another op reads must run at the same site or an earlier one. Two
    ops of one kind swapped between sites pass the op-for-op match; not this."""
    out: dict[int, list[str]] = {}
    frames = {frame for _, frame in where}
    for producer, consumer in lineage.edges:
        for frame in frames:
            for a in where.get((producer, frame), ()):
                for b in where.get((consumer, frame), ()):
                    if a.position > b.position:
                        why = f"{producer} runs at {a.label}, after {b.label}, where {consumer} reads its result"
                        out.setdefault(a.position, []).append(why)
                        out.setdefault(b.position, []).append(why)
    return out


def _neighbours(lineage) -> dict[int, set[int]]:
    """Positions of sites next to each site in the final program's data flow, builtins
    passed through (a reshape served by the VM sits between two kernels)."""
    out: dict[int, set[int]] = {}
    for a, b in lineage.site_edges:
        out.setdefault(a, set()).add(b)
        out.setdefault(b, set()).add(a)
    return out


def _misplaced_inserted(site, lineage, where, neighbours) -> list[str]:
    """An inserted op must sit at, or next to, a site of a layer it serves."""
    reasons = []
    for oid in site.origin_ids:
        origin = lineage.origins[oid]
        if origin.kind != INSERTED or not origin.serves:
            continue
        served = [s.position for o in origin.serves for s in where.get((o, _frame(site)), ())]
        if not served:
            continue  # served ops folded away or run as builtins: nothing to compare with
        if is_shape_computation(origin.op):
            continue  # shapes reach their ops through the VM's shape heap, not the data flow: ``_shape_claims``
        near = {site.position} | neighbours.get(site.position, set())
        if not near.intersection(served):
            reasons.append(f"{oid} serves {', '.join(origin.serves)}, which run at no neighbouring site")
    return reasons


def _shape_claims(site, lineage, where) -> tuple[list[str], list[str]]:
    """A shape function serves the ops whose kernels' allocations it sizes: each op it
    is said to serve must run (in this run of the function) at a kernel the IR shows
    reading the heap slots it writes (``BuildFacts.shape_consumers``)."""
    reasons, unknown = [], []
    for oid in site.origin_ids:
        origin = lineage.origins[oid]
        if origin.kind != INSERTED or not is_shape_computation(origin.op):
            continue
        consumers = lineage.build.shape_consumers.get(site.kernel)
        if consumers is None:
            unknown.append(f"{oid}: which kernels {site.kernel} sizes was not read from the IR")
            continue
        if not origin.serves:
            unknown.append(f"{oid}: serves no op the tracker could name")
        for served in origin.serves:
            for other in where.get((served, _frame(site)), ()):
                if other.kernel not in consumers:
                    reasons.append(
                        f"{oid} is said to size {served}, which runs at {other.label}; {site.kernel} "
                        f"sizes only {', '.join(consumers) or 'nothing'}"
                    )
    return reasons, unknown


def _foreign_ops(site, origins) -> tuple[list[str], tuple[str, ...]]:
    """A site runs the ops of the function whose body it is in: an entry's own, or the
    subfunction its scope names (``block#1`` -> ``block``); and so the ops a pass
    inserted there: one made in another function (a PrimFunc that two entries share,
    ComputePrimValue's ``compute_symbolic_expr``) is that function's, not this site's;
    or, in ``X_transform_params``, ops of ``X`` computed from weights alone, which
    ``LiftTransformParams`` moves there (a fact the tracker relies on too: the verdict
    names it, ``TRANSFORM_PARAMS``). The reasons, and the facts relied on."""
    running = site.scope[-1].function if site.scope else site.function
    lifted_from = running[: -len(TRANSFORM_SUFFIX)] if running.endswith(TRANSFORM_SUFFIX) else None
    others = [origins[oid] for oid in site.origin_ids if origins[oid].function != running]
    lifted = [o for o in others if o.kind == OP and o.function == lifted_from]
    return (
        [
            f"{o.id} is an {'' if o.kind == OP else o.kind + ' '}op of {o.function}, but this site runs in {running}"
            for o in others
            if not (o.kind == OP and o.function == lifted_from)
        ],
        (TRANSFORM_PARAMS,) if lifted else (),
    )


def _frame(site) -> tuple[str, str]:
    """One run of a function body: the entry a site runs in and the subfunction call."""
    return (site.function, site.scope)


def _short(op: str) -> str:
    return op.rsplit(".", 1)[-1]
