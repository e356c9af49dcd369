"""Lineage: which original ops each kernel call site runs, what every pass did, and
whether the compiled IR confirms it. Plain data: queried, drawn, saved and loaded
without TVM."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path

import attrs
from attrs import define, field

from ..errors import FileFormatError, UnknownNameError, UsageError, expect, expect_number
from ..errors import require as require_package
from .build_facts import BuildFacts
from .code import Code, LayerCode, layer_code, mismatches, require
from .codec import Codec, apart_field, codec_field, decode, encode
from .frontend import Program
from .journal import Change, Journal
from .jsonio import check, gc_paused, read_record, write_json
from .layer_name import layer_name
from .lineage_index import LineageIndex, index_of
from .lineage_schema import SCHEMA, migrate
from .origin import INSERTED, OP, UNRESOLVED, Origin
from .roles import ANCHOR, Role
from .sense import check_lineage
from .sitekey import Frame, SiteKey, parse_scope, scope_text
from .verification import SUSPECT, UNVERIFIED, SiteCheck, Verification, verify

PACKED = "packed"  # ``CallSite.library`` of a call of a function registered by name


def _scope(data, where: str) -> tuple[Frame, ...]:
    check(data, str, where)
    try:
        return parse_scope(data)
    except ValueError as exc:
        raise FileFormatError(f"{where}: {exc}") from None


SCOPE = Codec(  # saved as its text, block#0/inner#1
    scope_text, _scope, lambda of: {"type": "string", "pattern": r"^([^#/]+#[0-9]+(/[^#/]+#[0-9]+)*)?$"}
)


@define(frozen=True)
class CallSite:
    """The ``call``-th run-time call of ``kernel`` in one run of the entry function
    ``function``; ``position`` orders all sites (an entry's sites in its run order, one
    entry after another). ``scope`` says which call of a Relax subfunction the site runs
    in: a ``Frame`` per subfunction call, outermost first (none for the entry's own body;
    ``(Frame("block", 1),)`` for the second call of ``block``; saved as ``block#1``,
    ``block#0/inner#0`` nested); each call of a subfunction runs its ops again.
    ``arguments``: ``(shape, dtype)`` of each argument (outputs last) as the compiled IR
    types it: a symbolic dim by its name where the IR keeps it (an entry's own input),
    ``"?"`` where the IR has left it open (VMShapeLower does, for every value it sizes at
    run time); a remote profile of a build that cannot run here times the site on
    arguments of these shapes. ``library``: "" for a kernel TVM compiled; for a call of
    an external function that computes model ops, what runs it: the codegen of an
    offloaded group (``cublas``, ``BuildFacts.offloads``) or ``packed`` for a function
    registered by name (``R.call_dps_packed("my.double", ...)``)."""

    kernel: str
    call: int
    position: int
    roles: tuple[Role, ...]
    function: str = "main"
    scope: tuple[Frame, ...] = codec_field(SCOPE, default=())
    arguments: tuple[tuple[tuple, str], ...] = ()
    library: str = ""

    @functools.cached_property
    def origin_ids(self) -> tuple[str, ...]:
        """The origins of its roles, in order (made once: verification and queries ask
        each site many times)."""
        return tuple(r.origin for r in self.roles)

    @property
    def anchor(self) -> str | None:
        """The origin whose op the kernel was built around (the one its time is billed
        to under the default policy), or None for a site that runs no model op."""
        return next((r.origin for r in self.roles if r.role == ANCHOR), None)

    @property
    def key(self) -> SiteKey:
        """Its identity, ``SiteKey(entry, kernel, call)``: what profiles and reports key
        its figures by."""
        return SiteKey(self.function, self.kernel, self.call)

    @property
    def label(self) -> str:
        """``kernel#call``; ``entry:kernel#call`` for a site of an entry other than main
        (``SiteKey.label``)."""
        return self.key.label


@define(frozen=True)
class BuiltinSite:
    """A call site that the VM serves with a builtin (``vm.builtin.reshape``): no kernel;
    ``scope`` as a ``CallSite``'s."""

    name: str
    position: int
    origins: tuple[str, ...]
    function: str = "main"
    scope: tuple[Frame, ...] = codec_field(SCOPE, default=())


@define(frozen=True)
class Coverage:
    """How much of a build the lineage accounts for (``Lineage.coverage``): counts of
    call sites and origins, and the labels or ids of whatever is not explained or not
    confirmed. ``complete`` is the one verdict a user acts on; the CLI summary and the
    report's coverage line print these fields."""

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
    degraded: tuple[str, ...] = ()  # why the build could not be followed to its end (``Journal.degraded``)
    layers: int = 0  # layers with a verdict (``Verification.layers``)
    suspect_layers: tuple[str, ...] = ()  # layers the frontend's program or their sites contradict
    unverified_layers: tuple[str, ...] = ()

    @property
    def site_fraction(self) -> float:
        """Attributed call sites over all of them (1.0 for a build with none)."""
        return self.attributed_sites / self.call_sites if self.call_sites else 1.0

    @property
    def verified_sites(self) -> int:
        """Call sites neither suspect nor unverified."""
        return self.call_sites - len(self.suspect) - len(self.unverified)

    @property
    def complete(self) -> bool:
        """Every site attributed and confirmed by the IR, every layer confirmed, every
        op accounted for, the build followed to its end."""
        return (
            self.attributed_sites == self.call_sites
            and not self.unaccounted
            and not self.suspect
            and not self.unverified
            and not self.problems
            and not self.degraded
            and not self.suspect_layers
            and not self.unverified_layers
        )


def _origins(data, where: str) -> dict[str, Origin]:
    found = decode(tuple[Origin, ...], data, where)
    held = {o.id: o for o in found}
    if len(held) != len(found):
        twice = next(o.id for i, o in enumerate(found) if any(p.id == o.id for p in found[:i]))
        raise FileFormatError(
            f"{where} holds origin {twice!r} twice: an id names one op; the file was edited or "
            "is corrupt; trace the build again"
        )
    return held


ORIGINS = Codec(  # saved as a list, held by id
    lambda origins: [encode(o) for o in origins.values()], _origins, lambda of: {"type": "array", "items": of(Origin)}
)


# held while a lineage's put-off code is made; re-entrant: an entry view's code is its lineage's, made inside
_CODE_MADE = threading.RLock()


@define(frozen=True)
class Lineage:
    """Where every kernel call of a build came from: the ``build`` it is about (target,
    pipeline, entries: ``BuildFacts``), the model's ops (``origins``, keyed by stable
    origin id), each kernel's call sites in run order with the role each origin plays
    there, the VM builtins, the data flow between ops and between sites, what each pass
    did to each origin (``journal``), the verification verdicts and the frontend's
    program they check the layers against. Frozen data made by ``relaytrace.build``
    (or ``trace``), saved and loaded as ``lineage.json`` (schema ``SCHEMA``; files of
    earlier schemas load through ``lineage_schema.migrate``); every question about it
    (``kernels_of``, ``origins_of``, ``history``, ``coverage``) is answered from indexes
    built once, at the first question. No TVM is needed to read one."""

    build: BuildFacts
    origins: dict[str, Origin] = codec_field(ORIGINS)
    kernels: dict[str, tuple[CallSite, ...]] = field(factory=dict)
    builtins: tuple[BuiltinSite, ...] = ()
    edges: tuple[tuple[str, str], ...] = ()  # data flow between origins
    site_edges: tuple[tuple[int, int], ...] = ()  # data flow between call sites, by position
    journal: Journal = field(factory=Journal)
    verification: Verification | None = None  # ``verify()`` of this lineage, made by the build
    program: Program | None = None  # what the frontend translated: the evidence for the layers (``model.frontend``)
    # the code the build made (``model.code``): code.json, not lineage.json; read as ``code``
    _code: Code | None = apart_field(alias="code")
    # what makes it at the first ask, when the build put it off (``tracking.code.code_later``)
    _code_later: Callable[[Lineage], Code | None] | None = apart_field(alias="code_later")
    schema: str = SCHEMA
    _index: LineageIndex | None = field(default=None, init=False, eq=False, repr=False)
    _entry_views: dict = field(factory=dict, init=False, eq=False, repr=False)  # entry -> ``for_entry``'s lineage

    @property
    def code(self) -> Code | None:
        """The code the build made (``model.code``), None when it was not read (a lineage
        loaded without its code.json). A build puts it off until it is first asked for
        here: printing it is a third of tracking's time, and only outputs that show the
        code need it."""
        if self._code is None and self._code_later is not None:
            with _CODE_MADE:  # two threads asking at once: one makes it, the other finds it made
                later = self._code_later
                if later is not None:
                    object.__setattr__(self, "_code", later(self))
                    object.__setattr__(self, "_code_later", None)
        return self._code

    def __getstate__(self):
        """What pickles a lineage: its fields, the code made first if it was put off (what
        makes it holds TVM objects, which do not pickle)."""
        _ = self.code
        return {f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if f.name != "_code_later"}

    def __setstate__(self, state) -> None:
        for name, value in {"_code_later": None, "_entry_views": {}, "_index": None, **state}.items():
            object.__setattr__(self, name, value)

    def index(self) -> LineageIndex:
        """The look-ups queries use (``lineage_index``), built at the first query:
        a lineage is frozen, so they stay true; ``attrs.evolve`` starts a new one."""
        if self._index is None:
            object.__setattr__(self, "_index", index_of(self.kernels, self.origins, self.verification))
        assert self._index is not None
        return self._index

    # -- entries --------------------------------------------------------------

    def entry(self, name: str | None = None) -> str:
        """The entry function a run or a report is about (``choose_entry``)."""
        expect("the entry", name, (str, None), "an entry function's name (a str) or None for the default")
        return choose_entry(self.build.entries, name)

    @property
    def subfunctions(self) -> tuple[str, ...]:
        """Every Relax function some entry calls."""
        return tuple(sorted({f for called in self.build.calls.values() for f in called}))

    @property
    def inputs(self) -> tuple[tuple[str, tuple, str], ...]:
        """The tensor inputs of the default entry (``entry()``)."""
        return self.build.entries.get(self.entry(), ())

    def for_entry(self, name: str | None = None) -> Lineage:
        """This lineage as one entry function's run sees it: that entry's call sites
        and builtins; the origins of the entry and of every function its run calls
        (so an op of a subfunction that runs nowhere is still unaccounted), and the
        inserted and unresolved ones serving them or running at its sites, and the
        verification's verdicts on those sites and layers (the verdicts of the whole
        build: a layer both entries run has one). What a profile of that entry is
        attributed against. The lineage itself when it has
        one entry. Made once per entry (a lineage is frozen): the report, its renderers
        and the attribution ask for the same entry's view many times."""
        entry = self.entry(name)
        if len(self.build.entries) <= 1:
            return self
        view = self._entry_views.get(entry)
        if view is None:
            view = self._entry_views[entry] = self._view_of(entry)
        return view

    def _view_of(self, entry: str) -> Lineage:
        kernels = {k: kept for k, v in self.kernels.items() if (kept := tuple(s for s in v if s.function == entry))}
        builtins = tuple(b for b in self.builtins if b.function == entry)
        functions = {entry, *self.build.calls.get(entry, ())}
        run = {o for v in kernels.values() for s in v for o in s.origin_ids} | {o for b in builtins for o in b.origins}
        own = {o.id for o in self.origins.values() if o.function in functions and o.kind == OP}
        keep = own | run | {o.id for o in self.origins.values() if o.kind != OP and set(o.serves) & own}
        positions = {s.position for v in kernels.values() for s in v}
        verification = self.verification
        if verification is not None:  # the same verdicts, on what this entry's run holds
            layers = {self.origins[o].layer for o in keep}
            verification = Verification(
                tuple(c for c in verification.sites if c.position in positions),
                verification.problems,
                tuple(c for c in verification.layers if c.layer in layers),
            )
        build, journal = self.build, self.journal
        return attrs.evolve(
            self,
            origins={k: o for k, o in self.origins.items() if k in keep},
            kernels=kernels,
            builtins=builtins,
            edges=tuple(e for e in self.edges if e[0] in keep and e[1] in keep),
            site_edges=tuple(e for e in self.site_edges if e[0] in positions and e[1] in positions),
            build=attrs.evolve(
                build,
                entries={entry: build.entries[entry]},
                calls={entry: build.calls[entry]} if entry in build.calls else {},
                tuned=tuple(k for k in build.tuned if k in kernels),
                kernel_members={k: v for k, v in build.kernel_members.items() if k in kernels},
            ),
            journal=attrs.evolve(
                journal,
                events=tuple(e for e in journal.events if e.function in functions),
                history_by_origin={k: v for k, v in journal.history_by_origin.items() if k in keep},
                eliminated_by={k: v for k, v in journal.eliminated_by.items() if k in keep},
                explained={k: v for k, v in journal.explained.items() if k in keep},
            ),
            verification=verification,
            # the whole build's code, as the lineage's: made once, for the lineage and its views
            code_later=None if self._code_later is None else (lambda view: self.code),
        )

    # -- queries --------------------------------------------------------------

    @property
    def call_sites(self) -> tuple[CallSite, ...]:
        """Every kernel call site, in run order."""
        return self.index().call_sites

    def site(self, kernel: str, call: int = 0, entry: str | None = None) -> CallSite:
        """The ``call``-th call of ``kernel`` in a run of ``entry`` (``entry()``)."""
        expect_number("site(call=)", call, 0)
        function = self.entry(entry)
        sites = self.sites(kernel)
        found = [s for s in sites if s.call == call and s.function == function]
        if not found:
            raise UnknownNameError("call", SiteKey(function, kernel, call).label, [s.label for s in sites])
        return found[0]

    def site_by_label(self, label: str) -> CallSite:
        """The call site a label names (``kernel#call`` or ``entry:kernel#call``)."""
        found = self.index().by_label.get(label)
        if found is None:
            raise UnknownNameError("call site", label, [s.label for s in self.call_sites])
        return found

    def origins_of(self, kernel: str, call: int | None = None) -> tuple[Origin, ...]:
        """Origins a kernel runs: at one call site, or at all of them (in order)."""
        if call is not None:
            expect_number("origins_of(call=)", call, 0)
        sites = self.sites(kernel) if call is None else (self.site(kernel, call),)
        ids = dict.fromkeys(o for s in sites for o in s.origin_ids)
        return tuple(self.origins[o] for o in ids)

    def kernels_of(self, name: str) -> tuple[CallSite, ...]:
        """Call sites that run a layer or an origin (inserted ops serving it included)."""
        index = self.index()
        ids = self.resolve(name)
        wanted = ids.union(*(index.serving.get(o, ()) for o in ids))
        positions = sorted({p for o in wanted for p in index.sites_of_origin.get(o, ())})
        return tuple(index.at_position[p] for p in positions)

    def history(self, name: str) -> tuple[Change, ...]:
        """Each pass that rewrote the op, in order, with the rule that followed it."""
        ids = self.resolve(name)
        steps = [c for o in sorted(ids) for c in self.journal.history_by_origin.get(o, ())]
        return tuple(sorted(steps, key=lambda c: c.index))

    def eliminated(self) -> dict[str, str]:
        """Origin id -> the pass that removed it (folded, dead code, fused away)."""
        return dict(self.journal.eliminated_by)

    def inserted(self) -> tuple[Origin, ...]:
        """The ops a pass added (layout transforms, casts, shape work), each serving the
        model ops named in its ``serves``."""
        return tuple(o for o in self.origins.values() if o.kind == INSERTED)

    def unresolved(self) -> tuple[Origin, ...]:
        """The ops no rule could trace to the model: counted apart, never guessed."""
        return tuple(o for o in self.origins.values() if o.kind == UNRESOLVED)

    @functools.cached_property
    def library_calls(self) -> dict[str, str]:
        """External function -> what runs it (``CallSite.library``), for every call
        site that is a library call rather than a kernel TVM compiled."""
        return {k: v[0].library for k, v in self.kernels.items() if v and v[0].library}

    def call_count_mismatches(self, ran: dict[str, int]) -> list[str]:
        """How ``ran`` (kernel -> calls seen in a run or profile) differs from the call
        sites here: the evidence that a lineage belongs to another build."""
        problems = [
            f"{k}: {len(v)} call site(s) in the lineage, {ran.get(k, 0)} ran"
            for k, v in self.kernels.items()
            if ran.get(k, 0) != len(v)
        ]
        return problems + [
            f"{k}: ran, but is not in the lineage" for k in ran if k not in self.kernels and k not in self.subfunctions
        ]

    def layers(self) -> tuple[str, ...]:
        """The layers of the input's ops, in op order."""
        return tuple(self.index().ops_of_layer)

    def sources(self) -> dict[str, tuple[str, ...]]:
        """layer -> where its ops came from in the user's code (``Origin.source``: the
        ``file:line`` of a torch forward, an ONNX node), in op order, each once."""
        out: dict[str, dict[str, None]] = {}
        for o in sorted(self.origins.values(), key=lambda o: (o.function, o.index)):
            if o.kind == OP and o.source:
                out.setdefault(o.layer, {})[o.source] = None
        return {layer: tuple(found) for layer, found in out.items()}

    def resolve(self, name: str) -> set[str]:
        """Origin ids named by an origin id or a layer name."""
        expect("the layer or origin", name, str, "a layer's or an origin's name (a str)")
        if name in self.origins:
            return {name}
        layers = self.index().ops_of_layer
        ids = set(layers.get(name) or layers.get(layer_name(name)) or ())  # a module c@1's first call: c@1@0
        if not ids:
            known = list(self.origins) + list(self.layers())
            raise UnknownNameError("layer or origin", name, known)
        return ids

    def coverage(self) -> Coverage:
        """What this lineage accounts for and what it does not (see ``Coverage``)."""
        sites = self.call_sites
        in_kernels = {o for s in sites for o in s.origin_ids}
        in_builtins = {o for b in self.builtins for o in b.origins}
        inputs = [o for o in self.origins.values() if o.kind == OP]
        layer_checks = self.verification.layers if self.verification is not None else ()
        eliminated = self.journal.eliminated_by
        unaccounted = tuple(
            o.id for o in inputs if o.id not in in_kernels and o.id not in in_builtins and o.id not in eliminated
        )
        return Coverage(
            call_sites=len(sites),
            attributed_sites=sum(1 for s in sites if s.roles),
            origins=len(inputs),
            in_kernels=sum(1 for o in inputs if o.id in in_kernels),
            in_builtins=sum(1 for o in inputs if o.id in in_builtins and o.id not in in_kernels),
            eliminated=sum(1 for o in inputs if o.id in eliminated),
            unaccounted=unaccounted,
            unresolved=tuple(o.id for o in self.unresolved()),
            suspect=self._sites_with(SUSPECT),
            unverified=self._sites_with(UNVERIFIED),
            problems=self.verification.problems if self.verification is not None else (),
            degraded=self.journal.degraded,
            layers=len(layer_checks),
            suspect_layers=tuple(c.layer for c in layer_checks if c.status == SUSPECT),
            unverified_layers=tuple(c.layer for c in layer_checks if c.status == UNVERIFIED),
        )

    def _sites_with(self, status: str) -> tuple[str, ...]:
        checks = self.site_checks()
        return tuple(s.label for s in self.call_sites if checks[s.position].status == status)

    def site_checks(self) -> dict[int, SiteCheck]:
        """position -> the verification verdict of each call site (not to be changed:
        it is the index's); a lineage saved without one counts every site as unverified."""
        return self.index().checks

    def check(self, site: CallSite) -> SiteCheck:
        """The verification verdict of one of this lineage's call sites."""
        return self.index().checks[site.position]

    def verify(self) -> Verification:
        """Check this lineage again against the kernel members it holds (see ``verify``)."""
        return verify(self)

    def graph(self):
        """A networkx DiGraph: origin and call-site nodes; ``dataflow`` edges between
        origins and between sites, ``lineage`` edges from each origin to its sites."""
        g = require_package("networkx", "graph").DiGraph()
        for o in self.origins.values():
            g.add_node(o.id, kind="origin", layer=o.layer, op=o.op, origin_kind=o.kind)
        for a, b in self.edges:
            g.add_edge(a, b, kind="dataflow")
        by_position = {s.position: s for s in self.call_sites}
        for s in by_position.values():
            g.add_node(s.label, kind="call_site", kernel=s.kernel, call=s.call, position=s.position)
            for r in s.roles:
                g.add_edge(r.origin, s.label, kind="lineage", role=r.role)
        for earlier, later in self.site_edges:
            g.add_edge(by_position[earlier].label, by_position[later].label, kind="dataflow")
        return g

    def sites(self, kernel: str) -> tuple[CallSite, ...]:
        """Every call site of one kernel, in run order."""
        expect("the kernel", kernel, str, "a kernel's name (a str; a call site's label: site_by_label)")
        if kernel not in self.kernels:
            raise UnknownNameError("kernel", kernel, self.kernels)
        return self.kernels[kernel]

    def with_code(self, code: Code, where: str = "the code") -> Lineage:
        """This lineage with the code of its build (``Code.load`` of the code.json beside
        it); code that is not its build's (``model.code.mismatches``) is a one-line
        ``FileFormatError`` naming ``where`` and the field."""
        problem = next(mismatches(self, code), None)
        if problem:
            raise FileFormatError(
                f"{where} is not the code of this lineage's build: {problem}; write both again with "
                "`relaytrace profile` (code.json and lineage.json are made together)"
            )
        return attrs.evolve(self, code=code, code_later=None)

    def code_of(self, layer: str) -> LayerCode:
        """What the compiler made of ``layer``: its Relax lines, its kernels' blocks that
        compute it and their verdicts (``model.code.layer_code``); a lineage loaded
        without its code says how to load it."""
        return layer_code(self, require(self.code), layer)

    # -- persistence ----------------------------------------------------------

    def to_json(self) -> dict:
        """The lineage as plain JSON data, as ``save`` writes it (``from_json`` reads it)."""
        return {"schema": self.schema, **encode(self)}

    @classmethod
    def from_json(cls, data: dict, where: str = "lineage") -> Lineage:
        """The lineage a JSON object holds (of this schema or an earlier one: ``migrate``),
        every record and reference checked: a ``FileFormatError`` naming the field
        (``where`` names the file) otherwise."""
        current = isinstance(data, dict) and data.get("schema") == SCHEMA
        with gc_paused():  # thousands of records, no cycles: a collection would walk them all, again and again
            lineage = decode(cls, migrate(data, where), where)
            # a file of an earlier schema was made by earlier rules: its derived facts are kept
            check_lineage(lineage, where, derived=current)
        return lineage

    def save(self, path, overwrite: bool = False) -> Path:
        """Write JSON atomically; an existing file is kept unless ``overwrite``."""
        return write_json(path, self.to_json(), overwrite)

    @classmethod
    def load(cls, path) -> Lineage:
        """The lineage saved at ``path``; a file that is not one is a one-line
        ``FileFormatError`` naming the file and the field."""
        return read_record(path, "lineage", cls.from_json)


def choose_entry(entries, name: str | None = None) -> str:
    """The entry function of ``entries`` (names) a run is about: ``name`` when the model
    has it; by default ``main``, or the only one; several and none named: an error
    listing them."""
    entries = list(entries)
    if not entries:
        raise UsageError(
            "the model has no Relax function to run: a factory returns a model or an IRModule with one (main)"
        )
    if name is not None:
        if name not in entries:
            raise UnknownNameError("entry function", name, entries)
        return name
    if "main" in entries:
        return "main"
    if len(entries) == 1:
        return entries[0]
    raise UsageError(
        f"the model has several entry functions ({', '.join(entries)}) and no main: "
        "choose one (--entry NAME, entry=NAME)"
    )
