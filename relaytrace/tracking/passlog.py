"""The pass log the tracker keeps while it follows a build: a ``PassEvent`` per pass and
function, each token's ``Change`` history, and which pass each eliminated origin went in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from ..model.journal import Change, PassEvent
from ..model.origin import INSERTED, UNRESOLVED, Origin
from .newops import Changes


class PassStep(NamedTuple):
    """One pass over one function: the pass's place in the build, its name, the function."""

    position: int
    pass_name: str
    function: str


class PassLog:
    """What each pass did to each token (changes, eliminations), written as the tracker
    walks: the lineage's history."""

    def __init__(self):
        self.events: list[PassEvent] = []
        self.changes: dict[int, tuple[Change, ...]] = {}  # token -> its changes, pass by pass
        self.eliminated: dict[str, str] = {}  # origin -> the pass it went away in (the first)
        self.explained: dict[str, str] = {}  # eliminated origin -> FOLDED or DEAD (``Journal.explained``)

    def eliminate(self, origin_ids: Iterable[str], pass_name: str, explained: dict[str, str] | None = None) -> None:
        """Record that these origins went away in ``pass_name`` (and how, for those in
        ``explained``); an origin keeps the first pass it went away in."""
        for oid in origin_ids:
            if oid not in self.eliminated:
                self.eliminated[oid] = pass_name
                if explained and oid in explained:
                    self.explained[oid] = explained[oid]

    def record(
        self,
        step: PassStep,
        changes: Changes,
        minted: Iterable[Origin],
        eliminated: list[str],
        merged: list[tuple[str, ...]],
        explained: dict[str, str] | None = None,
    ) -> None:
        """One pass over one function (``step``): what it wrote (``changes``), the origins
        made for bindings no rule explains, the origins gone (those the function bears
        out in ``explained``), the tokens new in it that carry several origins
        (``merged``)."""
        index, pass_name, fname = step
        minted = list(minted)
        self.eliminate(eliminated, pass_name, explained)
        self.events.append(
            PassEvent(
                index=index,
                pass_name=pass_name,
                function=fname,
                rules=tuple(sorted(Counter(change.rule for change in changes).items())),
                inserted=tuple(o.id for o in minted if o.kind == INSERTED),
                unresolved=tuple(o.id for o in minted if o.kind == UNRESOLVED),
                eliminated=tuple(eliminated),
                merged=tuple(merged),
            )
        )
        history, made = self.changes, {}  # type: ignore[var-annotated]  # (callee, rule) -> Change
        for tok, _, rule, callee in changes:
            if callee is not None:
                change = made.get((callee, rule))  # immutable: one record serves every token alike
                if change is None:
                    change = made[(callee, rule)] = Change(index, pass_name, fname, callee, rule)
                history[tok] = history.get(tok, ()) + (change,)
