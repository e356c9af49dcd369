"""Files written atomically, and schema-checked JSON: the one way relaytrace writes a file."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import os
import re
import tempfile
import types
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from ..errors import FileFormatError


def check_schema(data, schema: str, what: str, where: str = "", made_by: str = "") -> None:
    """``data`` is a JSON object of ``schema``; ``where`` (the file) named otherwise,
    with what writes such a file (``made_by``, default ``WHAT.save or relaytrace
    profile``)."""
    if not isinstance(data, dict) or data.get("schema") != schema:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise FileFormatError(
            f"{where + ' is ' if where else ''}not a relaytrace {what} of schema {schema!r} (found {found!r}); "
            f"write it with {made_by or what.capitalize() + '.save or `relaytrace profile`'}"
        )


def migrate(
    data, migrations: Mapping[str, Callable[[dict, str], dict]], schema: str, what: str, where: str, made_by: str = ""
):
    """``data`` (a saved file's JSON) as ``schema``'s, through each of ``migrations``
    (an older schema -> the pure function that makes its data the next one's) from its
    version on; ``data`` itself is not changed. One table per format: the lineage's,
    the profile's, the comparison's. A file of no known version is a
    ``FileFormatError`` naming ``where`` (``check_schema``)."""
    while isinstance(data, dict) and isinstance(data.get("schema"), str) and data["schema"] in migrations:
        data = migrations[data["schema"]](data, where)
    check_schema(data, schema, what, where, made_by)
    return data


def tuples(value):
    """JSON lists back to tuples, all the way down (inside objects too); records
    (NamedTuples) stay records."""
    if type(value) in (list, tuple):
        return tuple([tuples(v) if type(v) in (list, tuple, dict) else v for v in value])
    if type(value) is dict:
        return {k: tuples(v) if type(v) in (list, tuple, dict) else v for k, v in value.items()}
    return value


def make_record(cls, data, where: str):
    """An attrs or NamedTuple record from its JSON object, lists turned back into
    tuples, after checking every field against the record's annotations (``check``):
    no unknown or missing field, every value of its type. ``where`` names the record
    in the error (``kernels['k'][0]``), which is a ``FileFormatError``."""
    if not record_is_valid(cls, data):
        _explain_record(cls, data, where)
    made = _field_converters(cls)
    return cls(**{k: v if (make := made[k]) is None else make(v) for k, v in data.items()})


def _field_converters(cls) -> dict[str, Callable[[Any], Any] | None]:
    """field -> its ``converter``, made once per record class."""
    found = _CONVERTERS.get(cls)
    if found is None:
        found = _CONVERTERS[cls] = {name: converter(kind) for name, (kind, _) in record_fields(cls).items()}
    return found


_CONVERTERS: dict[type, dict[str, Callable[[Any], Any] | None]] = {}


@functools.cache
def converter(kind) -> Callable[[Any], Any] | None:
    """What makes the value of annotated type ``kind`` from its JSON value, once that
    is checked: its lists as tuples, its ``Name`` strings as members (``enum_reader``),
    as deep as the type holds them; None where the JSON value is the value (a scalar, a
    dict of scalars), so that reading it costs no call. A type that does not say what
    it holds (a bare ``tuple``, ``object``) is read by ``tuples``, all the way down.
    Made once per type: a lineage holds thousands of records, each field read by it."""
    if kind in _SCALARS:  # str, int, float, bool, None
        return None
    name = enum_reader(kind)
    if name is not None:
        return name
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [converter(option) for option in args if option is not type(None)]
        if all(c is None for c in inner):
            return None
        if len(inner) == 1 and (one := inner[0]) is not None:
            return lambda v: None if v is None else one(v)
        return tuples
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = converter(args[0])
        return tuple if item is None else (lambda v: tuple([item(x) for x in v]))
    if origin is tuple and args and args != ((),):
        items = tuple(converter(a) for a in args)
        if all(c is None for c in items):
            return tuple
        return lambda v: tuple([x if c is None else c(x) for c, x in zip(items, v)])
    if origin is dict and len(args) == 2:
        value = converter(args[1])
        return None if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    return tuples


def enum_reader(kind) -> Callable[[object], object] | None:
    """What reads a JSON value of annotated type ``kind`` as a member of its ``Name``
    Enum (``kind`` an Enum, or an Enum or None), or a dict or tuple of them as such
    (``dict[str, Enum]``, ``tuple[Enum, ...]``); None for any other type."""
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], Enum):
        values = args[1]
        return lambda v: {key: values(item) for key, item in v.items()}  # type: ignore[attr-defined]
    if (
        origin is tuple
        and len(args) == 2
        and args[1] is Ellipsis
        and isinstance(args[0], type)
        and issubclass(args[0], Enum)
    ):
        items = args[0]
        return lambda v: tuple(items(item) for item in v)  # type: ignore[attr-defined]
    options = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else ()
    enums = [o for o in options if isinstance(o, type) and issubclass(o, Enum)]
    if len(enums) == 1 and set(options) == {enums[0], type(None)}:
        member = enums[0]
        return lambda v: None if v is None else member(v)
    return None


def _explain_record(cls, data, where: str) -> None:
    """Raise the error that says why ``data`` is no ``cls`` record."""
    if not isinstance(data, dict):
        raise FileFormatError(f"{where} must be an object, not {_json_kind(data)}")
    fields = record_fields(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise FileFormatError(f"{where} has an unknown field {unknown[0]!r}")
    for name, (kind, required) in fields.items():
        if name in data:
            check(data[name], kind, member(where, name))
        elif required:
            raise FileFormatError(f"{where} has no field {name!r}")


def check(value, kind, where: str) -> None:
    """``value`` (read from JSON) is of the annotated type ``kind``: str, int, float
    (finite), bool, a str Enum (one of its values), a tuple (a JSON list) of such, an
    optional or union of such, or a dict of str to such; anything else is taken as it
    is. A ``FileFormatError`` naming ``where`` otherwise."""
    if not is_valid(kind)(value):
        _explain(value, kind, where)


_SCALARS: dict = {
    type(None): lambda v: v is None,
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    str: lambda v: isinstance(v, str),
}


def _explain(value, kind, where: str) -> None:
    """Raise the error that says where in ``value`` it is not of type ``kind``."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        _explain_union(value, typing.get_args(kind), where)
    elif isinstance(kind, type) and issubclass(kind, Enum):
        if not isinstance(value, str) or value not in _values(kind):
            raise FileFormatError(f"{where} must be one of {', '.join(m.value for m in kind)}, not {_json_kind(value)}")
    elif kind in _SCALARS:
        if not _SCALARS[kind](value):
            raise FileFormatError(f"{where} must be {_KIND_NAMES[kind]}, not {_json_kind(value)}")
    elif kind is tuple or origin is tuple:
        _explain_list(value, typing.get_args(kind), where)
    elif kind is dict or origin is dict:
        if not isinstance(value, dict):
            raise FileFormatError(f"{where} must be an object, not {_json_kind(value)}")
        args = typing.get_args(kind)
        for key, item in value.items():
            check(item, args[1] if args else typing.Any, f"{where}[{key!r}]")


def _explain_union(value, options: tuple, where: str) -> None:
    """Return when ``value`` is of one of ``options``, else raise naming them all."""
    for option in options:
        try:
            return check(value, option, where)
        except FileFormatError:
            continue
    names = " or ".join(_KIND_NAMES.get(option, getattr(option, "__name__", str(option))) for option in options)
    raise FileFormatError(f"{where} must be {names}, not {_json_kind(value)}")


def _explain_list(value, args: tuple, where: str) -> None:
    """A JSON list for a tuple: ``tuple[X, ...]`` each item an X; ``tuple[X, Y]`` exactly
    those items; a bare ``tuple`` any list."""
    if not isinstance(value, list):
        raise FileFormatError(f"{where} must be a list, not {_json_kind(value)}")
    if len(args) == 2 and args[1] is Ellipsis:
        for i, item in enumerate(value):
            check(item, args[0], f"{where}[{i}]")
    elif args and args != ((),):
        if len(value) != len(args):
            raise FileFormatError(f"{where} must have {len(args)} items, not {len(value)}")
        for i, (item, option) in enumerate(zip(value, args)):
            check(item, option, f"{where}[{i}]")


# Checking a lineage of an LLM asks hundreds of thousands of values their type: each
# annotation is turned once into a predicate (``is_valid``), and the slow walk that
# names what is wrong (``_explain``) runs only on a value the predicate refused.


@functools.cache
def is_valid(kind):
    """A predicate: is a JSON value of the annotated type ``kind`` (as ``check`` says)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        options = tuple(is_valid(option) for option in args)
        return lambda v: any(ok(v) for ok in options)
    if isinstance(kind, type) and issubclass(kind, Enum):
        values = _values(kind)
        return lambda v: isinstance(v, str) and v in values
    if kind is type(None):
        return lambda v: v is None
    if kind is bool:
        return lambda v: isinstance(v, bool)
    if kind is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if kind is float:
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if kind is str:
        return lambda v: isinstance(v, str)
    if kind is tuple or origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = is_valid(args[0])
            return lambda v: isinstance(v, list) and all(map(item, v))
        if args and args != ((),):
            items = tuple(is_valid(option) for option in args)
            return lambda v: isinstance(v, list) and len(v) == len(items) and all(ok(i) for ok, i in zip(items, v))
        return lambda v: isinstance(v, list)
    if kind is dict or origin is dict:
        item = is_valid(args[1]) if args else (lambda v: True)
        return lambda v: isinstance(v, dict) and all(map(item, v.values()))
    return lambda v: True


def record_is_valid(cls, data) -> bool:
    """``make_record``'s checks as one predicate (made once per record class)."""
    found = _VALIDATORS.get(cls)
    if found is None:
        predicates = {name: is_valid(kind) for name, (kind, _) in record_fields(cls).items()}
        required = frozenset(name for name, (_, needed) in record_fields(cls).items() if needed)

        def found(data) -> bool:
            if not isinstance(data, dict):
                return False
            for name, value in data.items():
                ok = predicates.get(name)
                if ok is None or not ok(value):
                    return False
            return required <= data.keys()

        _VALIDATORS[cls] = found
    return found(data)


_VALIDATORS: dict[type, Callable[[object], bool]] = {}


def _values(kind: type[Enum]) -> frozenset:
    return frozenset(m.value for m in kind)


_KIND_NAMES = {
    float: "a finite number",
    int: "an integer",
    str: "a string",
    bool: "true or false",
    type(None): "null",
    tuple: "a list",
    dict: "an object",
}


def items_of(data, key: str, kind, where: str):
    """``data[key]`` checked to be a list (``kind`` list) or an object (``kind`` dict).
    ``where``: the file (``lineage.json``) or a field in it (``lineage.json: kernels``)."""
    if not isinstance(data, dict) or key not in data:
        raise FileFormatError(f"{where} has no field {key!r}")
    value = data[key]
    if not isinstance(value, kind):
        wanted = "a list" if kind is list else "an object"
        raise FileFormatError(f"{member(where, key)} must be {wanted}, not {_json_kind(value)}")
    return value


def member(where: str, name: str) -> str:
    """The path of field ``name`` of the value at ``where``: ``FILE: name`` below a file,
    ``...path.name`` deeper."""
    return f"{where}.{name}" if ": " in where else f"{where}: {name}"


def _json_kind(value) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value}"
    kinds = {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    text = kinds.get(type(value), type(value).__name__)
    return f"{text} {value!r}" if isinstance(value, (str, int, float)) and len(repr(value)) < 40 else text


_FIELDS: dict[type, dict[str, tuple[object, bool]]] = {}


def record_fields(cls) -> dict[str, tuple[object, bool]]:
    """name -> (annotated type, required) of an attrs or NamedTuple record class, each
    field by the name its record is made with and saved under."""
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        defaults = getattr(cls, "_field_defaults", None)
        if defaults is not None:  # a NamedTuple
            found = {name: (hints.get(name), name not in defaults) for name in cls._fields}
        else:
            import attrs

            found = {  # by the name the record is made with (``alias``: ``memory`` for ``_memory``)
                f.alias: (hints.get(f.name), f.default is attrs.NOTHING)
                for f in attrs.fields(cls)
                if f.init and not f.metadata.get("apart")
            }
        _FIELDS[cls] = found
    return _FIELDS[cls]


def write_json(path, data, overwrite: bool) -> Path:
    """Write ``data`` to ``path`` as indented JSON, whole or not at all
    (``write_atomic``); return the path."""
    return write_atomic(path, json.dumps(data, indent=1), overwrite)


def write_atomic(path, data: str | bytes, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` whole or not at all: into a temporary file beside it,
    then moved in. A file that exists is kept unless ``overwrite``, also one that
    appeared while this was writing; a failure (a full disk) leaves no temporary file
    and the old file as it was."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; replace it with --force (API: overwrite=True)")
    prefix = f".{path.name}."
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise_naming_target(exc, path.parent, prefix, path)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~current_umask())  # as open() would have made it, not mkstemp's 0600
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the file appeared meanwhile: nothing is overwritten
            os.unlink(tmp)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise_naming_target(exc, path.parent, prefix, path)
        raise
    return path


def raise_naming_target(exc: OSError, parent, prefix: str, target) -> None:
    """Raise ``exc`` again, as the same error on ``target`` when it names a staging
    file or directory (``parent/PREFIX...``) or a file inside one: an error names the
    file or directory the user asked for, never a temporary name. Any other error is
    raised as it is."""
    filename = exc.filename
    if exc.errno is None or exc.strerror is None or filename is None:
        raise exc
    try:
        parts = Path(os.path.abspath(os.fsdecode(filename))).relative_to(os.path.abspath(parent)).parts
    except (TypeError, ValueError):
        raise exc from None
    if not parts or not parts[0].startswith(prefix):
        raise exc
    raise OSError(exc.errno, exc.strerror, str(Path(target, *parts[1:]))) from exc


def current_umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def read_json(path, what: str):
    """The JSON value of the ``what`` file at ``path``; a file that is no UTF-8 JSON, or
    nests too deep, or holds a number too long for Python to read, is a one-line
    ``FileFormatError`` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} file at {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is fine
        data = json.loads(text)
        if _SURROGATE_ESCAPE.search(text):  # \ud800 alone is valid JSON but no text any output can hold
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        return data
    except UnicodeEncodeError:
        raise FileFormatError(
            f"{path} holds a lone surrogate escape (\\ud800 to \\udfff not in a pair) in a "
            f"string: no name can be written so; was it edited or corrupted?"
        ) from None
    except UnicodeDecodeError:
        raise FileFormatError(f"{path} is not a UTF-8 text file: is it a relaytrace {what} file?") from None
    except json.JSONDecodeError as exc:
        raise FileFormatError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}; was it cut short or edited?"
        ) from None
    except RecursionError:
        raise FileFormatError(f"{path} nests too deep to be a relaytrace {what} file") from None
    except ValueError:  # Python's limit on int-string conversion: no figure relaytrace writes is that long
        raise FileFormatError(
            f"{path} holds a number too long (thousands of digits) to be in a relaytrace "
            f"{what} file: was it edited or corrupted?"
        ) from None


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic collector paused for a block that makes many small objects and
    keeps most of them: tracking a build, reading a lineage back. Each collection they
    would set off walks every object alive (TVM's and torch's large heaps too), and the
    collections of one such block cost more than the block; what they keep is mostly
    atomic tuples and records, which hold no cycles. One pause around all of it (a
    pause per step let a collection of everything the step made run at its end);
    re-entrant: the collector is turned on again only by the block that turned it off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


Made = TypeVar("Made")


def read_record(path, what: str, make: Callable[[Any, str], Made]) -> Made:
    """``make(value, where)`` of the JSON value of the ``what`` file at ``path``
    (``read_json``) and the path as text, with the collector paused from the parse on:
    the parsed value is as many dicts and lists again as the records made of it, and
    the collections its parse set off walked every object of the process (in a build's
    process, TVM's and torch's): the 80-block decoder's lineage loaded there in about
    twice its time in a fresh process."""
    with gc_paused():
        return make(read_json(path, what), str(path))
