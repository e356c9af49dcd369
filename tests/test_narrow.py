"""The search inside a fused kernel for the first op beyond the tolerance (issue 56,
item 4): a float16 overflow injected into one op of a kernel of six, found by
``compare`` with no ``--observe``, named by its op, layer and line, with the rebuilds
it took; nothing searched where nothing diverges."""

import json
from pathlib import Path

import pytest

import relaytrace
from relaytrace import compare
from relaytrace.analysis.narrow import candidates, narrow, rebuilding, spread
from relaytrace.frontends.torch import from_torch
from relaytrace.model.numerics import BEYOND, OBSERVED, WITHIN, Comparison

from .conftest import assert_holds_to_schema
from .fixtures import overflow_inside
from .fuzz import run_cli

FIXTURE = "tests/fixtures/overflow_inside.py"
LINES = {
    mark: next(n for n, line in enumerate(Path(FIXTURE).read_text().splitlines(), 1) if line.endswith(mark))
    for mark in ("# OVERFLOWS: the line the search must name", "# OVERFLOWS LATE")
}
OVERFLOW_LINE, LATE_LINE = LINES.values()  # the lines of the adds the search must name


@pytest.fixture(scope="module")
def overflowing():
    """The fixture's float16 build and its comparison (the overflow shows first at the
    residual add, the block's last op, the one its kernel writes)."""
    module, example = overflow_inside.make()
    imported = from_torch(module, (example,))
    executable, lineage = relaytrace.build(imported, "llvm", mixed_precision="float32")
    return module, example, imported, lineage, compare(executable, lineage, module, [example.numpy()])


def test_the_kernel_searched_is_the_one_that_writes_the_first_layer_beyond(overflowing):
    _, _, _, lineage, comparison = overflowing
    first = comparison.first_beyond
    assert first.layer == "block" and first.inf > 0  # the layer, not the op: the add is fused away
    site, ops = candidates(lineage, comparison)
    assert site == first.site
    kernel = [lineage.origins[o] for o in lineage.site_by_label(site).origin_ids]
    assert len([o for o in kernel if o.kind == "op"]) >= 4  # conv2d, bias add, add, subtract, relu, add
    assert [o.short_op for o in ops] == ["add", "add", "subtract", "relu", "add"]  # each node's last op
    assert [o.layer for o in ops] == ["block.conv", "block", "block", "block", "block"]
    assert ops[1].source.endswith(f"overflow_inside.py:{OVERFLOW_LINE}")


@pytest.mark.parametrize("per_rebuild", [8, 2, 1])
def test_the_overflowing_add_is_named_whatever_the_rebuilds_write_out(overflowing, per_rebuild):
    """Writing out all the kernel's ops at once, or bisecting two and one at a time,
    finds the same op: the add of the offset, after the conv found within."""
    module, example, imported, lineage, comparison = overflowing
    asked = []

    def recompare(ops):
        asked.append(ops)
        return rebuilding(imported, lineage, module, [example.numpy()], comparison)(ops)

    found = narrow(lineage, comparison, recompare, per_rebuild)
    assert found.short_op == "add" and found.op_layer == "block"
    assert found.source.endswith(f"overflow_inside.py:{OVERFLOW_LINE}")
    assert found.error.status == BEYOND and found.error.inf > 0 and found.error.reference_nan == 0
    assert lineage.origins[found.after].layer == "block.conv"  # the conv's bias add, within
    assert all(len(ops) <= per_rebuild for ops in asked) and len(found.rebuilds) == len(asked)
    assert len({o for ops in asked for o in ops}) == sum(map(len, asked))  # no op written out twice
    assert len(asked) == {8: 1, 2: 2, 1: 3}[per_rebuild]
    assert found.after in {o for p in found.rebuilds for o in p.within}
    assert found.op in {o for p in found.rebuilds for o in p.beyond}


@pytest.mark.parametrize("per_rebuild", [1, 2])
def test_a_late_overflow_is_named_after_rebuilds_that_wrote_out_earlier_ops(per_rebuild):
    """The overflow fourth of the kernel's five ops searched: bisecting, the rebuilds
    write out ops before it first; each rebuild marks the module as the user gave it
    (a rebuild that kept the last one's marks would write out other ops)."""
    module, example = overflow_inside.late()
    imported = from_torch(module, (example,))
    executable, lineage = relaytrace.build(imported, "llvm", mixed_precision="float32")
    comparison = compare(executable, lineage, module, [example.numpy()])
    found = narrow(
        lineage, comparison, rebuilding(imported, lineage, module, [example.numpy()], comparison), per_rebuild
    )
    assert (found.short_op, found.op_layer) == ("add", "block") and found.source.endswith(f":{LATE_LINE}")
    assert lineage.origins[found.after].short_op == "subtract" and not found.note  # nothing left out
    assert len(found.rebuilds) == {1: 3, 2: 2}[per_rebuild]
    assert lineage.origins[found.op].index > lineage.origins[found.rebuilds[0].within[0]].index  # an earlier op first


def test_an_unfused_build_is_searched_on_its_own_kernels_without_a_rebuild(tmp_path):
    """Unfused, each op runs in a kernel of its own, which writes its value: the search
    reads the ops there, and names the add though the layer beyond is the block's last."""
    code, stdout, err = run_cli(
        ["compare", f"{FIXTURE}:make", "--precision", "fp16", "--pipeline", "unfused", "--out", tmp_path / "o"]
    )
    assert code == 0, err
    found = Comparison.load(tmp_path / "o" / "compare.json").divergence
    assert (found.short_op, found.source.split(":")[-1]) == ("add", str(OVERFLOW_LINE))
    assert found.rebuilds == () and found.read_here and "rebuild" not in err
    assert "read from the build itself" in stdout


def test_cli_compare_names_the_op_its_line_and_the_rebuilds(tmp_path):
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(
        ["compare", f"{FIXTURE}:make", "--precision", "fp16", "--observe", "block.conv", "--out", out]
    )
    assert code == 0, err
    said = next(line for line in stdout.splitlines() if line.startswith("first op beyond the tolerance, in"))
    assert f"add of block at {Path(FIXTURE).resolve()}:{OVERFLOW_LINE}" in said
    assert "1 rebuild writing out 4 of the 5 ops' values" in said and "rebuild 1: writing out 4 of 5" in err
    data = json.loads((out / "compare.json").read_text())
    assert_holds_to_schema(data, "compare.json")
    saved = Comparison.load(out / "compare.json")
    assert saved.divergence.short_op == "add" and saved.divergence.source.endswith(f":{OVERFLOW_LINE}")
    conv = next(e for e in saved.layers if e.layer == "block.conv")  # --observe in float16 (it crashed before)
    assert conv.status == WITHIN and conv.route == OBSERVED
    code, stdout, err = run_cli(["compare", f"{FIXTURE}:make", "--precision", "fp16", "--no-search"])
    assert code == 0 and "first op beyond" not in stdout and "rebuild" not in err
    assert "first layer beyond the tolerance: block " in stdout
    for bad, says in ((["--per-rebuild", "0"], "--per-rebuild"), (["--no-search", "--per-rebuild", "2"], "give one")):
        code, _, err = run_cli(["compare", f"{FIXTURE}:make", *bad])
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_a_clean_float16_build_searches_nothing():
    code, stdout, err = run_cli(["compare", f"{FIXTURE}:clean", "--precision", "fp16"])
    assert code == 0, err
    assert "no layer beyond the tolerance" in stdout and "first op beyond" not in stdout and "rebuild" not in err


def test_spread_cuts_the_ops_in_question_evenly():
    ops = [f"op{i}" for i in range(9)]
    assert spread(ops[:3], 4) == tuple(ops[:3])
    assert spread(ops, 2) == ("op3", "op6")
    assert spread(ops, 1) == ("op4",)
    assert len(set(spread(ops, 8))) == 8


def test_a_rebuild_that_could_not_be_the_builds_is_refused_and_compare_keeps_its_answer(overflowing):
    """A value written out between a conv and its batch norm would keep FoldBatchnormToConv2D
    from folding: a build that folded is not rebuilt so, and says why."""
    import attrs

    from relaytrace.analysis.observe import build_observed
    from relaytrace.errors import RelaytraceError

    _, _, imported, lineage, _ = overflowing
    folded = attrs.evolve(lineage.build.options, fold_batch_norm=True)
    with pytest.raises(RelaytraceError, match="cannot fold batch norms as the build did"):
        build_observed(imported, folded, "llvm", at=[0])
