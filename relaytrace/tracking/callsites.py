"""Turn the tracker's state after the last pass into a Lineage: every entry function's
call sites in run order, a call of a Relax subfunction followed into it."""

from __future__ import annotations

import attrs

from ..model.build_facts import BuildFacts, Offload
from ..model.entry import signature
from ..model.journal import Change, Journal
from ..model.lineage import PACKED, BuiltinSite, CallSite, Lineage
from ..model.ops import is_bookkeeping, is_external_call
from ..model.roles import roles_for
from ..model.sitekey import Calls, Frame
from . import ir, reader
from .tracker import Tracker


class _Sites:
    """The call sites found so far, across entries: positions are global, call numbers
    count a kernel's calls within one entry's run."""

    def __init__(self, tracker: Tracker, offloads: dict[str, Offload]):
        self.tracker = tracker
        self.offloads = offloads
        self.kernels: dict[str, list[CallSite]] = {}
        self.builtins: list[BuiltinSite] = []
        self.edges: set[tuple[int, int]] = set()
        self.present: set[str] = set()  # origins some call site runs
        self.calls: dict[str, set[str]] = {}  # entry -> the Relax functions its run calls
        self.position = 0

    def library(self, callee: str) -> str:
        """What runs an external call: the codegen of the group it offloads, else
        ``packed`` (a function registered by name)."""
        offload = self.offloads.get(callee)
        return offload.codegen if offload is not None else PACKED

    def run(self, entry: str, name: str, scope: tuple[Frame, ...], calls: Calls, depth: int = 0) -> None:
        """Walk function ``name`` as one run of it inside entry ``entry``, in the
        subfunction calls ``scope``; ``calls`` numbers the calls made so far in this
        entry, of kernels (``SiteKey.call``) and of subfunctions (their ``Frame``s)."""
        tracker, tokens, functions = self.tracker, self.tracker.tokens, self.tracker.last_functions
        if depth > 64:
            raise RecursionError(f"Relax functions call each other more than 64 deep (at {name})")
        d = tracker.read(functions[name])
        producer: dict[int, int] = {}  # token -> position of the site that computed it
        for index in range(len(d.vars)):
            callee = d.callee(index)
            if callee is None or is_bookkeeping(callee):
                continue
            made = d.call(index)
            assert made is not None  # a binding with a callee is a call
            callee, gv = made.callee, made.global_var
            if ir.is_subfunction(functions, callee, gv):
                self.calls.setdefault(entry, set()).add(callee)
                self.run(entry, callee, (*scope, Frame(callee, calls.key(callee).call)), calls, depth + 1)
                continue
            if gv and callee in functions:
                continue  # a fused group not yet lowered: its kernels are its own sites
            tok = tokens.of(d.vars[index])
            if tok is None:  # a destination-passing call: its value lives in its output arg
                outs = (tokens.of(arg.handle) for arg in reversed(made.arguments()) if arg.kind == reader.VAR)
                tok = next((t for t in outs if t is not None), None)
            origin_ids = tokens.origins[tok] if tok is not None else ()
            # an argument's own token first: an inserted layout change shares its input's
            # canonical token, but its site is the one that feeds this call
            picked = (
                raw if raw in producer else src
                for raw, src in zip(tokens.arguments(made, False), tokens.arguments(made))
            )
            sources = {producer[t] for t in picked if t is not None and t in producer}
            self.present.update(origin_ids)
            position = self.position
            library = "" if gv else self.library(callee) if origin_ids and is_external_call(callee) else None
            made_by: int | None
            if library is not None:  # a kernel, or a library call computing model ops
                site = CallSite(
                    callee,
                    calls.key(callee).call,
                    position,
                    roles_for(origin_ids, tracker.origins),
                    entry,
                    scope,
                    d.argument_types(index),
                    library,
                )
                self.kernels.setdefault(callee, []).append(site)
                self.edges.update((src, position) for src in sources if src != position)
                made_by = position
            else:  # a builtin (reshape) passes its input's producer on
                self.builtins.append(BuiltinSite(callee, position, tuple(sorted(origin_ids)), entry, scope))
                made_by = min(sources) if sources else None
            if tok is not None and made_by is not None:
                producer[tok] = made_by
                producer.setdefault(tokens.canonical(tok), made_by)
            self.position += 1


def lineage_from(tracker: Tracker, build: BuildFacts, degraded=(), entries=None) -> Lineage:
    """The lineage the tracker's state describes, of ``build``: its model, target and
    options, and the facts read from the recorded IR: every entry's parameters as the
    last Relax module takes them (``params``: ``entries.entry_params``), which give each
    entry's tensors (``BuildFacts.entries``: ``model.entry.signature``, the one signature
    of an entry); the kernels' members (``kernel_members``: kernel -> its PrimFuncs,
    ``truth.kernel_members``) to verify it against (``follow`` does, once the rest of the
    IR's facts are in); the groups handed to external codegens (``offloads``:
    ``truth.offloads``). ``entries``: the input's entry functions (names)."""
    functions = tracker.last_functions  # every Relax function, fused groups included
    degraded = list(degraded)
    # the input's entries (passes give every function a global symbol: AttachGlobalSymbol),
    # then those a pass made that no other calls (LiftTransformParams' X_transform_params)
    public = ir.entry_functions(functions)
    names = [name for name in public if entries is None or name in entries]
    found = _Sites(tracker, build.offloads)
    for name in names:
        found.run(name, name, (), Calls(name))
    called = {callee for callees in found.calls.values() for callee in callees}
    for name in public:
        if name not in names and name not in tracker.input_functions and name not in called:
            names.append(name)
            found.run(name, name, (), Calls(name))
    if not names:
        degraded.append("no Relax entry function (one with a global_symbol) was seen after the last pass")
    eliminated = {o: p for o, p in tracker.log.eliminated.items() if o not in found.present}
    history: dict[str, list[Change]] = {}
    merged: set[str] = set()  # origins whose history comes from several tokens: to be put in pass order
    for tok, changes in tracker.log.changes.items():
        for oid in tracker.tokens.origins[tok]:
            if oid in history:
                history[oid].extend(changes)
                merged.add(oid)
            else:
                history[oid] = list(changes)
    params = build.params
    build = attrs.evolve(
        build,
        entries={name: signature(params.get(name, ())) for name in names},
        params={name: params[name] for name in names if name in params},
        calls={entry: tuple(sorted(called)) for entry, called in sorted(found.calls.items())},
        kernel_members=dict(sorted(build.kernel_members.items())),
    )
    journal = Journal(
        events=tuple(tracker.log.events),
        history_by_origin={k: tuple(sorted(v) if k in merged else v) for k, v in sorted(history.items())},
        eliminated_by=dict(sorted(eliminated.items())),
        degraded=tuple(degraded),
        explained={o: how for o, how in sorted(tracker.log.explained.items()) if o in eliminated},
    )
    return Lineage(
        build=build,
        origins=dict(tracker.origins),
        kernels={k: tuple(v) for k, v in found.kernels.items()},
        builtins=tuple(found.builtins),
        edges=tuple(tracker.edges),
        site_edges=tuple(sorted(found.edges)),
        journal=journal,
    )
