"""The TVMScript a user reads of one function, and the line TVM's printer put each of some
of its IR objects on.

The code view reads blocks, buffers and calls from the IR (``tracking.code``); only their
lines come from the text. ``script_lines`` asks the printer itself where each object went:
it prints once with every object annotated (``obj_to_annotate``) by a marker made for this
print (a random tag: no name in the model can forge one), then takes the markers out. The
printer writes a statement's annotation after it on its line (a Relax binding) or on a
comment line above it (a TIR block); both are read. A printer that stops doing either
raises ``PrinterChanged`` instead of leaving blocks without lines.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence


class PrinterChanged(RuntimeError):
    """TVM's printer did not place an annotation where ``script_lines`` reads one."""


def script_lines(func, name: str, objects: Sequence) -> tuple[str, tuple[int, ...]]:
    """(``func`` printed as ``func.script(name=name)`` prints it, the 1-based line of each
    of ``objects`` in that text, in their order). Raises ``PrinterChanged`` when the
    printer did not mark one of them, and what the printer raises."""
    tag = f"relaytrace-{secrets.token_hex(8)}"
    marked = func.script(name=name, obj_to_annotate={obj: f"{tag} {i}" for i, obj in enumerate(objects)})
    marker = re.compile(rf"(?:^\s*|  )# {tag} (\d+)$")
    kept: list[str] = []
    lines = [0] * len(objects)
    above: list[int] = []  # objects marked on a comment line: theirs is the next kept line
    for line in marked.splitlines():
        found = marker.search(line)
        if found is not None and found.start() == 0:
            above.append(int(found.group(1)))
            continue
        kept.append(line if found is None else line[: found.start()])
        for i in above + ([int(found.group(1))] if found is not None else []):
            lines[i] = len(kept)
        above = []
    missing = sum(1 for line in lines if line == 0)
    if missing:
        raise PrinterChanged(
            f"TVM's printer left {missing} of {len(objects)} objects of {name} unmarked: "
            "relaytrace cannot place them in its text (is this the TVM it supports?)"
        )
    return "\n".join(kept) + ("\n" if marked.endswith("\n") else ""), tuple(lines)
