"""What a binding no rule explains is: a part of an op, an inserted op, or unresolved.

A pass that leaves a binding no rule traces to an earlier value has made something new.
It is a *part* of an op when it is a new PrimFunc call whose only consumer is an op the
pass lowered in place (a legalization into several PrimFuncs); else *inserted* when it
only moves data (``ops.is_data_movement``: a layout transform, a cast), computes
shapes (``ops.is_shape_computation``: VMShapeLower's ``shape_func``) or computes from
constants alone (a weight a pass rescales, which FoldConstant folds at build time),
otherwise *unresolved*. An inserted or unresolved binding gets an origin of its own, attributed
to the model ops it serves and marked with the pass. Explicit op tables decide; names
of vars never do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from attrs import frozen

from ..model import ops
from ..model.origin import INSERTED, OP, UNRESOLVED, Origin
from . import facts, reader
from .tokens import Tokens

if TYPE_CHECKING:
    from .tracker import Walk

IDENTITY, PART, NEW = "identity", "part", "new"


class Rewrite(NamedTuple):
    """One binding a pass wrote into a function, as the walk accounted for it: its
    token, its position, the rule that explained it (``IDENTITY``, a rule's name,
    ``PART``, ``NEW``), its callee (None for an alias, tuple or projection)."""

    token: int
    position: int
    rule: str
    callee: str | None


Changes = list[Rewrite]


@frozen
class NewOps:
    """The verdict on one pass's new bindings in one function."""

    parts: dict[int, int]  # token of a part -> token of the op it is a part of
    minted: dict[int, Origin]  # token of an inserted or unresolved binding -> its new origin


def classify(walk: Walk, tokens: Tokens, origins: dict[str, Origin], fname: str, pass_name: str) -> NewOps:
    """Judge the bindings of ``walk.new`` ((token, callee), in binding order) that a pass
    wrote into function ``fname`` (view ``walk.d``; ``walk.changes`` all it wrote). Reads
    ``tokens`` and ``origins``; changes neither."""
    new, changes, d = walk.new, walk.changes, walk.d
    uses, args_of = _links(changes, d, tokens)
    parts = _parts_of_lowered_ops(new, changes, uses)
    pending = {tok: callee for tok, callee in new if tok not in parts}
    rewritten = {tok for tok, _, _, _ in changes}

    search = _Search(pending, rewritten, uses, args_of, lambda tok: tokens.origins[parts.get(tok, tok)], origins)
    minted: dict[int, Origin] = {}
    taken = set(origins)
    constant = _of_constants(changes, d, tokens, set(pending))
    for tok, callee in pending.items():
        # whom a shape function serves is read from the IR's heap slots after the build (``follow``)
        shapes = ops.is_shape_computation(callee)
        serves = [] if shapes else search.serves(tok, set())
        kind = (
            INSERTED
            if (ops.is_data_movement(callee) or ops.is_shape_computation(callee) or tok in constant)
            else UNRESOLVED
        )
        layer = origins[serves[0]].layer if serves else f"{fname}.{ops.short_op(callee)}"
        oid = _fresh_id(f"{kind}:{pass_name}:{ops.short_op(callee)}@{serves[0] if serves else fname}", taken)
        taken.add(oid)
        minted[tok] = Origin(
            id=oid,
            layer=layer,
            op=callee,
            function=fname,
            index=-1,
            kind=kind,
            pass_name=pass_name,
            serves=tuple(serves),
        )
    return NewOps(parts, minted)


def _links(changes: Changes, d, tokens: Tokens) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Consumers and producers among the tokens of the bindings a pass wrote."""
    uses: dict[int, list[int]] = {}
    args_of: dict[int, list[int]] = {}
    for tok, position, _, _ in changes:
        made = d.call(position)
        args = made.arguments() if made is not None else [d.value(position)]
        args_of[tok] = [t for t in (tokens.raw(a.kind, a.handle) for a in args) if t is not None]
        for t in args_of[tok]:
            uses.setdefault(t, []).append(tok)
    return uses, args_of


def _of_constants(changes: Changes, d, tokens: Tokens, pending: set[int]) -> set[int]:
    """The new bindings (``pending``, in ``changes``' binding order) that are calls whose
    every var argument is such a binding: made of constants alone."""
    found: set[int] = set()
    for tok, position, _, _ in changes:
        made = d.call(position) if tok in pending else None
        if made is not None and all(
            tokens.of_handle.get(a.handle) in found for a in made.atoms if a.kind == reader.VAR
        ):
            found.add(tok)
    return found


def _parts_of_lowered_ops(new, changes: Changes, uses) -> dict[int, int]:
    """The new PrimFunc calls that are parts of an op this pass lowered in place
    (``facts.lowered_parts``)."""
    lowered = {
        tok for tok, _, rule, callee in changes if rule == IDENTITY and callee is not None and ops.is_prim_func(callee)
    }
    candidates = [tok for tok, callee in new if ops.is_prim_func(callee) and not ops.is_data_movement(callee)]
    return facts.lowered_parts(candidates, uses, lowered.__contains__)


@frozen
class _Search:
    """The bindings one pass wrote into one function, linked: those new (``pending``:
    token -> callee), those it rewrote, each one's consumers (``uses``) and producers
    (``args_of``), and the origins a binding carries (``origins_of``, of ``origins``)."""

    pending: dict[int, str]
    rewritten: set[int]
    uses: dict[int, list[int]]
    args_of: dict[int, list[int]]
    origins_of: Callable[[int], tuple[str, ...]]
    origins: dict[str, Origin]

    def serves(self, tok: int, seen: set[int]) -> list[str]:
        """The model ops an inserted binding exists for: the neighbours this pass rewrote
        (consumers first), else its consumers, else its producers; a neighbour that is
        new too passes on the ops it serves. ``seen``: the tokens this search has
        visited, each once (a new neighbour's answer does not depend on the side it was
        reached from), so one search costs the bindings the pass wrote, not the paths
        between them."""
        seen.add(tok)
        for only_rewritten in (True, False):
            for side in (self.uses.get(tok, []), self.args_of.get(tok, [])):
                out: list[str] = []
                for other in side:
                    if other in seen or (only_rewritten and other not in self.rewritten):
                        continue
                    if other in self.pending:
                        out.extend(self.serves(other, seen))
                    else:
                        out.extend(o for o in sorted(self.origins_of(other)) if self.origins[o].kind == OP)
                if out:
                    return list(dict.fromkeys(out))
        return []


def _fresh_id(base: str, taken: set[str]) -> str:
    oid, n = base, 0
    while oid in taken:
        n += 1
        oid = f"{base}#{n}"
    return oid
