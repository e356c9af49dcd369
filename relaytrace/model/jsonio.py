"""Schema-checked JSON files, written atomically: the one way the data layer saves."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import LineageFormatError


def check_schema(data, schema: str, what: str) -> None:
    if not isinstance(data, dict) or data.get("schema") != schema:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise LineageFormatError(
            f"not a relaytrace {what} of schema {schema!r} (found {found!r}); "
            f"write it with {what.capitalize()}.save or `relaytrace profile`"
        )


def tuples(value):
    """JSON lists back to tuples, all the way down; records (NamedTuples) stay records."""
    if type(value) in (list, tuple):
        return tuple(tuples(v) for v in value)
    return value


def make_record(cls, data: dict):
    """An attrs or NamedTuple record from its JSON dict, lists turned back into tuples."""
    return cls(**{k: tuples(v) for k, v in data.items()})


def write_json(path, data, overwrite: bool) -> Path:
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (CLI: --force) to replace it")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    return path


def read_json(path, what: str):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} file at {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise LineageFormatError(f"{path} is not valid JSON (line {exc.lineno}): {exc.msg}") from exc
