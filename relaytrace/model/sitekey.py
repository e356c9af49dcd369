"""The one identity of a kernel call site, shared by lineage, profile, report,
renderers, the CLI and the saved files.

A call site is the ``call``-th run-time call of ``kernel`` in one run of the entry
function ``entry``. Its text forms are made and read here: ``label`` (what every
table, graph and ``query --kernel`` shows: ``kernel#call``, or ``entry:kernel#call``
outside ``main``, so that the sites of several entries never share one) and
``in_entry`` (``kernel#call``: how profile.json, which holds one entry's runs, keys
its sites; also what a remote profile's progress lines print, which are about one
entry). A site's ``scope``, the subfunction calls it runs in, is a tuple of ``Frame``s;
its text form (``block#0/inner#1``, what lineage.json saves) is made and read here too.
"""

from __future__ import annotations

from typing import NamedTuple

MAIN = "main"


class SiteKey(NamedTuple):
    """``(entry, kernel, call)``. A NamedTuple: made for every timed call of a profile,
    hashed as a dict key, compared by value."""

    entry: str
    kernel: str
    call: int

    @property
    def label(self) -> str:
        """``kernel#call`` in ``main``, ``entry:kernel#call`` elsewhere."""
        return self.in_entry if self.entry == MAIN else f"{self.entry}:{self.in_entry}"

    @property
    def in_entry(self) -> str:
        """``kernel#call``: the key within one entry's profile."""
        return f"{self.kernel}#{self.call}"

    @classmethod
    def parse(cls, text: str, entry: str = MAIN) -> SiteKey:
        """The key ``text`` names: ``kernel#call`` (a site of ``entry``) or
        ``entry:kernel#call``. ``ValueError`` (naming both forms) for anything else: no
        ``#``, a call that is not a whole number, an empty kernel."""
        named, sep, call = text.rpartition("#")
        head, colon, kernel = named.rpartition(":")
        if not sep or not kernel or not (call.isascii() and call.isdigit()) or (colon and not head):
            raise ValueError(f"{text!r} is not a call site: give KERNEL#CALL or ENTRY:KERNEL#CALL (e.g. matmul#0)")
        return cls(head if colon else entry, kernel, int(call))


class Frame(NamedTuple):
    """One call of a Relax subfunction in a run of an entry: its ``call``-th call of
    ``function`` (numbered by ``Calls``, as kernels are)."""

    function: str
    call: int

    @property
    def text(self) -> str:
        return f"{self.function}#{self.call}"


def builtin_keys(builtins) -> dict[int, SiteKey]:
    """Each VM builtin call's identity, by its position (``BuiltinSite``s): the ``n``-th
    call of that builtin in one run of its entry, numbered by ``Calls`` in run order as
    kernel calls are (``vm.builtin.reshape#2``, ``decode:vm.builtin.attention#0``)."""
    calls: dict[str, Calls] = {}
    return {
        b.position: calls.setdefault(b.function, Calls(b.function)).key(b.name)
        for b in sorted(builtins, key=lambda b: b.position)
    }


def scope_text(scope: tuple[Frame, ...]) -> str:
    """``block#0/inner#1``; "" for an entry's own body."""
    return "/".join(f.text for f in scope)


def parse_scope(text: str) -> tuple[Frame, ...]:
    """The frames ``scope_text`` wrote; ``ValueError`` naming the form for anything else."""
    frames = []
    for part in text.split("/") if text else ():
        function, sep, call = part.rpartition("#")
        if not sep or not function or not (call.isascii() and call.isdigit()):
            raise ValueError(f"{text!r} is not a scope: give FUNCTION#CALL, nested with / (e.g. block#0/inner#1)")
        frames.append(Frame(function, int(call)))
    return tuple(frames)


class Calls:
    """The numbering ``SiteKey.call`` is: the calls of each kernel one run of ``entry``
    makes, in run order, each kernel's from 0. Every place that walks a run or a program
    in run order (the tracker's call sites, the memory plans, the comparison's taps)
    numbers its calls with one of these, so that they name the same sites (the bundle's
    runner, which imports nothing of relaytrace, numbers them the same way itself)."""

    def __init__(self, entry: str = MAIN):
        self.entry = entry
        self._made: dict[str, int] = {}

    def key(self, kernel: str) -> SiteKey:
        """The site of this call of ``kernel``: its next call's number."""
        call = self._made.get(kernel, 0)
        self._made[kernel] = call + 1
        return SiteKey(self.entry, kernel, call)
