"""A bundle's files checked before any is loaded: ``bundle.json``'s fields of their kinds
(``FIELDS``), each file it names sealed (size and sha256) and inside the bundle."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import BundleError
from .kvcache import serving_problem

BUNDLE_SCHEMA = "relaytrace.bundle/3"  # /2: the peak kernels (peaks.so); /3: each file sealed ("files")


FIELDS = {  # what run.py reads of bundle.json, each checked for its kind before the run
    "library": str,
    "runtime": list,
    "device": str,
    "entry": str,
    "inputs": list,
    "kernels": dict,
    "library_calls": list,
    "subfunctions": list,
    "builtins": list,
    "layers": dict,
    "profile": dict,
    "peaks": dict,
    "files": dict,
}


def check_seal(bundle: Path, manifest: dict) -> None:
    """Refuse, in one ``BundleError`` line, a bundle whose files are not the ones
    ``relaytrace bundle`` wrote, before any of them is loaded: each of ``FIELDS`` of
    its kind, a served step's counts servable (``serving_problem``), every file
    ``bundle.json`` names and every file it seals as sealed (``check_files``: a copy cut
    short would die by SIGBUS when loaded)."""
    for key, kind in FIELDS.items():
        if not isinstance(manifest.get(key), kind):
            raise BundleError(f"bundle.json's {key!r} is missing or no {kind.__name__}: bundle the model again")
    named = [manifest["library"], *manifest["runtime"], manifest["peaks"]["library"]]
    named += [name for param in manifest["inputs"] for name in param["files"]]  # a damaged one: KeyError
    problem = serving_problem(manifest["serve"]) if manifest.get("serve") else None
    if problem:
        raise BundleError(problem)
    check_files(bundle, manifest["files"], list(dict.fromkeys([*named, *manifest["files"]])))


def check_files(bundle: Path, files: dict, names: list) -> None:
    """Refuse, in one ``BundleError`` line, any of ``names`` that is not sealed in
    ``files`` (``bundle.json``'s ``{path: {bytes, sha256}}``) or not the file sealed:
    missing, outside the bundle once links are resolved, of another size or sha256."""
    root = bundle.resolve()
    for name in names:
        seal = files.get(name) if isinstance(name, str) else None
        if not isinstance(seal, dict):
            raise BundleError(f"bundle.json names {name!r}, not among its sealed files: bundle the model again")
        path = inside(root, name)
        if not path.is_file():
            raise BundleError(f"{name} is missing from the bundle: copy the whole bundle again")
        size = path.stat().st_size
        if size != seal["bytes"]:
            raise BundleError(
                f"{name} has {size} bytes, not the {seal['bytes']} bundled (a copy cut short?): copy the bundle again"
            )
        if file_sha256(path) != seal["sha256"]:
            raise BundleError(f"{name} is not the file bundled (its sha256 differs): copy the bundle again")


def inside(root: Path, name) -> Path:
    """``root / name`` resolved, for a ``name`` that is a relative path without ``..``
    whose resolved path (links followed) stays inside ``root``; else a ``BundleError``."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise BundleError(f"bundle.json names {name!r}: a bundle's files are relative paths inside it")
    path = (root / name).resolve()
    if path != root and root not in path.parents:
        raise BundleError(f"{name} leads out of the bundle (a link to {path}): a bundle's files are inside it")
    return path


def file_sha256(path: Path) -> str:
    """The sha256 of the file at ``path``, as hex (what ``bundle.json`` seals)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
