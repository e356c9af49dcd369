"""Records to JSON and back, driven by their annotations: the one reader and writer of
every saved record (lineage, profile, comparison).

A record is an attrs class or a NamedTuple. ``encode`` writes one as an object of its
fields; ``decode`` reads it back from its annotated type, checking every value on the
way (``jsonio.check``): a field that holds other records (a lineage's call sites,
their roles) is read by the same rules, all the way down. A field whose saved form is
not its own structure (origins saved as a list and held by id, a history saved as one
table of distinct changes) names a ``Codec`` in its attrs metadata (``codec_field``).
Errors are ``FileFormatError`` naming the file and the field's path in it
(``lineage.json: kernels['k'][0].roles[1].role``)."""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any

import attrs

from ..errors import FileFormatError
from .jsonio import (
    check,
    converter,
    is_valid,
    make_record,
    member,
    record_fields,
)

Decoder = Callable[[Any, Any], Any]  # (JSON value, path or None) -> value


@attrs.define(frozen=True)
class Codec:
    """How one field is saved when its saved form differs from its structure:
    ``encode(value) -> JSON``, ``decode(JSON, where) -> value`` (checking what it reads),
    ``schema(of) -> dict``: the JSON Schema of the saved form (``of(kind)`` gives the
    schema of an annotated type; ``model.schema``)."""

    encode: Callable[[Any], Any]
    decode: Decoder
    schema: Callable[[Callable[[Any], dict]], dict]


def codec_field(codec: Codec, **kwargs):
    """An attrs field saved and read by ``codec`` (other ``attrs.field`` arguments pass on)."""
    return attrs.field(metadata={"codec": codec}, **kwargs)


def apart_field(**kwargs):
    """An attrs field (default None) that its record's file leaves out: it is saved in a
    file of its own, and a record read back has it None."""
    return attrs.field(default=None, eq=False, repr=False, metadata={"apart": True}, **kwargs)


def encode(value):
    """A record, Enum, tuple, dict or scalar as plain JSON data: a record as an object of
    its fields (an attrs field with ``init=False`` is no saved state, and one made with
    ``apart_field`` is saved in a file of its own: both are left out), each under the
    name its record is made with (attrs' ``alias``: a private ``_memory`` read through a
    property is saved as ``memory``), its value as that property gives it."""
    if attrs.has(type(value)):
        out = {}
        for f in attrs.fields(type(value)):
            if f.init and not f.metadata.get("apart"):
                codec = f.metadata.get("codec")
                item = getattr(value, f.alias)
                out[f.alias] = codec.encode(item) if codec is not None else encode(item)
        return out
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: encode(item) for name, item in zip(value._fields, value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    return value


def decode(kind, value, where: str):
    """The value of annotated type ``kind`` that the JSON ``value`` holds, checked.
    ``where`` names it in an error: the file (``lineage.json``) or a field in it.

    Read once without naming anything (a lineage of an LLM holds tens of thousands of
    records, and a path string for each value costs more than reading it); only when
    that pass finds a fault is the value walked again, naming each path, to raise the
    error that says where."""
    read = _decoder(kind)
    try:
        return read(value, None)
    except (_Invalid, FileFormatError):
        read(value, where)
        raise FileFormatError(f"{where} could not be read") from None  # the walk raises first


class _Invalid(Exception):
    """A fault found by the fast pass, which names nothing (``decode`` walks again)."""


def is_record(kind) -> bool:
    """Whether ``kind`` is a record class: an attrs class or a NamedTuple."""
    return isinstance(kind, type) and (attrs.has(kind) or (issubclass(kind, tuple) and hasattr(kind, "_fields")))


@functools.cache
def _nests_records(kind) -> bool:
    """Whether a value of ``kind`` holds a record or a codec field somewhere below it."""
    if is_record(kind):
        return any(_nests_records(k) or is_record(k) for k, _ in record_fields(kind).values()) or (
            attrs.has(kind) and any("codec" in f.metadata for f in attrs.fields(kind))
        )
    return any(is_record(a) or _nests_records(a) for a in typing.get_args(kind) if a is not Ellipsis)


@functools.cache
def _decoder(kind) -> Decoder:
    """The decoder of one annotated type, made once: ``(value, where)`` to the value,
    ``where`` None on the fast pass (a fault raises ``_Invalid``) or the path to name in
    the ``FileFormatError`` the explaining pass raises. A record without nested
    records is checked by one predicate (``jsonio.make_record``'s); plain values are
    checked and turned back into tuples."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if is_record(kind):
        return _record_decoder(kind) if _nests_records(kind) else _leaf_decoder(kind)
    if not _nests_records(kind):
        return _plain_decoder(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"cannot decode {kind}: one record type or None only")
        inner = _decoder(options[0])
        return lambda v, where: None if v is None else inner(v, where)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _many_decoder(_decoder(args[0]), tuple)
    if origin is dict:
        return _many_decoder(_decoder(args[1]), dict)
    if origin is tuple and Ellipsis not in args:
        return _fixed_decoder(tuple(_decoder(a) for a in args))
    raise TypeError(f"cannot decode {kind}")


def _plain_decoder(kind) -> Decoder:
    """The decoder of a type that holds no record: one predicate, then its enums and
    tuples made."""
    make = converter(kind) or _same
    valid = is_valid(kind)

    def plain(v, where):
        if not valid(v):
            if where is None:
                raise _Invalid
            check(v, kind, where)
        return make(v)

    return plain


def _same(value):
    return value


def _many_decoder(item: Decoder, container: type) -> Decoder:
    """The decoder of ``tuple[X, ...]`` (``container`` tuple: a JSON list) or ``dict[K, X]``
    (``container`` dict: a JSON object) of records, ``item`` decoding each X."""
    listed = container is tuple

    def many(v, where):
        if not isinstance(v, list if listed else dict):
            _refuse(v, container, where)
        if listed:
            if where is None:
                return tuple([item(x, None) for x in v])
            return tuple(item(x, f"{where}[{i}]") for i, x in enumerate(v))
        if where is None:
            return {k: item(x, None) for k, x in v.items()}
        return {k: item(x, f"{where}[{k!r}]") for k, x in v.items()}

    return many


def _fixed_decoder(items: tuple[Decoder, ...]) -> Decoder:
    """The decoder of ``tuple[X, Y]`` holding a record (a ``(name, record)`` pair): a JSON
    list of exactly those items, each read by its own decoder."""

    def fixed(v, where):
        if not isinstance(v, list) or len(v) != len(items):
            if where is None:
                raise _Invalid
            _refuse(v, tuple, where)  # not a list
            raise FileFormatError(f"{where} must have {len(items)} items, not {len(v)}")
        return tuple(item(x, None if where is None else f"{where}[{i}]") for i, (item, x) in enumerate(zip(items, v)))

    return fixed


def _refuse(v, kind, where: str | None):
    """Raise the fault of ``v`` not being a ``kind``: ``_Invalid``, or named at ``where``."""
    if where is None:
        raise _Invalid
    check(v, kind, where)


def _leaf_decoder(cls) -> Decoder:
    """The decoder of a record whose fields hold no records: ``make_record``, which
    checks it with one predicate and names the fault only when there is one."""
    return lambda v, where: make_record(cls, v, "" if where is None else where)


def _record_decoder(cls) -> Decoder:
    """The decoder of a record with records (or codec fields) among its fields."""
    fields = record_fields(cls)
    codecs = (
        {f.alias: f.metadata["codec"] for f in attrs.fields(cls) if "codec" in f.metadata} if attrs.has(cls) else {}
    )
    readers = {name: codecs[name].decode if name in codecs else _decoder(kind) for name, (kind, _) in fields.items()}
    known = frozenset(readers)
    required = frozenset(name for name, (_, needed) in fields.items() if needed)

    def record(v, where):
        if not isinstance(v, dict):
            _refuse(v, dict, where)
        if not (v.keys() <= known and required <= v.keys()):
            if where is None:
                raise _Invalid
            unknown = sorted(set(v) - known)
            if unknown:
                raise FileFormatError(f"{where} has an unknown field {unknown[0]!r}")
            raise FileFormatError(f"{where} has no field {sorted(required - v.keys())[0]!r}")
        if where is None:
            return cls(**{name: readers[name](x, None if name not in codecs else "") for name, x in v.items()})
        return cls(**{name: readers[name](x, member(where, name)) for name, x in v.items()})

    return record
