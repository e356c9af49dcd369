"""Golden lineages: what each call site runs, for the zoo and the Relax demo models,
through torch and ONNX, unfused / fused / NHWC, pinned in tests/goldens/*.json.

A golden is the part of a lineage a user reads: each call site in run order with its
origins and roles, the builtins, what was eliminated by which pass, whom each
inserted op serves. A change to the tracking core must leave them as they are, or
change them only where verification shows the old lineage was wrong (list each such
change in the commit). Regenerate after such a change, and review the diff:

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


def summarize(lineage) -> dict:
    """The user-visible content of a lineage, as plain JSON."""
    return {
        "sites": [f"{s.label}: " + ", ".join(f"{r.role}:{r.origin}" for r in s.roles) for s in lineage.call_sites],
        "builtins": [f"{b.name}: {', '.join(b.origins)}" for b in lineage.builtins],
        "eliminated": dict(sorted(lineage.journal.eliminated_by.items())),
        "inserted": {o.id: list(o.serves) for o in sorted(lineage.inserted(), key=lambda o: o.id)},
        "unresolved": sorted(o.id for o in lineage.unresolved()),
    }


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
                path.write_text(json.dumps(summarize(lineage), indent=1) + "\n")
                print(f"{path.name}: {lineage.verification.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
