"""Turn the tracker's state after the last pass into a Lineage."""

from __future__ import annotations

import attrs

from ..model.journal import Change
from ..model.lineage import BuiltinSite, CallSite, Lineage, roles_for
from ..model.ops import is_bookkeeping
from ..model.verification import verify
from . import reader
from .tracker import Tracker


def lineage_from(tracker: Tracker, model: str, target: str, pipeline: str, degraded=(), inputs=(),
                 members=None) -> Lineage:
    """The lineage the tracker's state describes, verified against ``members`` (kernel
    -> its PrimFuncs, read from the recorded IR; ``truth.kernel_members``)."""
    functions = tracker.last_functions  # every Relax function, fused groups included
    kernels: dict[str, list[CallSite]] = {}
    builtins: list[BuiltinSite] = []
    site_edges: set[tuple[int, int]] = set()
    degraded = list(degraded)
    main = functions.get("main")
    if main is None:
        degraded.append("no Relax 'main' function was seen after the last pass")
    producer: dict[int, int] = {}  # token -> position of the site that computed it
    present: set[str] = set()  # origins some call site runs
    position = 0
    tokens = tracker.tokens
    d = tracker.read(main) if main is not None else None
    for index in range(len(d.vars) if d is not None else 0):
        made = reader.call(d, index)
        if made is None or is_bookkeeping(made.callee):
            continue
        callee, gv = made.callee, made.global_var
        tok = tokens.of(d.vars[index])
        if tok is None:  # a destination-passing call: its value lives in its output arg
            outs = (tokens.of(handle) for kind, handle in reversed(made.arguments()) if kind == reader.VAR)
            tok = next((t for t in outs if t is not None), None)
        origin_ids = tokens.origins[tok] if tok is not None else ()
        if gv and callee in functions:
            continue  # a call of another Relax function runs its kernels there
        # an argument's own token first: an inserted layout change shares its input's
        # canonical token, but its site is the one that feeds this call
        sources = {producer[raw if raw in producer else src]
                   for raw, src in zip(tokens.arguments(made, False), tokens.arguments(made))
                   if raw in producer or src in producer}
        present.update(origin_ids)
        if gv:  # a kernel
            sites = kernels.setdefault(callee, [])
            sites.append(CallSite(callee, len(sites), position, roles_for(origin_ids, tracker.origins)))
            site_edges.update((src, position) for src in sources if src != position)
            made_by = position
        else:  # a builtin (reshape) passes its input's producer on
            builtins.append(BuiltinSite(callee, position, tuple(sorted(origin_ids))))
            made_by = min(sources) if sources else None
        if tok is not None and made_by is not None:
            producer[tok] = made_by
            producer.setdefault(tokens.canonical(tok), made_by)
        position += 1
    eliminated = {o: p for o, p in tracker.log.eliminated.items() if o not in present}
    history: dict[str, list[Change]] = {}
    merged: set[str] = set()  # origins whose history comes from several tokens: to be put in pass order
    for tok, changes in tracker.log.changes.items():
        for oid in tokens.origins[tok]:
            if oid in history:
                history[oid].extend(changes)
                merged.add(oid)
            else:
                history[oid] = list(changes)
    lineage = Lineage(
        model=model, target=target, pipeline=pipeline,
        origins=dict(tracker.origins),
        kernels={k: tuple(v) for k, v in kernels.items()},
        builtins=tuple(builtins),
        events=tuple(tracker.log.events),
        history_by_origin={k: tuple(sorted(v) if k in merged else v) for k, v in sorted(history.items())},
        eliminated_by=dict(sorted(eliminated.items())),
        edges=tuple(tracker.edges),
        site_edges=tuple(sorted(site_edges)),
        degraded=tuple(degraded),
        inputs=inputs,
        kernel_members=dict(sorted((members or {}).items())),
    )
    return attrs.evolve(lineage, verification=verify(lineage))
