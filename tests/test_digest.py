"""The function digest: the native (C++) and the Python reader agree, and tracing does
not depend on which one serves."""

import pytest
import tvm
from tvm import relax
from tvm.relax import op as R

import relaytrace
from relaytrace import digest
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
    last: dict[str, object] = {}
    compared = partial = 0
    for mod in modules:
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function):
                continue
            old = last.get(gv.name_hint)
            for before, types in ((None, True), (None, False), (old, False)):
                a, b = digest.read(func, before, types), digest._python_digest(func, before, types)
                assert a == b, (gv.name_hint, before is not None, types)
                compared += 1
                partial += a.partial
            last[gv.name_hint] = func
    assert compared > 100 and partial > 10  # fused groups, lowered calls and kept bindings were all seen


def test_a_digest_reads_calls_as_the_tracker_needs_them(native):
    mains = [m["main"] for m in _modules_of_a_build(resnet_style(blocks=2), relax.get_default_pipeline)
             if "main" in [gv.name_hint for gv in m.functions]]
    d = digest.read(mains[-1])  # main as the VM will run it
    callees = [digest.callee_of(d, i) for i in range(len(d.bindings))]
    kernels = [c for c in callees if c and c.startswith("fused_")]
    assert kernels, callees
    for position, callee in enumerate(callees):
        call = digest.call(d, position)
        assert (call is None) == (callee is None)
        if call is not None:
            assert call[0] == callee
            if callee in kernels:  # a lowered fused call: F(inputs..., output buffer)
                assert call[2] is not None and all(kind in (digest.VAR, digest.CONST) for kind, _, _ in call[1])


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
    table = assign_origins(_symbolic_module())
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


def test_a_reader_that_cannot_build_falls_back_to_python_with_a_warning(tmp_path, monkeypatch):
    broken = tmp_path / "digest.cc"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(digest, "_SOURCE", broken)
    monkeypatch.setattr(digest, "_state", {})
    with pytest.warns(RuntimeWarning, match="native IR reader unavailable"):
        _, lineage = relaytrace.build(resnet_style(blocks=2), "llvm", model="m")
    assert digest.native_status().startswith("python (")
    assert not lineage.degraded and lineage.coverage().complete


def test_a_reader_that_does_not_know_this_tvm_falls_back_to_python_with_a_warning(tmp_path, monkeypatch):
    """A reader built against a type this TVM lacks (as a future TVM might rename one)
    compiles, refuses at its first call, and the Python reader finishes the build."""
    renamed = tmp_path / "digest.cc"
    renamed.write_text(digest._SOURCE.read_text().replace('Lookup("ir.TupleGetItem")', 'Lookup("ir.NoSuchItem")'))
    monkeypatch.setattr(digest, "_SOURCE", renamed)
    monkeypatch.setattr(digest, "_state", {})
    with pytest.warns(RuntimeWarning, match="needs the TVM type ir.NoSuchItem"):
        _, lineage = relaytrace.build(resnet_style(blocks=2), "llvm", model="m")
    assert digest.native_status().startswith("python (")
    assert not lineage.degraded and lineage.coverage().complete
