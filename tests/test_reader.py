"""The function view: what the tracker reads of each Relax function, and its two
shortcuts (kept bindings as handles only; a rebuilt function not read again)."""

import pytest
import tvm
from tvm import relax
from tvm.relax import op as R

from relaytrace.build import NHWC
from relaytrace.tracking import ir, reader
from relaytrace.tracking.origins import assign_origins
from relaytrace.zoo.relax_models import resnet_style

from .passes import alter_op_impl_pipeline


def _modules_of_a_build(mod, pipeline, convert_layout=None):
    """The module after every pass of a real build, in order."""
    seen = [mod]

    @tvm.ir.instrument.pass_instrument
    class Keep:
        def run_after_pass(self, mod, info):
            seen.append(mod)

    target = tvm.target.Target("llvm")
    passes = [relax.transform.ConvertLayout(convert_layout)] if convert_layout else []
    with tvm.transform.PassContext(opt_level=3, instruments=[Keep()]):
        tvm.compile(mod, target, relax_pipeline=tvm.transform.Sequential(passes + [pipeline(target)]))
    return seen


@pytest.mark.parametrize("case", ["fused", "nhwc", "alter_op_impl"])
def test_partial_reads_agree_with_full_reads_after_every_pass(case):
    pipeline = alter_op_impl_pipeline if case == "alter_op_impl" else relax.get_default_pipeline
    modules = _modules_of_a_build(resnet_style(blocks=2), pipeline, NHWC if case == "nhwc" else None)
    last: dict = {}
    compared = partial = rebuilt = 0
    for mod in modules:
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function):
                continue
            old, last[gv.name_hint] = last.get(gv.name_hint), func
            full, part = reader.read(func), reader.read(func, old)
            compared += 1
            if part is None:  # old's bindings, in old or in a new function object
                assert old is not None
                assert [b.__chandle__() for b in ir.bindings(func)] == [b.__chandle__() for b in ir.bindings(old)]
                rebuilt += not old.same_as(func)
                continue
            assert list(part.vars) == list(full.vars) and list(part.params) == list(full.params)
            kept = set(b.__chandle__() for b in ir.bindings(old)) if old is not None else set()
            for position, b in enumerate(ir.bindings(func)):
                if b.__chandle__() in kept:
                    assert position not in part.changed
                else:  # a binding written in full reads as in the full read
                    assert part.value(position) == full.value(position)
                    assert part.call(position) == full.call(position)
            partial += part.partial
    # fused groups, lowered calls, kept bindings and rebuilt functions were all seen
    assert compared > 50 and partial > 5 and rebuilt > 10


def test_a_view_reads_calls_as_the_tracker_needs_them():
    mains = [
        m["main"]
        for m in _modules_of_a_build(resnet_style(blocks=2), relax.get_default_pipeline)
        if "main" in [gv.name_hint for gv in m.functions]
    ]
    d = reader.read(mains[-1])  # main as the VM will run it
    callees = [d.callee(i) for i in range(len(d.vars))]
    kernels = [c for c in callees if c and c.startswith("fused_")]
    assert kernels, callees
    for position, callee in enumerate(callees):
        record = d.call(position)
        assert (record is None) == (callee is None) == (not d.is_call(position))
        if record is None:
            assert d.value(position).kind != reader.CALL
            continue
        assert record.callee == callee and record.handles == tuple(a.handle for a in record.atoms)
        assert all(not a.field for a in record.arguments()) and len(record.arguments()) <= len(record.atoms)
        if callee in kernels:  # a lowered fused call: F(inputs..., output buffer)
            assert record.global_var and all(a.kind in (reader.VAR, reader.CONST) for a in record.arguments())


def _symbolic_module():
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(R.nn.relu(x), name_hint="act")
            out = bb.emit_output(bb.emit(R.add(y, y), name_hint="twice"))
        bb.emit_func_output(out)
    return bb.get()


def test_symbolic_shapes_are_kept_in_origins():
    table = assign_origins(ir.function_map(_symbolic_module()))
    assert table.origins["act/relu"].input_shapes == (("n", 4),)
    assert table.origins["twice/add"].output_shapes == (("n", 4),)
    assert table.origins["twice/add"].input_dtypes == ("float32", "float32")


def test_verification_reads_what_the_tracker_read(monkeypatch):
    """One traced build reads each (function, function before) pair once: the
    verification's reads of the model functions are served by the tracker's."""
    import relaytrace

    calls = []
    plain_read = reader.read
    monkeypatch.setattr(
        reader,
        "read",
        lambda func, old=None, types=False, decoded=None: (
            calls.append((func.__chandle__(), old.__chandle__() if old is not None else 0))
            or plain_read(func, old, types, decoded)
        ),
    )
    _, lineage = relaytrace.build(resnet_style(blocks=2), "llvm")
    assert lineage.verification.ok
    assert any(old for _, old in calls) and len(calls) == len(set(calls))
