"""The one identity of a kernel call site, shared by lineage, profile, report,
renderers, the CLI and the saved files.

A call site is the ``call``-th run-time call of ``kernel`` in one run of the entry
function ``entry``. Its text forms are made and read here: ``label`` (what every
table, graph and ``query --kernel`` shows: ``kernel#call``, or ``entry:kernel#call``
outside ``main``, so that the sites of several entries never share one) and
``in_entry`` (``kernel#call``: how profile.json, which holds one entry's runs, keys
its sites; also what a remote profile's progress lines print, which are about one
entry)."""

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
