"""Answers that were silently wrong (issue 27): each now refused, or said, in one line
naming the file, field, argument or input. Pure tests: no build, most without TVM."""

import json
from pathlib import Path

import pytest

from relaytrace.errors import LineageFormatError, RelaytraceError, UsageError
from relaytrace.failures import exit_code
from tests.fuzz import broken_promise, run_cli


def _edited(tmp_path, name, saved, edit):
    """``saved`` (an object with ``to_json``) written to tmp_path/name after ``edit``."""
    data = json.loads(json.dumps(saved.to_json()))
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# 1. a profile without an end-to-end run

def _profile():
    from relaytrace.model.profile import CallRecord, Profile

    return Profile(model="m", target="llvm", device="cpu(0)", mode="timeline", repeat=1,
                   records=(CallRecord("k", 0, 0, 0.0, 5.0, "kernel"),), e2e_us=(10.0,))


def test_a_profile_without_end_to_end_runs_is_refused_not_shown_as_zero(tmp_path):
    from relaytrace.model.profile import Profile

    assert Profile.load(_edited(tmp_path, "good.json", _profile(), lambda d: None)) == _profile()
    path = _edited(tmp_path, "profile.json", _profile(), lambda d: d.__setitem__("e2e_us", []))
    with pytest.raises(LineageFormatError, match="e2e_us is empty") as caught:
        Profile.load(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
