"""Relax as people compile it: symbolic shapes, several entry functions, calls between
Relax functions, torch's dynamic shapes. Real builds, real runs."""

import json

import numpy as np
import pytest
import torch

import relaytrace
from relaytrace.analysis.report import make_report
from relaytrace.errors import FileFormatError, RelaytraceError
from relaytrace.frontends.torch import from_torch
from relaytrace.model.lineage import Lineage
from relaytrace.model.origin import INSERTED, OP
from relaytrace.model.shapes import bind
from relaytrace.model.sitekey import Frame

from .fixtures.relax_modules import CallsBlockTwice, NoMainWithMatchCast, SharedSymbol, TwoEntries


def _inputs(n, *shapes):
    rng = np.random.default_rng(n)
    return [rng.standard_normal(s).astype("float32") for s in shapes]


def _assert_layers_sum_to_kernels(lineage, prof):
    report = make_report(lineage, prof)
    assert sum(r.us for r in report.layers) == pytest.approx(prof.kernel_us, rel=1e-9)
    return report


def test_two_entries_with_a_symbolic_dim_are_traced_and_profiled_at_any_size():
    executable, lineage = relaytrace.build(TwoEntries, "llvm")
    assert lineage.coverage().complete, lineage.coverage()
    assert set(lineage.build.entries) == {"main", "decode"}
    assert lineage.build.entries["main"][0] == ("x", ("n", 64), "float32")
    ops = {
        entry: {lineage.origins[o].short_op for s in lineage.call_sites if s.function == entry for o in s.origin_ids}
        for entry in lineage.build.entries
    }
    assert {"matmul", "relu", "add"} <= ops["main"] and "sigmoid" not in ops["main"]
    assert {"matmul", "sigmoid"} <= ops["decode"] and "relu" not in ops["decode"]
    # VMShapeLower's shape function sizes main's output: inserted, serving the matmul's kernel
    (shape_origin,) = [o for o in lineage.origins.values() if o.op == "shape_func"]
    assert shape_origin.kind == INSERTED and shape_origin.pass_name == "VMShapeLower"
    assert {lineage.origins[o].short_op for o in shape_origin.serves} >= {"matmul"}
    for n in (3, 9):
        prof = relaytrace.profile(executable, lineage, _inputs(n, (n, 64), (64, 64)), repeat=2)
        assert prof.entry == "main" and prof.inputs[0] == ("x", (n, 64), "float32")
        report = _assert_layers_sum_to_kernels(lineage, prof)
        layers = {r.layer for r in report.layers}
        # decode's layers are not main's; a shape function sizing several layers is a row of its own
        assert "proj" in layers and layers - {"main.shape_func"} <= {"proj", "act", "out"}
    prof = relaytrace.profile(executable, lineage, _inputs(0, (1, 64), (64, 64)), repeat=2, entry="decode")
    report = _assert_layers_sum_to_kernels(lineage, prof)
    assert report.layers and all(r.layer.startswith("decode.") for r in report.layers)
    assert report.coverage.complete
    from relaytrace.analysis import diff

    rows = diff.compare(lineage, prof, lineage, prof)  # decode's sites are labelled decode:KERNEL#N
    assert rows and all(r.within_noise for r in rows if r.spread_us)


def test_inputs_that_do_not_fit_the_symbolic_signature_are_refused_naming_the_problem():
    executable, lineage = relaytrace.build(SharedSymbol, "llvm")
    with pytest.raises(RelaytraceError, match=r"symbol n is 3 in input 0 \(x\) dim 0 but 4 in input 1 \(y\)"):
        relaytrace.profile(executable, lineage, _inputs(0, (3, 8), (4, 8)))
    with pytest.raises(RelaytraceError, match=r"input 1 \(y\) .* must be float32\['n', 8\], got float32\[3, 8, 1\]"):
        relaytrace.profile(executable, lineage, _inputs(0, (3, 8), (3, 8, 1)))
    with pytest.raises(RelaytraceError, match="unknown entry function 'decode'"):
        relaytrace.profile(executable, lineage, _inputs(0, (3, 8), (3, 8)), entry="decode")
    prof = relaytrace.profile(executable, lineage, _inputs(0, (5, 8), (5, 8)), repeat=1)
    assert prof.inputs == (("x", (5, 8), "float32"), ("y", (5, 8), "float32"))


def test_shape_expressions_are_checked_against_the_bound_symbols():
    signature = (("a", ("n", 4), "float32"), ("b", ("n * T.int64(2)", "m"), "float32"))  # as TVM prints it
    assert bind(signature, [((3, 4), "float32"), ((6, 7), "float32")], "m") == {"n": 3, "m": 7}
    with pytest.raises(RelaytraceError, match=r"dim 0 of m must be n \* T.int64\(2\) = 6 \(with m=7, n=3\), got 5"):
        bind(signature, [((3, 4), "float32"), ((5, 7), "float32")], "m")


def test_a_subfunction_called_twice_runs_its_ops_at_each_call(tmp_path):
    executable, lineage = relaytrace.build(CallsBlockTwice, "llvm")
    assert lineage.coverage().complete, lineage.coverage()
    assert list(lineage.build.entries) == ["main"] and lineage.subfunctions == ("block",)
    matmul_sites = [s for s in lineage.call_sites if any(lineage.origins[o].short_op == "matmul" for o in s.origin_ids)]
    assert [s.scope for s in matmul_sites] == [(Frame("block", 0),), (Frame("block", 1),)]
    assert [s.position for s in matmul_sites] == sorted(s.position for s in matmul_sites)
    for site in matmul_sites:
        assert {lineage.origins[o].layer for o in site.origin_ids if lineage.origins[o].kind == OP} == {
            "block.proj",
            "block.act",
        }
        assert lineage.check(site).status == "verified"
    prof = relaytrace.profile(executable, lineage, _inputs(0, (4, 64), (64, 64)), repeat=2)
    report = _assert_layers_sum_to_kernels(lineage, prof)
    assert {"block.proj", "out"} <= {r.layer for r in report.layers}
    assert not any(r.name == "block" for r in prof.records)  # the call itself is not a record: its kernels are
    saved = json.loads(lineage.save(tmp_path / "lineage.json").read_text())  # a scope is saved as its text
    kernel = matmul_sites[1].kernel
    assert [s["scope"] for s in saved["kernels"][kernel]] == ["block#0", "block#1"]
    assert Lineage.load(tmp_path / "lineage.json").kernels[kernel] == lineage.kernels[kernel]
    saved["kernels"][kernel][1]["scope"] = "block#one"
    (tmp_path / "lineage.json").write_text(json.dumps(saved))
    with pytest.raises(FileFormatError, match=r"kernels\['.*'\]\[1\]\.scope: 'block#one' is not a scope"):
        Lineage.load(tmp_path / "lineage.json")


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_a_torch_model_with_a_dynamic_batch_is_built_once_and_profiled_at_each_batch():
    torch.manual_seed(0)
    module = TwoLayer()
    batch = torch.export.Dim("batch", min=1, max=64)
    imported = from_torch(module, (torch.randn(2, 16),), name="two_layer", dynamic_shapes={"x": {0: batch}})
    executable, lineage = relaytrace.build(imported, "llvm")
    assert lineage.coverage().complete, lineage.coverage()
    ((name, shape, _),) = lineage.build.entries["main"]
    assert isinstance(shape[0], str) and shape[1] == 16
    for size in (1, 3):
        x = torch.randn(size, 16)
        prof = relaytrace.profile(executable, lineage, [x.numpy()], repeat=2)
        assert prof.inputs[0][1] == (size, 16)
        report = _assert_layers_sum_to_kernels(lineage, prof)
        assert {"fc1", "fc2"} <= {r.layer for r in report.layers}


def test_a_module_without_main_and_an_open_shape_matched_inside():
    executable, lineage = relaytrace.build(NoMainWithMatchCast, "llvm")
    assert lineage.coverage().complete, lineage.coverage()
    assert lineage.build.entries == {"forward": (("x", ("n", 16), "float32"), ("y", ("?", "?"), "float32"))}
    prof = relaytrace.profile(executable, lineage, _inputs(0, (3, 16), (3, 16)), repeat=1)
    assert prof.entry == "forward"
    assert {r.layer for r in _assert_layers_sum_to_kernels(lineage, prof).layers} - {"forward.shape_func"} == {
        "forward.s",
        "forward.t",
    }
    with pytest.raises(RelaytraceError, match="failed to run on these inputs"):  # the match_cast refuses n=4
        relaytrace.profile(executable, lineage, _inputs(0, (3, 16), (4, 16)), repeat=1)


def test_two_entries_ops_swapped_between_their_sites_are_suspect():
    from .conftest import move_origin

    _, lineage = relaytrace.build(TwoEntries, "llvm")
    main_mm = next(s for s in lineage.call_sites if s.function == "main" and "proj/matmul" in s.origin_ids)
    decode_mm = next(s for s in lineage.call_sites if s.function == "decode" and "decode.proj/matmul" in s.origin_ids)
    swapped = move_origin(move_origin(lineage, "proj/matmul", decode_mm), "decode.proj/matmul", main_mm)
    checks = swapped.verify().by_position()
    for site in (main_mm, decode_mm):
        assert checks[site.position].status == "suspect"
        assert any("is an op of" in r for r in checks[site.position].reasons)


def test_sites_of_several_entries_have_labels_of_their_own():
    _, lineage = relaytrace.build(TwoEntries, "llvm")
    labels = [s.label for s in lineage.call_sites]
    assert len(set(labels)) == len(labels)
    assert all(label.startswith("decode:") for s, label in zip(lineage.call_sites, labels) if s.function == "decode")
    site = lineage.call_sites[-1]
    assert lineage.site_by_label(site.label) == site
    assert lineage.site(site.kernel, site.call, entry=site.function) == site
    assert len(lineage.graph().nodes) == len(lineage.origins) + len(labels)


def test_a_module_whose_functions_have_no_global_symbol_is_traced_through_main():
    from tvm import relax

    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(out)
    func = bb.get()["main"].without_attr("global_symbol")
    executable, lineage = relaytrace.build(tvm_module({"main": func}), "llvm", pipeline="unfused")  # tvm.compile's
    assert list(lineage.build.entries) == ["main"] and lineage.coverage().complete, lineage.journal.degraded
    relaytrace.profile(executable, lineage, _inputs(0, (4, 8)), repeat=1)


def tvm_module(functions):
    import tvm

    return tvm.IRModule(functions)


def test_torch_inputs_come_from_the_example_and_other_options_are_refused():
    from relaytrace.errors import UsageError
    from relaytrace.frontends.loader import load

    with pytest.raises(UsageError, match="--input-shape and --dtype do not apply"):
        load(TwoLayer(), (torch.randn(1, 16),), shapes=[("x", (5, 16))])
    with pytest.raises(UsageError, match="--entry does not apply"):
        load(TwoLayer(), (torch.randn(1, 16),), entry="decode")
