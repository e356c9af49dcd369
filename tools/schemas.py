"""Write the JSON Schema of each file relaytrace saves into docs/schemas/, as
``relaytrace.schemas.saved_files`` makes them from the records; ``--check`` only
says whether the written ones are current (tests/test_schemas.py holds them to it).

    .venv/bin/python tools/schemas.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from relaytrace.schemas import saved_files

FOLDER = Path(__file__).resolve().parent.parent / "docs" / "schemas"


def schema_path(file: str) -> Path:
    """Where the schema of a saved ``file`` (``lineage.json``, ``report.html``) is written:
    ``lineage.schema.json``, ``report.schema.json``."""
    return FOLDER / f"{file.split('.')[0]}.schema.json"


def text(schema: dict) -> str:
    return json.dumps(schema, indent=1) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a schema is not current")
    args = parser.parse_args(argv)
    stale = []
    for file, schema in saved_files().items():
        path = schema_path(file)
        if not path.is_file() or path.read_text() != text(schema):
            stale.append(path)
            if not args.check:
                path.write_text(text(schema))
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'}: {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
