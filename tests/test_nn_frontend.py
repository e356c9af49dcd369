"""TVM's own nn frontend: a decoder with prefill and decode entries, layers named by
nn.Module path in both, profiled end to end; the user's module is left as it was."""

import numpy as np
import pytest

import relaytrace
from relaytrace.analysis.report import make_report
from relaytrace.frontends.nn import from_nn
from relaytrace.model.origin import OP
from relaytrace.model.run_spec import RunSpec
from relaytrace.zoo.nn_decoder import decoder


def _inputs(lineage, entry, seq):
    rng = np.random.default_rng(0)
    return [
        np.zeros((1, seq), dtype)
        if dtype.startswith("int")
        else rng.standard_normal([d if isinstance(d, int) else seq for d in shape]).astype(dtype)
        for _, shape, dtype in lineage.build.entries[entry]
    ]


@pytest.fixture(scope="module")
def built():
    module, spec = decoder(layers=2)
    imported = from_nn(module, spec, name="decoder")
    assert not any("forward" in vars(m) for m in _all_modules(module))  # the observers are gone
    return relaytrace.build(imported, "llvm")


def _all_modules(module):
    from tvm.relax.frontend import nn

    from relaytrace.frontends.nn import _submodules

    return [m for _, m in _submodules(module, nn)]


def test_every_op_of_both_entries_is_named_by_its_module_path(built):
    _, lineage = built
    assert set(lineage.build.entries) == {"prefill", "decode"}
    assert lineage.build.entries["prefill"][0] == ("tokens", (1, "seq_len"), "int32")
    assert lineage.coverage().complete, lineage.coverage()
    for entry in ("prefill", "decode"):
        ops = {(o.layer, o.short_op) for o in lineage.origins.values() if o.function == entry and o.kind == OP}
        assert ("layers.0.self_attn.qkv_proj", "matmul") in ops
        assert ("layers.1.mlp.down_proj", "matmul") in ops
        assert ("embed_tokens", "take") in ops
        assert any(layer == "layers.0.self_attn" and op == "softmax" for layer, op in ops)
        assert ("lm_head", "matmul") in ops


@pytest.mark.parametrize("entry, seq", [("prefill", 7), ("prefill", 2), ("decode", 1)])
def test_each_entry_profiles_against_its_own_sites(built, entry, seq):
    executable, lineage = built
    prof = relaytrace.profile(executable, lineage, _inputs(lineage, entry, seq), entry=entry, repeat=2)
    assert prof.entry == entry and prof.inputs[0] == ("tokens" if entry == "prefill" else "token", (1, seq), "int32")
    report = make_report(lineage, prof)
    assert sum(r.us for r in report.layers) == pytest.approx(prof.kernel_us, rel=1e-9)
    assert {"lm_head", "layers.0.mlp.gate_up_proj", "layers.1.self_attn.qkv_proj"} <= {r.layer for r in report.layers}
    assert report.coverage.complete
    assert {s.function for s in report.lineage.call_sites} == {entry}


def test_a_module_called_twice_is_two_layers_and_the_users_module_is_left_as_it_was():
    from tvm.relax.frontend import nn

    class Twice(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(8, 8, bias=False)

        def forward(self, x):
            return self.fc(self.fc(x))

    module = Twice()
    own = module.fc.forward
    module.fc.forward = lambda x: own(x)  # the user's own instance-level forward
    mine = module.fc.forward
    imported = from_nn(module, {"forward": {"x": nn.spec.Tensor([2, 8], "float32")}})
    assert module.fc.forward is mine
    _, lineage = relaytrace.build(imported, "llvm")
    assert {(o.layer, o.short_op) for o in lineage.origins.values() if o.kind == OP and o.short_op == "matmul"} == {
        ("fc", "matmul"),
        ("fc@1", "matmul"),
    }
    assert all(o.id.startswith("forward:") for o in lineage.origins.values() if o.kind == OP)


def test_the_outputs_of_one_entrys_profile_keep_the_whole_lineage(built, tmp_path):
    from relaytrace.jobs import write_outputs
    from relaytrace.model.lineage import Lineage

    executable, lineage = built
    prof = relaytrace.profile(executable, lineage, _inputs(lineage, "decode", 1), entry="decode", repeat=1)
    report = make_report(lineage, prof)
    assert set(report.lineage.build.entries) == {"decode"}
    write_outputs(tmp_path / "out", report, RunSpec("decoder"))
    saved = Lineage.load(tmp_path / "out" / "lineage.json")
    assert set(saved.build.entries) == {"prefill", "decode"} and len(saved.call_sites) == len(lineage.call_sites)
    assert "<dt>entry</dt><dd>decode (" in (tmp_path / "out" / "report.html").read_text()  # the header says which ran
