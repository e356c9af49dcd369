"""The seeded fuzz suite (tests/fuzz.py): a few hundred mutated artifacts, legacy
pastes and command lines, every promise kept. tools/fuzz.py runs thousands."""

import pytest

from tests.fuzz import artifact_cases, legacy_cases, option_cases


@pytest.fixture
def source(tiny_out):
    return tiny_out


def _kept(cases):
    cases = list(cases)
    broken = [(what, problem) for what, problem in cases if problem]
    assert cases and not broken, broken[:5]


def test_mutated_artifacts_keep_every_promise(source, tmp_path):
    _kept(artifact_cases(source, tmp_path, seed=17, count=300))


def test_mutated_legacy_pastes_keep_every_promise(tmp_path):
    _kept(legacy_cases(tmp_path, seed=17, count=300))


def test_bad_command_lines_keep_every_promise(source, tmp_path):
    _kept(option_cases(source, tmp_path, seed=17, count=80))
