"""Memory plans of real builds: a model whose every size is computed by hand, the plan
held against where a real run put each value (the VM's own addresses), the nn decoder's
prefill at two lengths and its decode, and the ``memory`` command."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import relaytrace
from relaytrace.analysis.memory import Verdict, memory_at
from relaytrace.frontends.nn import from_nn
from relaytrace.frontends.torch import from_torch
from relaytrace.model.work import evaluate
from relaytrace.zoo.nn_decoder import decoder


class Net(torch.nn.Module):
    """conv(3->8) relu, conv(8->16) relu, flatten, linear(4096->10) on 1x3x16x16."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 16 * 16, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.flatten(1))


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    example = torch.randn(1, 3, 16, 16)
    executable, lineage = relaytrace.build(from_torch(Net().eval(), (example,)), "llvm")
    return executable, lineage, example.numpy()


def test_every_size_lifetime_and_the_peak_are_those_computed_by_hand(net):
    _, lineage, _ = net
    plan = lineage.build.memory["main"]
    kernels = [label.split("#")[0] for label in plan.steps]
    assert len(kernels) == 3 and "conv2d" in kernels[0] and "conv2d" in kernels[1] and "matmul" in kernels[2]
    sizes = [evaluate(b.bytes, {}) for b in plan.blocks]
    # conv1's output 8x16x16 floats, conv2's 16x16x16 (flatten is a view of it), fc's 10
    assert sizes == [8 * 256 * 4, 16 * 256 * 4, 10 * 4]
    lives = [(b.start, b.end, b.returned) for b in plan.blocks]
    assert lives == [(0, 1, False), (1, 2, False), (2, 2, True)]  # conv1's read by conv2, conv2's by fc
    m = memory_at(lineage, "main", {})
    assert m.live == (8192, 8192 + 16384, 16384 + 40)
    assert m.peak == 24576 and "conv2d" in m.peak_site
    assert {(v.layer, v.bytes) for v in m.at_peak} == {("relu", 8192), ("relu_1", 16384)}
    weights = {r.layer: r.weights for r in m.layers if r.weights}
    assert weights == {"conv1": 4 * (8 * 27 + 8), "conv2": 4 * (16 * 8 * 9 + 16), "fc": 4 * (4096 * 10 + 10)}
    assert m.inputs == 3 * 256 * 4 and m.checks[0].verdict == Verdict.AGREES  # TVM's estimate of the same program


def test_the_plan_is_where_a_run_put_each_value(net):
    """Independent of the IR: the VM's instrument sees each kernel's arguments at run
    time. Values the plan puts in one block share its address; values of blocks live at
    the same step never overlap."""
    import tvm
    from tvm import relax

    executable, lineage, example = net
    vm = relax.VirtualMachine(executable, tvm.cpu())
    seen: dict[str, list] = {}
    counts: dict[str, int] = {}

    def note(func, name, before, ret, *args):
        if before:
            k = counts.get(name, 0)
            counts[name] = k + 1
            seen[f"{name}#{k}"] = [(a.data_ptr(), a.numel() * a.dtype.itemsize) for a in args if hasattr(a, "shape")]
        return relax.VMInstrumentReturnKind.NO_OP

    vm.set_instrument(note)
    vm["main"](tvm.runtime.tensor(example))
    plan = lineage.build.memory["main"]
    where = {}
    for block in plan.blocks:
        addresses = {seen[h.site][-1][0] for h in block.tensors}  # each value is its writer's output
        assert len(addresses) == 1
        where[block.name] = (addresses.pop(), evaluate(block.bytes, {}), block)
    for step in range(len(plan.steps)):
        live = sorted((a, a + n) for a, n, b in where.values() if b.start <= step <= b.end)
        assert all(end <= start for (_, end), (start, _) in zip(live, live[1:]))


@pytest.fixture(scope="module")
def nn_decoder():
    module, spec = decoder(layers=2)
    return relaytrace.build(from_nn(module, spec, name="decoder"), "llvm")


def test_prefill_grows_with_its_length_and_decode_is_static(nn_decoder):
    _, lineage = nn_decoder
    short, long = memory_at(lineage, "prefill", {"seq_len": 16}), memory_at(lineage, "prefill", {"seq_len": 64})
    assert long.peak > short.peak
    for m, seq in ((short, 16), (long, 64)):
        assert evaluate(m.peak_formula, {"seq_len": seq}) == m.peak
        assert m.weights == lineage_weight_bytes(lineage)  # every parameter after num_input, once
    scores = [v for v in long.at_peak if v.shape == (1, 4, 64, 64)]  # attention scores: heads x seq x seq
    assert scores and all(v.layer.endswith("self_attn") for v in scores)
    assert any(atoms == ("seq_len", "seq_len") for _, atoms in long.peak_formula)  # quadratic in the length
    assert long.checks[0].verdict == Verdict.NOT_CHECKED  # TVM's estimate cannot size a symbolic program
    decode = memory_at(lineage, "decode", {})
    assert decode.known and decode.checks[0].verdict == Verdict.AGREES and decode.peak < short.peak
    assert memory_at(lineage, "prefill", {}).known is False


def test_the_plans_are_read_at_their_first_ask_and_are_what_reading_them_during_the_build_gives():
    """Issue 57: a build puts the memory plans off (a tenth of tracking's time) until
    ``build.memory`` is first read, once for the lineage and its entry views; then they
    are the plans a build that read them while following (``read_code=True``, the CLI's
    way) holds, the lineages equal, and saved and pickled alike."""
    import pickle

    import attrs

    from relaytrace.model.lineage import Lineage

    module, spec = decoder(layers=2)
    _, later = relaytrace.build(from_nn(module, spec, name="decoder"), "llvm")
    _, now = relaytrace.build(from_nn(module, spec, name="decoder"), "llvm", read_code=True)
    assert later.build._memory_later is not None and later.build._memory == {}  # nothing read yet
    assert now.build._memory_later is None and set(now.build.memory) == {"decode", "prefill"}
    view = later.for_entry("decode")  # an entry's view shares what reads them
    assert view.build._memory_later is not None
    assert later.build.memory == now.build.memory and later == now
    assert later.build._memory_later is None and view.build.memory["decode"] is later.build.memory["decode"]  # once
    assert attrs.evolve(later.build, model="x").memory is later.build.memory
    _, unread = relaytrace.build(from_nn(module, spec, name="decoder"), "llvm")
    assert Lineage.from_json(unread.to_json()) == now  # saving reads them
    _, unread = relaytrace.build(from_nn(module, spec, name="decoder"), "llvm")
    pickled = pickle.loads(pickle.dumps(unread))  # read first: what reads them holds TVM's module
    assert pickled.build._memory_later is None and pickled.build.memory == now.build.memory
    # an entry view made before the read shares what reads them, which drops the module once read
    _, unread = relaytrace.build(from_nn(module, spec, name="decoder"), "llvm")
    view = unread.for_entry("prefill")
    assert unread.build.memory == now.build.memory and view.build._memory_later._planned is None
    assert view.build.memory is unread.build.memory
    # a view of a lineage whose code and plans were not read pickles (the view's code is its lineage's)
    _, unread = relaytrace.build(from_nn(module, spec, name="decoder"), "llvm")
    view = pickle.loads(pickle.dumps(unread.for_entry("decode")))
    assert view.code == unread.code and view.code.kernels and view.build.memory == now.build.memory
    # a pickle made before the plans were a property (its state names them "memory") loads
    state = {**unread.build.__getstate__()}
    state["memory"] = state.pop("_memory")
    older = object.__new__(type(unread.build))
    older.__setstate__(state)
    assert older == now.build


def lineage_weight_bytes(lineage) -> float:
    params = lineage.build.entries["prefill"][1:]  # tokens is the one input
    return sum(4 * np.prod(shape) for _, shape, _ in params)


def test_the_memory_command_reads_a_saved_run_at_other_lengths_and_compares_two(tmp_path):
    factory = tmp_path / "dec.py"
    factory.write_text("from relaytrace.zoo.nn_decoder import decoder\n\ndef make():\n    return decoder(layers=2)\n")
    for name, seq in (("a", 16), ("b", 64)):
        done = _cli(
            "--quiet",
            "profile",
            f"{factory}:make",
            "--entry",
            "prefill",
            "--input-shape",
            f"tokens:1x{seq}",
            "--repeat",
            "1",
            "--out",
            tmp_path / name,
        )
        assert done.returncode == 0, done.stderr
        assert (tmp_path / name / "memory.csv").read_text().startswith("kind,name,bytes")
    shown = _cli("memory", tmp_path / "a", "--at", "seq_len=64").stdout
    again = _cli("memory", tmp_path / "b").stdout
    assert shown.splitlines()[0] == again.splitlines()[0]  # the same figures from either run
    assert "a run: no two blocks the plan has live at one step overlapped: agrees" in again
    assert "each block's values at one address: agrees" in again and "a run:" not in shown  # not its own run
    assert "memory (decode)" in shown  # the build's other entry
    both = _cli("memory", tmp_path / "a", tmp_path / "b")
    assert both.returncode == 0 and "peak B / A:" in both.stdout
    bad = _cli("memory", tmp_path / "a", "--at", "seq_len")
    assert bad.returncode == 2 and "DIM=N" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def _cli(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "relaytrace.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.slow
def test_resnet50_peak_its_layers_and_weights_apart_from_activations():
    from relaytrace import zoo
    from relaytrace.analysis.report import make_report

    module, example = zoo.get("resnet50")
    executable, lineage = relaytrace.build(from_torch(module, (example,)), "llvm")
    report = make_report(lineage, relaytrace.profile(executable, lineage, [example.numpy()], repeat=1))
    m = report.memory
    params = sum(p.numel() for p in module.parameters()) + sum(
        b.numel() for n, b in module.named_buffers() if "running" in n
    )
    assert m.weights == pytest.approx(4 * params, rel=0.01)  # batch norm folded or not, every weight once
    assert [c.verdict for c in m.checks[:3]] == [Verdict.AGREES] * 3
    assert m.peak < m.planned < m.peak * 10
    biggest = max(4 * 64 * 112 * 112, 4 * 256 * 56 * 56)  # conv1's output; layer1's outputs
    assert max(v.bytes for v in m.at_peak) >= biggest
    assert m.layers[0].at_peak > 0


def test_a_fault_in_plans_read_late_is_one_warning_and_the_memory_unknown():
    """Put off, the plans are read after the journal was written: a fault then leaves
    the memory unknown and is said once, as a RuntimeWarning naming it, after the
    result is kept (so that warnings made errors do not make every later read fail)."""
    import warnings

    from relaytrace.model.build_facts import BuildFacts
    from relaytrace.tracking.follow import _PlansLater
    from relaytrace.tracking.memory import PLANNED_BY

    class Unreadable:  # a pass record whose module cannot be read
        pass_name = PLANNED_BY

        @property
        def module(self):
            raise RuntimeError("unreadable module")

    later = _PlansLater(Unreadable(), ("main",))
    build = BuildFacts("m", "llvm", "fused", memory_later=later)
    with pytest.warns(RuntimeWarning, match="memory plan not read: RuntimeError: unreadable module"):
        assert build.memory == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert later() == {} and build.memory == {}  # said once
