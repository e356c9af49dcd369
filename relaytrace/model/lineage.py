"""Lineage: which original ops each kernel call site runs, what every pass did, and
whether the compiled IR confirms it. Plain data: queried, drawn, saved and loaded
without TVM."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, NamedTuple

import attrs
from attrs import define, field

from ..errors import LineageFormatError, UnknownNameError, UsageError
from .journal import Change, PassEvent
from .jsonio import check_schema, make_record, read_json, tuples, write_json
from .ops import op_rank
from .origin import INSERTED, OP, UNRESOLVED, Origin
from .verification import SUSPECT, UNVERIFIED, Member, SiteCheck, Verification, verify

SCHEMA = "relaytrace.lineage/1"

ANCHOR, FUSED = "anchor", "fused"


class Role(NamedTuple):
    """An origin's part in a call site. A NamedTuple for the same reason as Change."""

    origin: str
    role: str  # anchor | fused | inserted | unresolved


@define(frozen=True)
class CallSite:
    """The ``call``-th run-time call of ``kernel`` in one run of the entry function
    ``function``; ``position`` orders all sites (an entry's sites in its run order, one
    entry after another). ``scope`` says which call of a Relax subfunction the site runs
    in: ``""`` for the entry's own body, ``"block#1"`` for the second call of ``block``
    (``"block#0/inner#0"`` nested); each call of a subfunction runs its ops again.
    ``arguments``: ``(shape, dtype)`` of each argument (outputs last) as the compiled IR
    types it, a dim it knows only at run time as ``"?"``; a remote profile of a build
    that cannot run here times the site on arguments of these shapes."""

    kernel: str
    call: int
    position: int
    roles: tuple[Role, ...]
    function: str = "main"
    scope: str = ""
    arguments: tuple[tuple[tuple, str], ...] = ()

    @property
    def origin_ids(self) -> tuple[str, ...]:
        return tuple(r.origin for r in self.roles)

    @property
    def anchor(self) -> str | None:
        return next((r.origin for r in self.roles if r.role == ANCHOR), None)

    @property
    def label(self) -> str:
        """``kernel#call``; ``entry:kernel#call`` for a site of an entry other than main,
        so that the sites of several entries never share a label."""
        return f"{self.kernel}#{self.call}" if self.function == "main" else f"{self.function}:{self.kernel}#{self.call}"


@define(frozen=True)
class BuiltinSite:
    """A call site that the VM serves with a builtin (``vm.builtin.reshape``): no kernel."""

    name: str
    position: int
    origins: tuple[str, ...]
    function: str = "main"
    scope: str = ""


@define(frozen=True)
class Coverage:
    call_sites: int
    attributed_sites: int
    origins: int
    in_kernels: int
    in_builtins: int
    eliminated: int
    unaccounted: tuple[str, ...]
    unresolved: tuple[str, ...]
    suspect: tuple[str, ...] = ()  # labels of call sites whose origins contradict the IR
    unverified: tuple[str, ...] = ()  # labels of call sites the IR could not confirm
    problems: tuple[str, ...] = ()  # broken invariants (``Verification.problems``)

    @property
    def site_fraction(self) -> float:
        return self.attributed_sites / self.call_sites if self.call_sites else 1.0

    @property
    def verified_sites(self) -> int:
        return self.call_sites - len(self.suspect) - len(self.unverified)

    @property
    def complete(self) -> bool:
        """Every site attributed and confirmed by the IR, every op accounted for."""
        return (self.attributed_sites == self.call_sites and not self.unaccounted
                and not self.suspect and not self.unverified and not self.problems)


@define(frozen=True)
class Lineage:
    model: str
    target: str
    pipeline: str
    origins: dict[str, Origin]
    kernels: dict[str, tuple[CallSite, ...]]
    builtins: tuple[BuiltinSite, ...] = ()
    events: tuple[PassEvent, ...] = ()
    history_by_origin: dict[str, tuple[Change, ...]] = field(factory=dict)
    eliminated_by: dict[str, str] = field(factory=dict)
    edges: tuple[tuple[str, str], ...] = ()
    site_edges: tuple[tuple[int, int], ...] = ()
    degraded: tuple[str, ...] = ()
    # entry function -> (name, shape, dtype) of each tensor parameter; a symbolic dim as its name
    entries: dict[str, tuple[tuple[str, tuple, str], ...]] = field(factory=dict)
    # entry -> the Relax functions its run calls (directly or not): the VM runs them, they are no kernels
    calls: dict[str, tuple[str, ...]] = field(factory=dict)
    tuned: tuple[str, ...] = ()  # kernels whose schedule a MetaSchedule database gave
    # shape function -> the kernels whose allocations it sizes, read from the IR (``truth.shape_consumers``)
    shape_consumers: dict[str, tuple[str, ...]] = field(factory=dict)
    kernel_members: dict[str, tuple[Member, ...]] = field(factory=dict)  # kernel -> its PrimFuncs, from the IR
    verification: Verification | None = None  # ``verify()`` of this lineage, made by the build
    schema: str = SCHEMA

    # -- entries --------------------------------------------------------------

    def entry(self, name: str | None = None) -> str:
        """The entry function a run or a report is about (``choose_entry``)."""
        return choose_entry(self.entries, name)

    @property
    def subfunctions(self) -> tuple[str, ...]:
        """Every Relax function some entry calls."""
        return tuple(sorted({f for called in self.calls.values() for f in called}))

    @property
    def inputs(self) -> tuple[tuple[str, tuple, str], ...]:
        """The tensor inputs of the default entry (``entry()``)."""
        return self.entries.get(self.entry(), ())

    def for_entry(self, name: str | None = None) -> "Lineage":
        """This lineage as one entry function's run sees it: that entry's call sites
        and builtins; the origins of the entry and of every function its run calls
        (so an op of a subfunction that runs nowhere is still unaccounted), and the
        inserted and unresolved ones serving them or running at its sites. What a
        profile of that entry is attributed against. The lineage itself when it has
        one entry."""
        entry = self.entry(name)
        if len(self.entries) <= 1:
            return self
        kernels = {k: kept for k, v in self.kernels.items() if (kept := tuple(s for s in v if s.function == entry))}
        builtins = tuple(b for b in self.builtins if b.function == entry)
        functions = {entry, *self.calls.get(entry, ())}
        run = {o for v in kernels.values() for s in v for o in s.origin_ids} | {o for b in builtins for o in b.origins}
        own = {o.id for o in self.origins.values() if o.function in functions and o.kind == OP}
        keep = own | run | {o.id for o in self.origins.values() if o.kind != OP and set(o.serves) & own}
        positions = {s.position for v in kernels.values() for s in v}
        verification = self.verification
        if verification is not None:
            verification = Verification(tuple(c for c in verification.sites if c.position in positions),
                                        verification.problems)
        return attrs.evolve(
            self, origins={k: o for k, o in self.origins.items() if k in keep}, kernels=kernels, builtins=builtins,
            history_by_origin={k: v for k, v in self.history_by_origin.items() if k in keep},
            eliminated_by={k: v for k, v in self.eliminated_by.items() if k in keep},
            edges=tuple(e for e in self.edges if e[0] in keep and e[1] in keep),
            site_edges=tuple(e for e in self.site_edges if e[0] in positions and e[1] in positions),
            entries={entry: self.entries[entry]},
            calls={entry: self.calls[entry]} if entry in self.calls else {},
            events=tuple(e for e in self.events if e.function in functions),
            tuned=tuple(k for k in self.tuned if k in kernels),
            kernel_members={k: v for k, v in self.kernel_members.items() if k in kernels},
            verification=verification,
        )

    # -- queries --------------------------------------------------------------

    @property
    def call_sites(self) -> tuple[CallSite, ...]:
        """Every kernel call site, in run order."""
        return tuple(sorted((s for sites in self.kernels.values() for s in sites), key=lambda s: s.position))

    def site(self, kernel: str, call: int = 0, entry: str | None = None) -> CallSite:
        """The ``call``-th call of ``kernel`` in a run of ``entry`` (``entry()``)."""
        function = self.entry(entry)
        sites = self.sites(kernel)
        found = [s for s in sites if s.call == call and s.function == function]
        if not found:
            raise UnknownNameError("call", f"{kernel}#{call}", [s.label for s in sites])
        return found[0]

    def site_by_label(self, label: str) -> CallSite:
        """The call site a label names (``kernel#call`` or ``entry:kernel#call``)."""
        for s in self.call_sites:
            if s.label == label:
                return s
        raise UnknownNameError("call site", label, [s.label for s in self.call_sites])

    def origins_of(self, kernel: str, call: int | None = None) -> tuple[Origin, ...]:
        """Origins a kernel runs: at one call site, or at all of them (in order)."""
        sites = self.sites(kernel) if call is None else (self.site(kernel, call),)
        ids = dict.fromkeys(o for s in sites for o in s.origin_ids)
        return tuple(self.origins[o] for o in ids)

    def kernels_of(self, name: str) -> tuple[CallSite, ...]:
        """Call sites that run a layer or an origin (inserted ops serving it included)."""
        ids = self.resolve(name)
        serving = {o.id for o in self.origins.values() if set(o.serves) & ids}
        wanted = ids | serving
        return tuple(s for s in self.call_sites if wanted & set(s.origin_ids))

    def history(self, name: str) -> tuple[Change, ...]:
        """Each pass that rewrote the op, in order, with the rule that followed it."""
        ids = self.resolve(name)
        steps = [c for o in sorted(ids) for c in self.history_by_origin.get(o, ())]
        return tuple(sorted(steps, key=lambda c: c.index))

    def eliminated(self) -> dict[str, str]:
        return dict(self.eliminated_by)

    def inserted(self) -> tuple[Origin, ...]:
        return tuple(o for o in self.origins.values() if o.kind == INSERTED)

    def unresolved(self) -> tuple[Origin, ...]:
        return tuple(o for o in self.origins.values() if o.kind == UNRESOLVED)

    def call_count_mismatches(self, ran: dict[str, int]) -> list[str]:
        """How ``ran`` (kernel -> calls seen in a run or profile) differs from the call
        sites here: the evidence that a lineage belongs to another build."""
        problems = [f"{k}: {len(v)} call site(s) in the lineage, {ran.get(k, 0)} ran"
                    for k, v in self.kernels.items() if ran.get(k, 0) != len(v)]
        return problems + [f"{k}: ran, but is not in the lineage" for k in ran
                           if k not in self.kernels and k not in self.subfunctions]

    def layers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.layer for o in self.origins.values() if o.kind == OP))

    def resolve(self, name: str) -> set[str]:
        """Origin ids named by an origin id or a layer name."""
        if name in self.origins:
            return {name}
        ids = {o.id for o in self.origins.values() if o.layer == name and o.kind == OP}
        if not ids:
            known = list(self.origins) + list(self.layers())
            raise UnknownNameError("layer or origin", name, known)
        return ids

    def coverage(self) -> Coverage:
        sites = self.call_sites
        in_kernels = {o for s in sites for o in s.origin_ids}
        in_builtins = {o for b in self.builtins for o in b.origins}
        inputs = [o for o in self.origins.values() if o.kind == OP]
        unaccounted = tuple(
            o.id for o in inputs
            if o.id not in in_kernels and o.id not in in_builtins and o.id not in self.eliminated_by
        )
        return Coverage(
            call_sites=len(sites),
            attributed_sites=sum(1 for s in sites if s.roles),
            origins=len(inputs),
            in_kernels=sum(1 for o in inputs if o.id in in_kernels),
            in_builtins=sum(1 for o in inputs if o.id in in_builtins and o.id not in in_kernels),
            eliminated=sum(1 for o in inputs if o.id in self.eliminated_by),
            unaccounted=unaccounted,
            unresolved=tuple(o.id for o in self.unresolved()),
            suspect=self._sites_with(SUSPECT),
            unverified=self._sites_with(UNVERIFIED),
            problems=self.verification.problems if self.verification is not None else (),
        )

    def _sites_with(self, status: str) -> tuple[str, ...]:
        checks = self.site_checks()
        return tuple(s.label for s in self.call_sites if checks[s.position].status == status)

    def site_checks(self) -> dict[int, SiteCheck]:
        """position -> the verification verdict of each call site; a lineage saved
        without one counts every site as unverified."""
        if self.verification is None:
            return {s.position: SiteCheck(s.position, UNVERIFIED, ("this lineage was never verified",))
                    for s in self.call_sites}
        return self.verification.by_position()

    def check(self, site: CallSite) -> SiteCheck:
        return self.site_checks()[site.position]

    def verify(self) -> Verification:
        """Check this lineage again against the kernel members it holds (see ``verify``)."""
        return verify(self)

    def graph(self):
        """A networkx DiGraph: origin and call-site nodes; ``dataflow`` edges between
        origins and between sites, ``lineage`` edges from each origin to its sites."""
        import networkx as nx

        g = nx.DiGraph()
        for o in self.origins.values():
            g.add_node(o.id, kind="origin", layer=o.layer, op=o.op, origin_kind=o.kind)
        for a, b in self.edges:
            g.add_edge(a, b, kind="dataflow")
        by_position = {s.position: s for s in self.call_sites}
        for s in by_position.values():
            g.add_node(s.label, kind="call_site", kernel=s.kernel, call=s.call, position=s.position)
            for r in s.roles:
                g.add_edge(r.origin, s.label, kind="lineage", role=r.role)
        for a, b in self.site_edges:
            g.add_edge(by_position[a].label, by_position[b].label, kind="dataflow")
        return g

    def sites(self, kernel: str) -> tuple[CallSite, ...]:
        """Every call site of one kernel, in run order."""
        if kernel not in self.kernels:
            raise UnknownNameError("kernel", kernel, self.kernels)
        return self.kernels[kernel]

    # -- persistence ----------------------------------------------------------

    def to_json(self) -> dict:
        return {
            "schema": self.schema,
            "model": self.model,
            "target": self.target,
            "pipeline": self.pipeline,
            "origins": [attrs.asdict(o) for o in self.origins.values()],
            "kernels": {k: [{**attrs.asdict(s, recurse=False), "roles": [r._asdict() for r in s.roles]} for s in v]
                        for k, v in self.kernels.items()},
            "builtins": [attrs.asdict(b) for b in self.builtins],
            "events": [attrs.asdict(e) for e in self.events],
            "history": {k: [c._asdict() for c in v] for k, v in self.history_by_origin.items()},
            "eliminated": self.eliminated_by,
            "edges": self.edges,
            "site_edges": self.site_edges,
            "degraded": self.degraded,
            "entries": self.entries,
            "calls": self.calls,
            "tuned": self.tuned,
            "shape_consumers": self.shape_consumers,
            "kernel_members": {k: [attrs.asdict(m) for m in v] for k, v in self.kernel_members.items()},
            "verification": attrs.asdict(self.verification) if self.verification is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Lineage":
        check_schema(data, SCHEMA, "lineage")
        try:
            return cls(
                model=data["model"], target=data["target"], pipeline=data["pipeline"],
                origins={o["id"]: make_record(Origin, o) for o in data["origins"]},
                kernels={
                    k: tuple(make_record(CallSite, {**s, "roles": [make_record(Role, r) for r in s["roles"]]}) for s in v)
                    for k, v in data["kernels"].items()
                },
                builtins=tuple(make_record(BuiltinSite, b) for b in data["builtins"]),
                events=tuple(make_record(PassEvent, e) for e in data["events"]),
                history_by_origin={k: tuple(make_record(Change, c) for c in v) for k, v in data["history"].items()},
                eliminated_by=dict(data["eliminated"]),
                edges=tuples(data["edges"]),
                site_edges=tuples(data["site_edges"]),
                degraded=tuple(data["degraded"]),
                entries={k: tuples(v) for k, v in data["entries"].items()} if "entries" in data
                else {"main": tuples(data.get("inputs", ()))} if data.get("inputs") else {},
                calls={k: tuple(v) for k, v in data.get("calls", {}).items()},
                tuned=tuple(data.get("tuned", ())),
                shape_consumers={k: tuple(v) for k, v in data.get("shape_consumers", {}).items()},
                kernel_members={k: tuple(make_record(Member, m) for m in v)
                                for k, v in data.get("kernel_members", {}).items()},
                verification=_verification(data.get("verification")),
            )
        except (KeyError, TypeError) as exc:
            raise LineageFormatError(f"lineage file is missing or has a malformed field: {exc}") from exc

    def save(self, path, overwrite: bool = False) -> Path:
        """Write JSON atomically; an existing file is kept unless ``overwrite``."""
        return write_json(path, self.to_json(), overwrite)

    @classmethod
    def load(cls, path) -> "Lineage":
        return cls.from_json(read_json(path, "lineage"))


def choose_entry(entries, name: str | None = None) -> str:
    """The entry function of ``entries`` (names) a run is about: ``name`` when the model
    has it; by default ``main``, or the only one; several and none named: an error
    listing them."""
    entries = list(entries)
    if name is not None:
        if name not in entries:
            raise UnknownNameError("entry function", name, entries)
        return name
    if "main" in entries or not entries:
        return "main"
    if len(entries) == 1:
        return entries[0]
    raise UsageError(f"the model has several entry functions ({', '.join(entries)}) and no main: "
                          "choose one (--entry NAME, entry=NAME)")


def _verification(data) -> Verification | None:
    if data is None:
        return None
    return Verification(sites=tuple(make_record(SiteCheck, c) for c in data["sites"]), problems=tuples(data["problems"]))


def roles_for(origin_ids: Iterable[str], origins: dict[str, Origin]) -> tuple[Role, ...]:
    """Anchor = heaviest model op (ties: earliest); other model ops fused; the rest by kind."""
    found = sorted(map(origins.__getitem__, set(origin_ids)), key=_site_order)
    anchor = max((o for o in found if o.kind == OP), key=_op_rank, default=None)
    return tuple(Role(o.id, ANCHOR if o is anchor else FUSED if o.kind == OP else o.kind) for o in found)


def _op_rank(origin: Origin) -> int:
    return op_rank(origin.op)


def _site_order(origin: Origin) -> tuple:
    return (origin.kind != OP, origin.function, origin.index, origin.id)
