"""The seeded fuzz suite (tests/fuzz.py): a few hundred mutated artifacts, legacy
pastes, command lines, hostile names through every text output and output directory
layouts under --force, every promise kept. tools/fuzz.py runs thousands."""

import pytest

from tests.fuzz import (
    artifact_cases,
    bundle_cases,
    layout_cases,
    legacy_cases,
    make_bundle,
    make_source,
    name_cases,
    option_cases,
)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("fuzz") / "run", "tests/fixtures/tiny_model.py:make")


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


def test_tampered_bundles_keep_every_promise(tmp_path):
    """Issue 54: a bundle's files tampered with (bundle.json mutated, a sealed file cut
    short, changed, emptied, removed or linked out) and run by its run.py."""
    bundle = make_bundle(tmp_path / "bundle", "tests/fixtures/tiny_model.py:make")
    work = tmp_path / "work"
    work.mkdir()
    _kept(bundle_cases(bundle, work, seed=17, count=16))
