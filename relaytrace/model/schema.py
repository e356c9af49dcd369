"""JSON Schemas of the saved records, made from the records themselves.

Every file relaytrace writes through the codec (``lineage.json``, ``code.json``,
``profile.json``, ``run.json``, ``comparison.json``, ``provenance.json``) is the
``encode`` of one record; ``json_schema(cls, title)`` is the JSON Schema (draft
2020-12) of that form, read from the same annotations ``decode`` checks against, so the schema a
tool validates with and the reader relaytrace loads with cannot drift apart. A field
saved in a form of its own (``codec.Codec``) says its form through the codec's
``schema``. ``relaytrace.schemas`` names the files and pins each one's version.
"""

from __future__ import annotations

import types
import typing
from enum import Enum
from typing import Any

import attrs

from .codec import is_record
from .jsonio import record_fields

DIALECT = "https://json-schema.org/draft/2020-12/schema"

_SCALARS: dict[Any, dict] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def json_schema(cls: type, title: str) -> dict:
    """The JSON Schema of ``encode(record)`` for a record of class ``cls``: each record
    class it holds once, under ``$defs`` by its name, referred to where it appears."""
    defs: dict[str, dict] = {}
    top = _Schemas(defs).of(cls)
    return {"$schema": DIALECT, "title": title, **top, "$defs": dict(sorted(defs.items()))}


class _Schemas:
    """The schema of each annotated type, records collected into ``defs`` as they are met."""

    def __init__(self, defs: dict[str, dict]):
        self.defs = defs
        self.names: dict[type, str] = {}  # a record class -> its name in defs (module-qualified when taken)

    def of(self, kind) -> dict:
        """The schema of a value of annotated type ``kind`` as ``encode`` writes it."""
        if kind in _SCALARS:
            return dict(_SCALARS[kind])
        if kind is Any or kind is None:
            return {}
        if isinstance(kind, type) and issubclass(kind, Enum):
            return {"enum": [m.value for m in kind]}
        if is_record(kind):
            return self._record(kind)
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if kind is tuple or origin is tuple:
            return self._array(args)
        if kind is dict or origin is dict:
            return {"type": "object", "additionalProperties": self.of(args[1]) if args else {}}
        raise TypeError(f"no JSON Schema for {kind!r}")

    def _array(self, args: tuple) -> dict:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.of(args[0])}
        if not args or args == ((),):
            return {"type": "array"}
        n = len(args)
        return {"type": "array", "prefixItems": [self.of(a) for a in args], "minItems": n, "maxItems": n}

    def _record(self, cls) -> dict:
        name = self.names.setdefault(cls, cls.__name__ if cls.__name__ not in self.defs else _qualified(cls))
        if name not in self.defs:
            self.defs[name] = {}  # a record that holds itself refers to its entry while it is made
            saved_as = attrs.fields(cls) if attrs.has(cls) else ()
            codecs = {f.alias: f.metadata["codec"] for f in saved_as if "codec" in f.metadata}
            fields = record_fields(cls)
            self.defs[name] = {
                "type": "object",
                "properties": {
                    field: codecs[field].schema(self.of) if field in codecs else self.of(kind)
                    for field, (kind, _) in fields.items()
                },
                "required": [field for field, (_, required) in fields.items() if required],
                "additionalProperties": False,
            }
        return {"$ref": f"#/$defs/{name}"}


def _qualified(cls) -> str:
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
