"""Golden lineages: what each call site runs, for the zoo and the Relax demo models,
through torch and ONNX, unfused / fused / NHWC, pinned in tests/goldens/*.json.

A golden is the part of a lineage a user reads, keyed by meaning: each call site by
its run position with the origin of each of its roles (the origin's id, layer, op and
kind), each builtin site alike, what was eliminated by which pass, whom each inserted
op serves. The kernel a site runs is kept beside it as a ``note`` for the reader and
never compared: TVM numbers its PrimFuncs (``conv2d1``, ``fused_batch_norm1_relu1``)
as it pleases, and a release that numbers them otherwise changes no attribution
(``tests/test_goldens.py`` builds a model with every PrimFunc renumbered).

A change to the tracking core must leave them as they are, or change them only where
verification shows the old lineage was wrong (list each such change in the commit).
Regenerate after such a change, and review the diff:

    .venv/bin/python -m tests.goldens            # rewrite every golden
    .venv/bin/python -m tests.goldens resnet18   # only these models
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from relaytrace.build import BUILD_CONFIGS as PIPELINES

GOLDENS = Path(__file__).parent / "goldens"
ZOO = ("resnet18", "resnet50", "resnet50_v1", "vgg16", "mobilenet_v2")
RELAX = ("resnet_style", "deep_chain")
NOTE = "note"  # a site's kernel, as TVM named it: for the reader, never compared


def summarize(lineage) -> dict:
    """The user-visible content of a lineage, as plain JSON."""

    def role(r) -> dict:
        o = lineage.origins[r.origin]
        return {"role": str(r.role), "origin": r.origin, "layer": o.layer, "op": o.op, "kind": str(o.kind)}

    return {
        "sites": [
            {"position": s.position, "roles": [role(r) for r in s.roles], NOTE: s.label} for s in lineage.call_sites
        ],
        "builtins": [{"position": b.position, "builtin": b.name, "origins": list(b.origins)} for b in lineage.builtins],
        "eliminated": dict(sorted(lineage.journal.eliminated_by.items())),
        "inserted": {o.id: list(o.serves) for o in sorted(lineage.inserted(), key=lambda o: o.id)},
        "unresolved": sorted(o.id for o in lineage.unresolved()),
    }


def differences(golden: dict, lineage) -> list[str]:
    """Where ``lineage`` says otherwise than ``golden``, one line each (none: it equals
    its golden): sites by position, every other part whole; notes are not compared."""
    got = summarize(lineage)
    found = []
    for part, want in golden.items():
        if part == "sites":
            theirs, ours = _checked(want), _checked(got[part])
            found += [
                f"site at position {p}: the golden has {theirs.get(p)}, the build {ours.get(p)}"
                for p in sorted(theirs.keys() | ours.keys())
                if theirs.get(p) != ours.get(p)
            ]
        elif got.get(part) != want:
            found.append(f"{part}: the golden has {want!r}, the build {got.get(part)!r}")
    return found


def _checked(sites: list[dict]) -> dict[int, dict]:
    return {s["position"]: {k: v for k, v in s.items() if k != NOTE} for s in sites}


def dumps(summary: dict) -> str:
    """A summary as JSON with one line per site, so that a golden's diff reads by site."""

    def part(key: str, value) -> str:
        if key in ("sites", "builtins") and value:
            return f" {json.dumps(key)}: [\n" + ",\n".join(f"  {json.dumps(v)}" for v in value) + "\n ]"
        return f" {json.dumps(key)}: " + json.dumps(value, indent=1).replace("\n", "\n ")

    return "{\n" + ",\n".join(part(k, v) for k, v in summary.items()) + "\n}\n"


def imported(name: str, workdir: Path) -> dict:
    """frontend -> model for one golden model: torch and ONNX for the zoo, Relax alone
    for the Relax demo models."""
    if name in RELAX:
        from relaytrace.zoo.relax_models import deep_chain, resnet_style

        return {"relax": resnet_style(blocks=3) if name == "resnet_style" else deep_chain(40)}
    from relaytrace import zoo
    from relaytrace.frontends.onnx import export_torch_to_onnx, from_onnx
    from relaytrace.frontends.torch import from_torch

    module, example = zoo.get(name)
    path = export_torch_to_onnx(module, (example,), workdir / f"{name}.onnx")
    return {"torch": from_torch(module, (example,), name=name), "onnx": from_onnx(path, name=name)}


def golden_path(name: str, frontend: str, pipeline: str) -> Path:
    return GOLDENS / f"{name}_{frontend}_{pipeline}.json"


def golden(name: str, frontend: str, pipeline: str) -> dict:
    return json.loads(golden_path(name, frontend, pipeline).read_text())


def builds(name: str, workdir: Path):
    """(frontend, pipeline, lineage) of every build of one golden model."""
    import relaytrace

    for frontend, model in imported(name, workdir).items():
        for config, (pipeline, layout) in PIPELINES.items():
            _, lineage = relaytrace.build(model, "llvm", pipeline=pipeline, convert_layout=layout, model=name)
            yield frontend, config, lineage


def main(argv: list[str]) -> int:
    import tempfile
    import warnings

    warnings.simplefilter("ignore")
    GOLDENS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in argv or ZOO + RELAX:
            for frontend, config, lineage in builds(name, Path(tmp)):
                path = golden_path(name, frontend, config)
                path.write_text(dumps(summarize(lineage)))
                print(f"{path.name}: {lineage.verification.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
