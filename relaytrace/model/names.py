"""The closed sets of names the saved records hold: ``Name``, the str Enum they are made of.

Why an Enum that is a str: one definition of the values a field may hold, which the
JSON reader checks (``jsonio``) and a type checker sees, while every file, output and
comparison stays as it was: a member is equal to, hashed, formatted and saved as its
value (``Kind.OP == "op"``, ``f"{Kind.OP}"`` is ``op``, JSON ``"op"``).
"""

from __future__ import annotations

from enum import Enum


class Name(str, Enum):
    """A str Enum whose members behave as their values everywhere but ``repr``."""

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)
