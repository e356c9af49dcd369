"""GPU-target builds are traced here (no GPU on these machines: built, not run)."""

import pytest

import relaytrace
from relaytrace import zoo
from relaytrace.frontends.torch import from_torch


@pytest.mark.parametrize("target", ["cuda"])
def test_a_gpu_build_of_a_zoo_model_has_a_complete_verified_lineage(target):
    module, example = zoo.get("resnet18", image=64)
    try:
        executable, lineage = relaytrace.build(from_torch(module, (example,), name="resnet18"), target)
    except Exception as exc:  # code generation this wheel or machine cannot do
        pytest.skip(f"{target} code generation cannot run here: {type(exc).__name__}: {str(exc)[:200]}")
    coverage = lineage.coverage()
    assert coverage.complete, coverage
    assert lineage.verification.ok, lineage.verification.summary()
    convs = {n for n, m in module.named_modules() if type(m).__name__ == "Conv2d"}
    anchored = {lineage.origins[s.anchor].layer for s in lineage.call_sites if s.anchor}
    assert convs <= anchored  # every convolution anchors a GPU kernel of its own
    assert "cuda" in lineage.build.target
