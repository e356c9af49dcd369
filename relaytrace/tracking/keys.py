"""The value-key index: what a value computes, whatever its var, to the tokens that did.

A key is ``(callee, canonical tokens of the vars and constants among its arguments and
their tuples' fields)``: ``call_tir(F, args)`` and the lowered ``F(args, out)`` have one
key, and a layout change a pass inserted is transparent (it shares its input's
canonical token). Tuples and their fields have keys too (``("tuple", parts)``,
``("item", tuple, index)``), so ``(a, b)[0]`` is ``a``. The value-key rule and fused
-group replays look keys up; one value's origins go to one binding (``match``).
"""

from __future__ import annotations

from . import reader
from .tokens import Tokens


class ValueKeys:
    """Value key -> the tokens of the values computed so: what ``ValueKey`` matches a
    rewritten binding against."""

    def __init__(self, tokens: Tokens):
        self.tokens = tokens
        self.table: dict[tuple, tuple[int, ...]] = {}  # key -> tokens (tuples of ints: not GC-tracked)
        self._deferred: dict[int, tuple[reader.FunctionView, int, int]] = {}  # var handle -> (view, position, token)

    def key(self, call: reader.CallView) -> tuple:
        """The value key of a call: its callee and the canonical tokens of its argument
        atoms (a constant seen first gets one; an atom that carries none is left out)."""
        tokens = self.tokens
        canon, toks = tokens.canon, tuple(map(tokens.of_handle.get, call.handles))  # hot: at C speed
        if None not in toks:
            return (call.callee, tuple(map(canon.get, toks, toks)))  # type: ignore[arg-type]  # no None in toks
        resolved = []
        for atom, tok in zip(call.atoms, toks):
            if tok is None:  # a constant seen first, a tuple, another atom
                tok = tokens.resolve(atom.kind, atom.handle)
            if tok is not None:
                resolved.append(canon.get(tok, tok))
        return (call.callee, tuple(resolved))

    def add(self, key: tuple, tok: int) -> None:
        """Register ``tok`` as a value computed as ``key`` says, once."""
        bucket = self.table.get(key, ())
        if tok not in bucket:
            self.table[key] = bucket + (tok,)

    def match(self, key: tuple, claimed: set[int], held=None) -> int | None:
        """The token with this key that no binding of this walk claimed (never hand one
        value's origins to two bindings): of several, the first the function held
        before the pass (``held()``, asked only then), else the first. The key leaves
        out what is no atom (a reshape's target shape), so a value the pass found
        equal may also fit an op an earlier pass fused away; the one the function
        still held is the one its later bindings name."""
        fits = [tok for tok in self.table.get(key, ()) if tok not in claimed]
        if len(fits) > 1 and held is not None:
            before = held()
            for tok in fits:
                if tok in before:
                    return tok
        return fits[0] if fits else None

    def defer(self, var: int, d: reader.FunctionView, position: int, tok: int) -> None:
        """Register the key of a value identity carried later, at the first look-up:
        most are superseded by the next in-place rewrite before any binding looks keys
        up. A later value of the same var replaces it."""
        self._deferred[var] = (d, position, tok)

    def flush(self) -> None:
        """Register the deferred keys; call before any look-up."""
        if self._deferred:
            for d, position, tok in self._deferred.values():
                made = d.call(position)
                assert made is not None  # deferred only for a call
                self.add(self.key(made), tok)
            self._deferred = {}

    def has_items(self, tup: int) -> bool:
        """Whether the first field of the tuple value ``tup`` was taken (a binding read it)."""
        return ("item", self.tokens.canonical(tup), 0) in self.table

    def item(self, tup: int, index: int) -> int:
        """The token of one field of a tuple value: one per (tuple, index), so the three
        outputs of a split are three values to the rules, each carrying the origins of
        what made the tuple."""
        key = ("item", self.tokens.canonical(tup), index)
        found = self.table.get(key)
        if found:
            return found[0]
        tok = self.table[key] = (self.tokens.new(self.tokens.origins[tup]),)
        return tok[0]

    def set_item(self, tup: int, index: int, tok: int) -> None:
        """Field ``index`` of tuple ``tup`` is the value ``tok``."""
        self.table[("item", tup, index)] = (tok,)

    def tuple_of(self, parts: list[int | None]) -> int:
        """The token of a tuple literal of these tokens (None: a field with none); its
        fields are the parts."""
        key = ("tuple", tuple(self.tokens.canonical(p) for p in parts if p is not None))
        found = self.table.get(key)
        if found:
            return found[0]
        tok = self.tokens.new(self.tokens.union(p for p in parts if p is not None))
        self.table[key] = (tok,)
        for i, part in enumerate(parts):
            if part is not None:
                self.set_item(tok, i, part)
        return tok
