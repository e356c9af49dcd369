"""Every zoo model (torch and ONNX) and Relax demo model, unfused / fused / NHWC:
the lineage equals its golden (tests/goldens.py says how they are made and when they
may change) and every call site is verified against the compiled IR."""

import json

import pytest

from .goldens import RELAX, ZOO, builds, golden_path, summarize

CASES = [pytest.param(name, marks=pytest.mark.slow) for name in ZOO] + list(RELAX)


@pytest.mark.parametrize("name", CASES)
def test_lineage_equals_its_golden_and_verifies(name, tmp_path):
    if name in ZOO:
        pytest.importorskip("torch")
    seen = 0
    for frontend, pipeline, lineage in builds(name, tmp_path):
        where = f"{name} {frontend} {pipeline}"
        cov = lineage.coverage()
        assert lineage.verification.ok and cov.complete and not cov.unverified, \
            (where, lineage.verification.summary(), cov.suspect[:3], cov.unverified[:3])
        golden = json.loads(golden_path(name, frontend, pipeline).read_text())
        got = summarize(lineage)
        for part in golden:  # part by part, so a failure says which
            assert got[part] == golden[part], (where, part)
        seen += 1
    assert seen == (3 if name in RELAX else 6)
