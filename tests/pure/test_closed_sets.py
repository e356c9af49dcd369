"""A closed set is compared by its members, never by their values as strings: a member
renamed or re-worded would leave a string comparison silently false. Read from the
source (no import): every ``Name`` enum's values, and every comparison in the package
with a string constant that is one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "relaytrace"

# The bundle's runner imports nothing of relaytrace (it runs where only TVM's runtime is):
# it spells the modes and parameter kinds as the manifest holds them.
RUNTIME_ONLY = {"profiling/runner.py"}

# Words that are members' values and also something else, compared as that other thing.
ALSO = {
    "fused": "a pipeline's name (an open set: any registered pipeline)",
    "model": "a RunSpec field's name",
    "tuple": "a Relax expression's kind (tracking.ir.kind)",
    "given": "a comparison's tolerance, described",
    "torch": "from_onnx's layer_names option",
    "onnx": "from_onnx's layer_names option",
}


def _member_values() -> dict[str, str]:
    """Each value of a ``Name`` enum's member -> the enum, read from class bodies."""
    values: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "Name" for b in node.bases):
                for item in node.body:
                    if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                        if isinstance(item.value.value, str) and item.value.value:
                            values[item.value.value] = node.name
    return values


def _string_comparisons(tree) -> list[tuple[int, str]]:
    """(line, constant) of every string constant a comparison holds (``x == "a"``,
    ``x in ("a", "b")``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [
                    (node.lineno, k.value) for k in items if isinstance(k, ast.Constant) and isinstance(k.value, str)
                ]
    return found


def test_no_member_of_a_closed_set_is_compared_as_a_string():
    values = _member_values()
    assert {"timeline", "beyond", "verified", "inserted", "through data movement"} <= set(values)
    found = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        if where in RUNTIME_ONLY:
            continue
        for line, text in _string_comparisons(ast.parse(path.read_text(encoding="utf-8"))):
            if text in values and text not in ALSO:
                found.append(f"{where}:{line} compares {text!r}: use {values[text]}'s member")
    assert not found, "\n".join(found)


def test_the_check_finds_a_comparison_with_a_members_value():
    tree = ast.parse('if e.status == "beyond" or mode in ("timeline", "x"):\n    pass\n')
    assert _string_comparisons(tree) == [(1, "beyond"), (1, "timeline"), (1, "x")]


def test_a_run_json_holds_its_layout_and_precision_as_members_and_refuses_others(tmp_path):
    from relaytrace.errors import FileFormatError
    from relaytrace.model.run_spec import Layout, Precision, RunSpec

    RunSpec("m.py:make", layout="NHWC", precision="fp16").save(tmp_path)
    spec = RunSpec.load(tmp_path)
    assert spec.layout is Layout.NHWC and spec.precision is Precision.FP16
    (tmp_path / "run.json").write_text(
        (tmp_path / "run.json").read_text().replace('"NHWC"', '"nhwc"'), encoding="utf-8"
    )
    with pytest.raises(FileFormatError, match=r"run.json: layout must be one of NCHW, NHWC, not a string 'nhwc'"):
        RunSpec.load(tmp_path)
