"""Every zoo model (torch and ONNX) and Relax demo model, unfused / fused / NHWC:
the lineage equals its golden (tests/goldens.py says how they are made and when they
may change) and every call site is verified against the compiled IR. A build whose
every PrimFunc TVM would have numbered otherwise equals its golden too."""

import copy

import pytest

from .conftest import move_origin
from .goldens import RELAX, ZOO, builds, differences, golden

CASES = [pytest.param(name, marks=pytest.mark.slow) for name in ZOO] + list(RELAX)


def _builds(name, workdir, request):
    """(frontend, pipeline, lineage) of every build of one golden model; resnet_style's
    are the session's (``conftest.builds``: the same model, name and pipelines)."""
    if name == "resnet_style":
        return [("relax", config, lineage) for config, (_, lineage) in request.getfixturevalue("builds").items()]
    return builds(name, workdir)


@pytest.mark.parametrize("name", CASES)
def test_lineage_equals_its_golden_and_verifies(name, tmp_path, request):
    if name in ZOO:
        pytest.importorskip("torch")
    seen = 0
    for frontend, pipeline, lineage in _builds(name, tmp_path, request):
        where = f"{name} {frontend} {pipeline}"
        cov = lineage.coverage()
        assert lineage.verification.ok and cov.complete and not cov.unverified, (
            where,
            lineage.verification.summary(),
            cov.suspect[:3],
            cov.unverified[:3],
        )
        assert differences(golden(name, frontend, pipeline), lineage) == [], where
        seen += 1
    assert seen == (3 if name in RELAX else 6)


def test_a_build_with_every_primfunc_renumbered_equals_its_golden_and_one_moved_origin_does_not(resnet_mod):
    """What a TVM release that numbers PrimFuncs otherwise would hand on: every kernel
    has another name, several the name another kernel had, and the golden still holds;
    an origin moved to another site (in the lineage, or in the golden) does not."""
    import tvm

    import relaytrace

    from .passes import renumbered_pipeline

    target = tvm.target.Target("llvm")
    _, lineage = relaytrace.build(resnet_mod, target, pipeline=renumbered_pipeline(target), model="resnet_style")
    want = golden("resnet_style", "relax", "fused")
    assert lineage.verification.ok and lineage.coverage().complete, lineage.verification.summary()
    notes = {s["position"]: s["note"] for s in want["sites"]}
    assert all(notes[s.position] != s.label for s in lineage.call_sites)
    assert {s.label for s in lineage.call_sites} & set(notes.values())  # old names that now name other kernels
    assert differences(want, lineage) == []

    first, second = lineage.call_sites[3], lineage.call_sites[5]
    moved = move_origin(lineage, first.anchor, second)
    assert [line.split(":")[0] for line in differences(want, moved)] == [
        f"site at position {first.position}",
        f"site at position {second.position}",
    ]
    edited = copy.deepcopy(want)
    edited["sites"][3]["roles"][0]["layer"] = "layer9_conv1_conv"
    assert [line.split(":")[0] for line in differences(edited, lineage)] == [f"site at position {first.position}"]
