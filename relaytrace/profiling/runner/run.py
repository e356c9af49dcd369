"""A relaytrace bundle's ``run.py``: profile the bundle this file is in (``python run.py
--help``). Copied to the bundle's top beside this package (``runner/``): it checks that
each of the package's files is the one ``bundle.json`` seals before it imports any of
them (the package checks every other file; only this file cannot vouch for itself),
then puts the package on the path and runs it, writing no bytecode into the bundle."""

import hashlib
import json
import sys
from pathlib import Path


def unsealed(bundle: Path) -> str | None:
    """Why the runner package in ``bundle`` is not the one bundled (None: it is): a
    file of ``runner/`` missing, changed against ``bundle.json``'s seals, or anything
    there it does not seal (an extension module or a ``__pycache__`` would be imported
    in place of the sealed source)."""
    try:
        files = json.loads((bundle / "bundle.json").read_text())["files"]
        sealed = {name: seal for name, seal in files.items() if name.startswith("runner/")}
        present = {f"runner/{p.name}" for p in (bundle / "runner").iterdir()}  # any entry: a .so, a __pycache__
        for name in sorted(set(sealed) | present):
            path = bundle / name
            if name not in sealed or not path.is_file() or path.is_symlink():
                return f"{name} is not the runner bundled: copy the whole bundle again"
            if hashlib.sha256(path.read_bytes()).hexdigest() != sealed[name]["sha256"]:
                return f"{name} is not the file bundled (its sha256 differs): copy the bundle again"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"bundle.json cannot be read ({type(exc).__name__}): bundle the model again"
    return None if sealed else "bundle.json seals no runner: bundle the model again"


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    problem = unsealed(here)
    if problem:
        print(f"run.py: error: {problem}", file=sys.stderr)
        sys.exit(1)
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(here))
    from runner.cli import main  # type: ignore[import-not-found]  # the bundle's copy of this package

    sys.exit(main())
