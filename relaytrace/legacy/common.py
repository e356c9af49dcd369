"""Shared pieces of the legacy parsers: issues with line numbers, numbers, shapes."""

from __future__ import annotations

import math
import re

from attrs import define

Shape = tuple[int, ...]


@define(frozen=True)
class Issue:
    """A line that could not be read (or read only in part); parsing went on."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


TYPOGRAPHIC = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "\uff08": "(", "\uff09": ")"})


def normalise_quotes(text: str) -> str:
    """Forum pastes turn quotes typographic; the artifacts used plain ones."""
    return text.translate(TYPOGRAPHIC)


def number(text: str) -> float:
    """``11,64,595.59`` (Indian grouping), ``271,351.60`` or ``107147.0``; a ValueError
    for anything else, ``nan`` and numbers too large for a float included."""
    value = float(text.replace(",", ""))
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]!r} is not a finite number")
    return value


def percent(part: float, total: float) -> str:
    """``part`` as a percentage of ``total``; ``n/a`` when the total is zero."""
    return f"{100 * part / total:.2f}%" if total else "n/a (total is 0)"


def shape(text: str) -> Shape:
    """The integers of ``(1, 3, 224, 224, 'float32')``; digits inside words don't count."""
    return tuple(int(d) for d in re.findall(r"(?<![\w.])-?\d+(?![\w.])", text))


_PACKED = re.compile(r"^NCHW(\d+)c$")


def unpack(shape_: Shape, layout: str | None = None) -> Shape:
    """An NCHW[x]c activation ``(N, C/x, H, W, x)`` as NCHW ``(N, C, H, W)``."""
    if len(shape_) == 5 and (layout is None or _PACKED.match(layout)):
        n, c, h, w, x = shape_
        return (n, c * x, h, w)
    return shape_


def unpack_kernel(shape_: Shape) -> Shape:
    """An OIHW[i]i[o]o kernel ``(O/o, I/i, H, W, i, o)`` as OIHW ``(O, I, H, W)``."""
    if len(shape_) == 6:
        o, i, h, w, ii, oo = shape_
        return (o * oo, i * ii, h, w)
    return shape_
