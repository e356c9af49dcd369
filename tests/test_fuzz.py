"""The seeded fuzz suite (tests/fuzz.py): a few hundred mutated artifacts, legacy
pastes, command lines, hostile names through every text output and output directory
layouts under --force, every promise kept. tools/fuzz.py runs thousands."""

import shutil

import pytest

from tests.fuzz import artifact_cases, layout_cases, legacy_cases, name_cases, option_cases, run_cli


@pytest.fixture(scope="module")
def source(tiny_out, tmp_path_factory):
    """The tiny model's profile outputs, with the compare.json of `relaytrace compare`
    beside them (render's html reads it)."""
    out = tmp_path_factory.mktemp("fuzz") / "run"
    shutil.copytree(tiny_out, out)
    code, _, err = run_cli(["--quiet", "compare", "tests/fixtures/tiny_model.py:make", "--out", out.parent / "cmp"])
    assert code == 0, err
    shutil.copy(out.parent / "cmp" / "compare.json", out / "compare.json")
    return out


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


def test_hostile_names_are_text_in_every_text_output():
    _kept(name_cases(seed=17, count=400))


def test_force_never_loses_a_users_file(tmp_path):
    _kept(layout_cases(tmp_path, seed=17, count=300))
