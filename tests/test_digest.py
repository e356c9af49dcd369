"""The function digest: the native (C++) and the Python reader agree, and tracing does
not depend on which one serves."""

import pytest
import tvm
from tvm import relax
from tvm.relax import op as R

import relaytrace
from relaytrace import digest, ir
from relaytrace.origins import assign_origins
from relaytrace.relax_models import resnet_style

from .conftest import NHWC
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


@pytest.fixture(scope="module")
def native():
    reader = digest._native()
    assert reader is not None, f"the native reader did not build: {digest.native_status()}"
    return reader


@pytest.mark.parametrize("case", ["fused", "nhwc", "alter_op_impl"])
def test_native_and_python_readers_agree_on_every_function_after_every_pass(native, case):
    pipeline = alter_op_impl_pipeline if case == "alter_op_impl" else relax.get_default_pipeline
    modules = _modules_of_a_build(resnet_style(blocks=2), pipeline, NHWC if case == "nhwc" else None)
    reads, last = [], {}
    for mod in modules:
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function):
                old = last.get(gv.name_hint)
                reads += [(gv.name_hint, func, before, types) for before, types in ((None, True), (None, False), (old, False))]
                last[gv.name_hint] = func
    ahead = digest.ReadAhead()  # reads on its own thread what is added, as during a traced build
    for _, func, before, types in reads:
        ahead.add(func, before, types)
    compared = partial = rebuilt = 0
    for name, func, before, types in reads:
        a, b = digest.read(func, before, types), digest._python_digest(func, before, types)
        assert a == b == ahead.read(func, before, types), (name, before is not None, types)
        compared += 1
        if a is None:  # old's bindings, in old or in a new function object
            assert before is not None
            assert [x.__chandle__() for x in ir.bindings(func)] == [x.__chandle__() for x in ir.bindings(before)]
            rebuilt += not before.same_as(func)
        else:
            partial += a.partial
    # fused groups, lowered calls, kept bindings and rebuilt functions were all seen
    assert compared > 100 and partial > 5 and rebuilt > 10
    assert digest.native_status() == "native"  # no read on the thread failed over to Python


def test_a_digest_reads_calls_as_the_tracker_needs_them(native):
    mains = [m["main"] for m in _modules_of_a_build(resnet_style(blocks=2), relax.get_default_pipeline)
             if "main" in [gv.name_hint for gv in m.functions]]
    d = digest.read(mains[-1])  # main as the VM will run it
    callees = [digest.callee_of(d, i) for i in range(len(d.vars))]
    kernels = [c for c in callees if c and c.startswith("fused_")]
    assert kernels, callees
    for position, callee in enumerate(callees):
        value, record = digest.value(d, position), digest.call_record(d, position)
        assert (record is None) == (callee is None) == (value[0] != digest.CALL)
        if record is None:
            continue
        name, args, gv = digest.call_parts(value)  # the call record says what decoding the call says
        assert record[0] == name == callee and record[1] == (gv or 0)
        assert digest.arguments(record[2]) == [arg[:2] for arg in args]
        if callee in kernels:  # a lowered fused call: F(inputs..., output buffer)
            assert gv and all(kind in (digest.VAR, digest.CONST) for kind, _ in digest.arguments(record[2]))


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


def test_symbolic_shapes_are_read_by_python_and_kept_in_origins(native):
    table = assign_origins(ir.function_map(_symbolic_module()))
    assert table.origins["act/relu"].input_shapes == (("n", 4),)
    assert table.origins["twice/add"].output_shapes == (("n", 4),)
    assert table.origins["twice/add"].input_dtypes == ("float32", "float32")


def test_tracing_gives_the_same_lineage_with_either_reader(native, monkeypatch):
    mod = resnet_style(blocks=2)
    lineages = {}
    for reader in ("1", "0"):
        monkeypatch.setenv("RELAYTRACE_NATIVE", reader)
        _, lineage = relaytrace.build(mod, "llvm", convert_layout=NHWC, model="m")
        assert not lineage.degraded and lineage.coverage().complete
        lineages[reader] = lineage.to_json()
    assert digest.native_status().startswith("python")  # RELAYTRACE_NATIVE=0 is still set
    assert lineages["1"] == lineages["0"]


@pytest.mark.parametrize("source, warning", [
    # no C++ at all: the build of the reader fails
    (lambda text: "this is not C++\n", "native IR reader unavailable"),
    # a reader built against a type this TVM lacks, as a future TVM might rename one:
    # it compiles and refuses at its first call
    (lambda text: text.replace('Lookup("ir.TupleGetItem")', 'Lookup("ir.NoSuchItem")'),
     "needs the TVM type ir.NoSuchItem"),
], ids=["cannot_build", "unknown_type"])
def test_a_reader_that_cannot_serve_falls_back_to_python_with_a_warning(tmp_path, monkeypatch, source, warning):
    changed = tmp_path / "digest.cc"
    changed.write_text(source(digest._SOURCE.read_text()))
    monkeypatch.setattr(digest, "_SOURCE", changed)
    monkeypatch.setattr(digest, "_state", {})
    with pytest.warns(RuntimeWarning, match=warning):
        _, lineage = relaytrace.build(resnet_style(blocks=2), "llvm", model="m")
    assert digest.native_status().startswith("python (")
    assert not lineage.degraded and lineage.coverage().complete
