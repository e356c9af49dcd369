"""A closed set is compared by its members, never by their values as strings: a member
renamed or re-worded would leave a string comparison silently false. Read from the
source (no import): every ``Name`` enum's values, and every comparison in the package
with a string constant that is one of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "relaytrace"

# The bundle's runner imports nothing of relaytrace (it runs where only TVM's runtime is):
# it spells the modes and parameter kinds as the manifest holds them.
RUNTIME_ONLY = "profiling/runner/"

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
        if where.startswith(RUNTIME_ONLY):
            continue
        for line, text in _string_comparisons(ast.parse(path.read_text(encoding="utf-8"))):
            if text in values and text not in ALSO:
                found.append(f"{where}:{line} compares {text!r}: use {values[text]}'s member")
    assert not found, "\n".join(found)


# The page's scripts: a closed set's member is read from ``NAMES`` (``render.html.PAGE_NAMES``,
# mirrored into the page from the enums), never spelled; the vendored libraries are not ours.
SCRIPTS = [p for p in (PACKAGE / "render" / "assets").glob("*.js") if not p.name.endswith(".min.js")]
ALSO_JS = {"object": "an answer of JavaScript's typeof"}
_JS_COMPARISON = re.compile(
    r"""(?:===|!==|==|!=)\s*(['"`])([^'"`]*)\1|(['"`])([^'"`]*)\3\s*(?:===|!==|==|!=)|case\s+(['"`])([^'"`]*)\5"""
)


def _js_string_comparisons(text: str) -> list[tuple[int, str]]:
    """(line, literal) of every string literal compared in a script (``x === 'a'``,
    ``case 'a'``)."""
    return [
        (text[: m.start()].count("\n") + 1, m.group(2) or m.group(4) or m.group(6) or "")
        for m in _JS_COMPARISON.finditer(text)
    ]


def test_no_script_of_the_page_compares_a_members_value_as_a_string():
    values = _member_values()
    assert SCRIPTS and {"report.js", "code.js", "pure.js"} <= {p.name for p in SCRIPTS}
    found = [
        f"{path.name}:{line} compares {text!r}: use NAMES.{values[text]}'s member"
        for path in SCRIPTS
        for line, text in _js_string_comparisons(path.read_text(encoding="utf-8"))
        if text in values and text not in ALSO_JS
    ]
    assert not found, "\n".join(found)
    assert _js_string_comparisons("if (o.kind === 'inserted' || 'op' == k) {}\nswitch (s) { case \"verified\": }") == [
        (1, "inserted"),
        (1, "op"),
        (2, "verified"),
    ]


def test_each_member_a_script_reads_from_names_is_one_the_page_mirrors():
    from relaytrace.render.html import PAGE_NAMES, names_script

    mirrored = {e.__name__: {m.name for m in e} for e in PAGE_NAMES}
    read = {
        (enum, member)
        for path in SCRIPTS
        for enum, member in re.findall(r"\bNAMES\.(\w+)\.(\w+)", path.read_text(encoding="utf-8"))
    }
    assert ("Kind", "INSERTED") in read
    assert all(member in mirrored.get(enum, ()) for enum, member in read), read
    assert names_script().startswith("const NAMES = {") and '"INSERTED": "inserted"' in names_script()


def test_the_check_finds_a_comparison_with_a_members_value():
    tree = ast.parse('if e.status == "beyond" or mode in ("timeline", "x"):\n    pass\n')
    assert _string_comparisons(tree) == [(1, "beyond"), (1, "timeline"), (1, "x")]


def test_a_run_json_holds_its_layout_precision_and_policy_as_members_and_refuses_others(tmp_path):
    from relaytrace.errors import FileFormatError
    from relaytrace.model.run_spec import Layout, PolicyName, Precision, RunSpec

    RunSpec("m.py:make", layout="NHWC", precision="fp16", policy="split").save(tmp_path)
    spec = RunSpec.load(tmp_path)
    assert spec.layout is Layout.NHWC and spec.precision is Precision.FP16 and spec.policy is PolicyName.SPLIT
    saved = (tmp_path / "run.json").read_text()
    for old, new, error in (
        ('"NHWC"', '"nhwc"', r"layout must be one of NCHW, NHWC, not a string 'nhwc'"),
        ('"split"', '"spilt"', r"policy must be one of anchor, split, measured, not a string 'spilt'"),
    ):
        (tmp_path / "run.json").write_text(saved.replace(old, new), encoding="utf-8")
        with pytest.raises(FileFormatError, match=rf"run.json: {error}"):
            RunSpec.load(tmp_path)
