"""Files written atomically, and schema-checked JSON: the one way relaytrace writes a file."""

from __future__ import annotations

import json
import os
import tempfile
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
    return write_atomic(path, json.dumps(data, indent=1), overwrite)


def write_atomic(path, data: str | bytes, overwrite: bool = False) -> Path:
    """Write ``data`` to ``path`` whole or not at all: into a temporary file beside it,
    then moved in. A file that exists is kept unless ``overwrite``, also one that
    appeared while this was writing; a failure (a full disk) leaves no temporary file
    and the old file as it was."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (CLI: --force) to replace it")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the file appeared meanwhile: nothing is overwritten
            os.unlink(tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_json(path, what: str):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} file at {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise LineageFormatError(f"{path} is not valid JSON (line {exc.lineno}): {exc.msg}") from exc
