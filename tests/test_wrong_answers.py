"""Answers that were silently wrong (issue 27): each now refused, or said, in one line
naming the file, field, argument or input. Pure tests: no build, most without TVM."""

import json
from pathlib import Path

import numpy as np
import pytest

from relaytrace.errors import LineageFormatError, RelaytraceError, UsageError
from relaytrace.failures import exit_code
from tests.fuzz import COMPARISONS, broken_promise, run_cli


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

    return Profile(
        model="m",
        target="llvm",
        device="cpu(0)",
        mode="timeline",
        repeat=1,
        records=(CallRecord("k", 0, 0, 0.0, 5.0, "kernel"),),
        e2e_us=(10.0,),
    )


def test_a_profile_without_end_to_end_runs_is_refused_not_shown_as_zero(tmp_path):
    from relaytrace.model.profile import Profile

    assert Profile.load(_edited(tmp_path, "good.json", _profile(), lambda d: None)) == _profile()
    path = _edited(tmp_path, "profile.json", _profile(), lambda d: d.__setitem__("e2e_us", []))
    with pytest.raises(LineageFormatError, match="e2e_us is empty") as caught:
        Profile.load(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


# 2. impossible numbers in compare.json


def _comparison():
    from relaytrace.model.numerics import Comparison, LayerError

    layer = LayerError(
        layer="conv1",
        status="within",
        site="k#0",
        shape=(1, 4),
        max_abs=0.1,
        max_rel=0.01,
        tolerance_ratio=0.5,
        cosine=0.99,
    )
    return Comparison("m", "main", 1e-4, 1e-4, "as built", (layer,))


@pytest.mark.parametrize("edit, field", COMPARISONS)
def test_impossible_numbers_in_a_comparison_are_refused_naming_file_and_field(tmp_path, edit, field):
    from relaytrace.model.numerics import Comparison

    assert Comparison.load(_edited(tmp_path, "good.json", _comparison(), lambda d: None)) == _comparison()
    path = _edited(tmp_path, "compare.json", _comparison(), edit)
    with pytest.raises(LineageFormatError, match=field.replace("[", r"\[").replace("]", r"\]")) as caught:
        Comparison.load(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_a_layer_with_no_relative_error_or_cosine_is_shown_as_such():
    """A reference of all zeros has no relative error, and a layer may have no cosine:
    the report's pane said so with a TypeError."""
    import attrs

    from relaytrace.render.page import _errors

    comparison = _comparison()
    comparison = attrs.evolve(comparison, layers=(attrs.evolve(comparison.layers[0], max_rel=None, cosine=None),))
    assert "max abs error 0.1, max rel n/a, cosine n/a" in dict(_errors(comparison))["conv1"].text


# 3. data-flow edges naming origins the lineage does not have


def test_edges_naming_an_unknown_origin_are_refused(tmp_path):
    from relaytrace.model.build_facts import BuildFacts
    from relaytrace.model.lineage import Lineage
    from relaytrace.model.origin import Origin

    origins = {o: Origin(o, f"layer_{o}", "relax.add", "main", i) for i, o in enumerate(("a", "b"))}
    lineage = Lineage(BuildFacts("m", "llvm", "fused"), origins, {}, edges=(("a", "b"),))
    assert Lineage.load(_edited(tmp_path, "good.json", lineage, lambda d: None)).edges == (("a", "b"),)
    path = _edited(tmp_path, "lineage.json", lineage, lambda d: d["edges"].append(["b", "ghost"]))
    with pytest.raises(LineageFormatError, match=r"edges\[1\] names origin 'ghost', which the lineage does not have"):
        Lineage.load(path)


# 4. profile(number=0, repeat=0)


@pytest.mark.parametrize(
    "options, name",
    [
        ({"number": 0}, "number"),
        ({"number": -2}, "number"),
        ({"repeat": 0}, "repeat"),
        ({"number": 1.5}, "number"),
        ({"repeat": np.int64(3), "number": 0}, "number"),
    ],
)
def test_profile_refuses_counts_below_one_before_any_work(options, name):
    from relaytrace.profiling.vm import profile

    with pytest.raises(RelaytraceError, match=rf"^profile\({name}=\) must be a whole number from 1") as caught:
        profile(None, None, [], mode="isolated", **options)  # nothing else is looked at
    assert "\n" not in str(caught.value)


# 5. a number too long for Python's int-string limit


def test_a_number_of_thousands_of_digits_is_a_format_error_naming_the_file(tmp_path):
    from relaytrace.model.jsonio import read_json
    from relaytrace.model.profile import Profile

    path = tmp_path / "profile.json"
    path.write_text('{"schema": "relaytrace.profile/1", "repeat": ' + "9" * 5000 + "}")
    with pytest.raises(LineageFormatError, match="a number too long") as caught:
        Profile.load(path)
    assert str(path) in str(caught.value)
    with pytest.raises(LineageFormatError, match="a number too long"):
        read_json(path, "profile")


# 6. an input shape of the wrong rank


def test_a_shape_of_another_rank_than_the_input_is_refused():
    from relaytrace.model.shapes import check_rank

    check_rank("x", (1, 3, 224, 224), (2, 3, 64, 64), "m")
    check_rank("x", ("...",), (2,), "m")
    with pytest.raises(
        UsageError,
        match=r"the shape 1x3 given for input x of m has rank 2, but x has rank 4 "
        r"\(nx3x224x224\): give 4 dims, e.g. --input-shape x:1x3x224x224$",
    ):
        check_rank("x", ("n", 3, 224, 224), (1, 3), "m")


def test_an_onnx_input_shape_of_the_wrong_rank_is_refused_naming_the_input(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from relaytrace.frontends.loader import load

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(
        UsageError,
        match="input x of ONNX model .* has rank 2, but x has rank 4 "
        r"\(1x3x8x8\): give 4 dims",
    ):
        load(str(path), shapes=[("x", (1, 3))], with_inputs=False)
    code, _, err = run_cli(["profile", path, "--input-shape", "x:1x3", "--out", tmp_path / "out"])
    assert code == 2 and "has rank 2, but x has rank 4" in err.strip().splitlines()[-1], err
    assert not (tmp_path / "out").exists()


# 7. a factory that calls sys.exit


@pytest.mark.parametrize(
    "source, words",
    [
        (
            "import sys\ndef make():\n    sys.exit(3)\n",
            "the factory make in {path} called sys.exit(3): a factory returns",
        ),
        ("import sys\ndef make():\n    sys.exit()\n", "the factory make in {path} called sys.exit():"),
        ("import sys\nsys.exit('bye')\n", "{path} called sys.exit('bye') while relaytrace imported it"),
    ],
)
def test_a_factory_calling_sys_exit_is_one_line_and_exit_code_1(tmp_path, source, words):
    from relaytrace.frontends.loader import load

    path = tmp_path / "file.py"
    path.write_text(source)
    with pytest.raises(RelaytraceError) as caught:
        load(f"{path}:make")
    assert words.format(path=path) in str(caught.value)
    assert exit_code(caught.value)[0] == 1
    code, _, err = run_cli(["--quiet", "profile", f"{path}:make", "--out", tmp_path / "out"])
    assert broken_promise(code, err) is None and code == 1, err
    assert words.format(path=path) in err.strip().splitlines()[-1]


# 8. write errors name the file asked for, not a staging name


def _names(line: str, path) -> bool:
    """The CLI's line for an OS error names ``path`` (then maybe a hint), no temporary."""
    return (line.endswith(f": {path}") or f": {path} (" in line) and ".tmp" not in line


def test_a_failed_write_names_the_file_asked_for_not_its_temporary(tmp_path):
    from relaytrace.model.jsonio import write_atomic

    target = tmp_path / "nope" / "a.svg"
    with pytest.raises(FileNotFoundError) as caught:
        write_atomic(target, "<svg/>")
    line = exit_code(caught.value)[1]
    assert _names(line, target), line
    (tmp_path / "b.svg").mkdir()  # a directory in the way of the final rename
    with pytest.raises(OSError) as caught:
        write_atomic(tmp_path / "b.svg", "<svg/>", overwrite=True)
    line = exit_code(caught.value)[1]
    assert _names(line, tmp_path / "b.svg"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.svg"]


def test_a_failed_write_of_an_output_directory_names_it_not_the_staging_directory(tmp_path):
    from relaytrace.jobs import _staged

    def write(staging: Path) -> None:
        (staging / "lineage.json").mkdir()
        (staging / "lineage.json").write_text("{}")  # IsADirectoryError on the staged file

    out = tmp_path / "out"
    with pytest.raises(IsADirectoryError) as caught:
        _staged(out, write, overwrite=False)
    line = exit_code(caught.value)[1]
    assert _names(line, out / "lineage.json") and "relaytrace-" not in line, line
    assert list(tmp_path.iterdir()) == []
