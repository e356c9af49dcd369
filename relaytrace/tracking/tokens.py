"""Tokens: the values of the program as the passes see them, and the origins each carries.

A token is an int standing for one value; it outlives passes, since a binding a pass
rewrote is given the token of the binding it came from (the tracker decides which).
This table only stores: the origins of each token, the token of each var and constant
(by object handle), and *canonical* tokens: a layout change, or a fused group's output,
carries the value of another token, and keys compare canonical tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import reader
from .reader import CONST, VAR


class Tokens:
    """The token table of one traced build. Handles of distinct live objects differ; the
    tracker keeps every object whose handle is here alive."""

    def __init__(self):
        self.origins: list[tuple[str, ...]] = []  # token -> its origin ids, sorted
        self.of_handle: dict[int, int] = {}  # var or constant handle -> token
        # token -> the token whose value it carries. Flat: only a new token is aliased,
        # to a canonical one (``alias``).
        self.canon: dict[int, int] = {}

    def new(self, origins: Iterable[str]) -> int:
        """A new token carrying ``origins`` (kept once each, sorted)."""
        self.origins.append(tuple(sorted(set(origins))))  # tuples of str: not GC-tracked
        return len(self.origins) - 1

    def union(self, tokens: Iterable[int]) -> frozenset[str]:
        """The origins of several tokens together."""
        return frozenset().union(*(self.origins[t] for t in tokens))

    def alias(self, new: int, tok: int) -> None:
        """``new`` carries the value of ``tok``."""
        self.canon[new] = self.canon.get(tok, tok)

    def canonical(self, tok: int) -> int:
        """The token whose value ``tok`` carries; ``tok`` itself when it carries its own."""
        return self.canon.get(tok, tok)

    def of(self, handle: int) -> int | None:
        """The token of a var (or a constant seen before); None for one never bound."""
        return self.of_handle.get(handle)

    def raw(self, kind: reader.AtomKind, handle: int) -> int | None:
        """The token of an argument atom as it is (a constant seen first gets one)."""
        if kind == VAR:
            return self.of_handle.get(handle)
        if kind == CONST:
            return self.constant(handle)
        return None

    def resolve(self, kind: reader.AtomKind, handle: int) -> int | None:
        """An argument atom's canonical token (a constant seen first gets one)."""
        tok = self.raw(kind, handle)
        return None if tok is None else self.canon.get(tok, tok)

    def constant(self, handle: int) -> int:
        """The token of a constant by handle; one seen first gets a new token without origins."""
        tok = self.of_handle.get(handle)
        if tok is None:
            tok = self.of_handle[handle] = self.new(())
        return tok

    def arguments(self, call: reader.CallView, canonical: bool = True) -> list[int | None]:
        """The token of each of a call's own arguments (tuple fields left out), canonical
        unless asked otherwise; None for one that carries no token."""
        toks = [self.of_handle.get(a.handle) for a in call.atoms if not a.field]
        return [self.canon.get(t, t) if t is not None else None for t in toks] if canonical else toks

    def var_inputs(self, call: reader.CallView) -> tuple[int, ...]:
        """Canonical tokens of a call's var arguments (tuple fields included), constants left out."""
        toks = (self.of_handle.get(a.handle) for a in call.atoms if a.kind == VAR)
        return tuple(self.canon.get(t, t) for t in toks if t is not None)
