"""Origin tracking on real TVM builds of a ResNet-style Relax model."""

from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import relax

import relaytrace
from relaytrace.model.origin import INSERTED, OP, UNRESOLVED
from relaytrace.zoo.relax_models import resnet_style

from .conftest import CONFIGS, run_vm
from .passes import add_to_subtract, add_to_subtract_in_place, alter_op_impl_pipeline, user_pipeline


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_call_site_and_every_origin_is_accounted_for(builds, name):
    _, lineage = builds[name]
    cov = lineage.coverage()
    assert cov.call_sites > 0
    assert cov.attributed_sites == cov.call_sites
    assert cov.unaccounted == ()
    assert cov.unresolved == ()
    assert lineage.journal.degraded == ()
    assert set(lineage.eliminated().values()) <= {e.pass_name for e in lineage.journal.events}


HEAVY = {"conv2d", "max_pool2d", "mean", "matmul"}  # the ops of the model FuseOps builds a kernel around


def test_fused_kernels_hold_one_anchor_op_and_the_elementwise_ops_that_read_it(builds, resnet_mod):
    """By the model's data flow, not by kernel names: each fused site runs one conv,
    pool, mean or matmul as its anchor and only adds and relus that read a value of the
    same site, and there are as many sites as such ops: no elementwise op runs alone."""
    _, lineage = builds["fused"]
    reads = {
        b.var.name: {a.name for a in b.value.args if isinstance(a, relax.Var)}
        for block in resnet_mod["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call)
    }
    for site in lineage.call_sites:
        origins = [lineage.origins[o] for o in site.origin_ids]
        layers = {o.layer for o in origins}
        assert lineage.origins[site.anchor].short_op in HEAVY, site
        for o in origins:
            if o.id != site.anchor:
                assert o.short_op in ("add", "relu") and reads[o.layer] & layers, (site, o.id)
    assert len(lineage.call_sites) == sum(o.short_op in HEAVY for o in lineage.origins.values() if o.kind == OP)


def test_a_shared_kernel_maps_to_distinct_layers_at_each_call_site(builds):
    _, lineage = builds["fused"]
    shared = {k: sites for k, sites in lineage.kernels.items() if len(sites) > 1}
    assert shared, "the model has repeated blocks, so some fused kernel must be shared"
    for kernel, sites in shared.items():
        anchors = [lineage.origins[s.anchor] for s in sites]
        assert len({a.layer for a in anchors}) == len(sites), kernel
        # the k-th call runs the k-th occurrence in the program
        assert [a.index for a in anchors] == sorted(a.index for a in anchors)
    (site,) = lineage.kernels_of("layer1_conv2_conv")  # the block's second conv, bias, residual add, relu
    assert Counter(lineage.origins[o].short_op for o in site.origin_ids) == {"conv2d": 1, "add": 2, "relu": 1}
    sites = lineage.kernels[site.kernel]
    assert [lineage.origins[s.anchor].layer for s in sites] == ["layer1_conv2_conv", "layer2_conv2_conv"]


def test_nhwc_inserted_permutes_serve_conv_layers_and_name_convert_layout(builds):
    _, lineage = builds["nhwc"]
    transposes = [s for s in lineage.call_sites if "transpose" in s.kernel]
    assert transposes
    for site in transposes:
        origins = [lineage.origins[o] for o in site.origin_ids]
        assert all(o.kind == INSERTED and o.pass_name == "ConvertLayout" for o in origins)
        served = {lineage.origins[s].op for o in origins for s in o.serves}
        assert served == {"relax.nn.conv2d"}
    assert all(o.pass_name == "ConvertLayout" for o in lineage.inserted())


def test_same_origin_ids_whatever_the_pipeline_or_layout(builds):
    ids = [{o.id for o in lin.origins.values() if o.kind == OP} for _, lin in builds.values()]
    assert ids[0] == ids[1] == ids[2]
    assert len(ids[0]) == 30


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tracing_changes_nothing(resnet_mod, builds, input_data, name):
    executable, lineage = builds[name]
    pipe, layout = CONFIGS[name]
    target = tvm.target.Target("llvm")
    seq = relaytrace.build_pipeline(pipe, target, layout)
    with tvm.transform.PassContext(opt_level=3):
        plain = tvm.compile(resnet_mod, target, relax_pipeline=seq)
        with target:
            final = relaytrace.build_pipeline(pipe, target, layout)(resnet_mod)
    assert plain.as_text() == executable.as_text()
    np.testing.assert_array_equal(run_vm(plain, input_data), run_vm(executable, input_data))
    prim_funcs = {gv.name_hint for gv, f in final.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert set(lineage.kernels) <= prim_funcs


def test_alter_op_impl_layout_transforms_are_tracked(resnet_mod):
    target = tvm.target.Target("llvm")
    _, lineage = relaytrace.build(resnet_mod, target, pipeline=alter_op_impl_pipeline(target))
    cov = lineage.coverage()
    assert cov.complete and not cov.unresolved
    replaced = lineage.kernels["relu_nchw4c"]
    assert [lineage.origins[s.anchor].layer for s in replaced] == ["layer0_relu1", "layer0_relu2"]
    transforms = [o for o in lineage.inserted() if "layout_transform" in o.op]
    assert len(transforms) == 4  # into and out of NCHW4c, at both call sites
    assert {o.pass_name for o in transforms} == {"AlterOpImpl"}
    for layer in ("layer0_relu1", "layer0_relu2"):
        kernels = {s.kernel for s in lineage.kernels_of(layer)}
        assert "relu_nchw4c" in kernels and sum("layout_transform" in k for k in kernels) == 2


def test_a_kernel_mixing_two_layers_lists_both(builds):
    _, lineage = builds["fused"]
    (site,) = [s for s in lineage.call_sites if s.anchor and lineage.origins[s.anchor].layer == "layer0_conv2_conv"]
    assert Counter(lineage.origins[o].short_op for o in site.origin_ids) == {"conv2d": 1, "add": 2, "relu": 1}
    layers = {lineage.origins[o].layer for o in site.origin_ids}
    assert {"layer0_conv2_conv", "layer0_add", "layer0_relu2"} <= layers
    assert lineage.origins[site.anchor].layer == "layer0_conv2_conv"


@pytest.mark.parametrize("rewrite", [add_to_subtract, add_to_subtract_in_place], ids=["new module", "in place"])
def test_a_pass_no_rule_explains_is_marked_unresolved_not_guessed(input_data, rewrite):
    """In place: a Python pass may write into the module object it was given; what
    the pass before it left is still recorded as it was."""
    target, name = tvm.target.Target("llvm"), rewrite.info.name
    executable, lineage = relaytrace.build(resnet_style(blocks=3), target, pipeline=user_pipeline(target, rewrite))
    with tvm.transform.PassContext(opt_level=3):
        plain = tvm.compile(resnet_style(blocks=3), target, relax_pipeline=user_pipeline(target, rewrite))
    np.testing.assert_array_equal(run_vm(plain, input_data), run_vm(executable, input_data))
    unresolved = lineage.unresolved()
    assert unresolved and {o.pass_name for o in unresolved} == {name}
    assert lineage.coverage().attributed_sites == lineage.coverage().call_sites
    marked = [s for s in lineage.call_sites for r in s.roles if r.role == UNRESOLVED]
    assert {s.kernel for s in marked} == {s.kernel for s in lineage.call_sites if "negative" in s.kernel}
    # the add binding kept its Var, so it keeps its origin; its history shows the rewrite
    steps = [(c.pass_name, c.callee) for c in lineage.history("layer0_add")]
    assert (name, "relax.subtract") in steps


def test_an_internal_tracking_error_degrades_the_lineage_not_the_build(resnet_mod, input_data, monkeypatch):
    from relaytrace.tracking import tracker

    def broken(self, *args):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(tracker.Tracker, "_process", broken)
    executable, lineage = relaytrace.build(resnet_mod, "llvm", pipeline="fused")
    assert any("injected fault" in r for r in lineage.journal.degraded)
    with tvm.transform.PassContext(opt_level=3):
        pipeline = relaytrace.build_pipeline("fused", tvm.target.Target("llvm"))
        plain = tvm.compile(resnet_mod, "llvm", relax_pipeline=pipeline)
    assert plain.as_text() == executable.as_text()
    np.testing.assert_array_equal(run_vm(plain, input_data), run_vm(executable, input_data))


def test_trace_composes_with_the_users_pass_context(resnet_mod):
    seen = []

    @tvm.ir.instrument.pass_instrument
    class Count:
        def run_after_pass(self, mod, info):
            seen.append(info.name)

    target = tvm.target.Target("llvm")
    with tvm.transform.PassContext(opt_level=2, config={"relax.backend.use_cuda_graph": False}, instruments=[Count()]):
        with relaytrace.trace(model="mine") as traced:
            ctx = tvm.transform.PassContext.current()
            assert ctx.opt_level == 2
            assert "relax.backend.use_cuda_graph" in ctx.config
            tvm.compile(resnet_mod, target, relax_pipeline=relax.get_default_pipeline(target))
    assert "FuseOps" in seen
    assert traced.lineage.coverage().complete
    assert traced.lineage.build.model == "mine"


def test_trace_without_a_build_says_what_to_do():
    with pytest.raises(relaytrace.RelaytraceError, match="call tvm.compile"):
        with relaytrace.trace():
            pass


def _followed_after_the_build(handle, recording):
    from relaytrace.model.build_facts import BuildFacts
    from relaytrace.tracking.follow import follow

    build = BuildFacts(handle.model, handle.lineage.build.target, handle.pipeline)
    return follow(recording, handle.layer_of, build=build, program=handle.program)


def test_the_lineage_followed_during_code_generation_is_the_one_after_the_build(resnet_mod):
    from tests.fixtures.relax_modules import TwoEntries

    for mod, target in ((resnet_mod, "llvm"), (TwoEntries, "llvm"), (resnet_mod, "cuda")):
        with relaytrace.trace() as handle:
            recording = handle.recorder.recording
            tvm.compile(mod, target)  # cuda: built, not run (its last TIR module is the device's)
        ahead = handle.ahead.result(recording)
        assert ahead is not None and ahead.kernels is handle.lineage.kernels  # followed on the thread
        assert handle.lineage.to_json() == _followed_after_the_build(handle, recording).to_json()


def test_a_relax_pass_after_a_tir_only_one_is_followed_after_the_build(resnet_mod):
    def pipeline(mod):
        mod = relax.transform.LegalizeOps()(mod)
        prims = tvm.IRModule({gv: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)})
        tvm.tirx.transform.RemoveNoOp()(prims)  # a top-level pass over a TIR-only module, mid-pipeline
        return relax.get_pipeline("default")(mod)

    with relaytrace.trace() as handle:
        recording = handle.recorder.recording
        tvm.compile(resnet_mod, "llvm", relax_pipeline=pipeline)
    assert handle.ahead.result(recording) is None  # its snapshot ended at RemoveNoOp
    assert handle.lineage.coverage().complete
    assert handle.lineage.to_json() == _followed_after_the_build(handle, recording).to_json()


def test_a_block_that_fails_after_its_build_leaves_no_lineage_and_the_process_as_it_was(resnet_mod):
    import gc
    import sys

    interval = sys.getswitchinterval()
    with pytest.raises(ZeroDivisionError):
        with relaytrace.trace() as handle:
            recording = handle.recorder.recording
            tvm.compile(resnet_mod, "llvm")
            raise ZeroDivisionError("the user's own code, after the build")
    assert handle.lineage is None and handle.ahead.result(recording) is None  # the thread was told to stop
    assert sys.getswitchinterval() == interval and gc.isenabled()
    relaytrace.build(resnet_mod, "llvm")
    assert sys.getswitchinterval() == interval and gc.isenabled()


def test_a_follow_thread_that_cannot_start_leaves_the_follow_to_the_end_of_the_block(resnet_mod, monkeypatch):
    import threading

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with relaytrace.trace() as handle:
        recording = handle.recorder.recording
        tvm.compile(resnet_mod, "llvm")
    assert handle.ahead.result(recording) is None
    assert handle.lineage.coverage().complete and not handle.lineage.journal.degraded


def test_a_chain_longer_than_the_recursion_limit_is_followed_whole():
    """deep_chain(1500): 1,500 adds in a row. Verification's truth asked of every add
    whether it was a folded norm's, walking its chain back recursively: the lineage
    came out degraded (RecursionError) and was followed twice, on the thread and again
    after the build."""
    from relaytrace.zoo.relax_models import deep_chain

    _, lineage = relaytrace.build(deep_chain(1500), "llvm")
    assert lineage.journal.degraded == ()
    assert lineage.verification.summary().startswith(f"{len(lineage.call_sites)} verified")


def _garbage_of_ours(run) -> list[str]:
    """What of relaytrace's (objects of its classes, its functions) the cyclic collector
    finds unreachable after ``run()``: a reference cycle the collector, not the last
    reference going, would have to free. TVM's own garbage is not counted."""
    import gc
    import types

    gc.collect()
    debug = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return [
            getattr(o, "__qualname__", "") if isinstance(o, types.FunctionType) else type(o).__qualname__
            for o in gc.garbage
            if type(o).__module__.startswith("relaytrace")
            or (isinstance(o, types.FunctionType) and (o.__module__ or "").startswith("relaytrace"))
        ]
    finally:
        gc.set_debug(debug)
        gc.garbage.clear()


def test_following_a_build_leaves_nothing_for_the_cyclic_collector(resnet_mod):
    """The follow runs with the collector paused; what it made in reference cycles (a
    closure that calls itself holding the build's reads: every view and TVM object it
    read) waited for the collection after the pause, which cost a tenth of the follow.
    Followed with and without the outputs' reads, on a fused build and on a decoder's."""
    import gc

    from relaytrace.frontends.nn import from_nn
    from relaytrace.tracking.follow import follow
    from relaytrace.tracking.recorder import Recorder
    from relaytrace.zoo.nn_decoder import decoder

    decoder_model = from_nn(*decoder(layers=1))
    for mod, layer_of in ((resnet_mod, None), (decoder_model.mod, decoder_model.layer_of)):
        recorder = Recorder()
        with tvm.transform.PassContext(opt_level=3, instruments=[recorder]):
            tvm.compile(mod, "llvm")
        for read_code in (False, True):
            kept = []

            def follow_paused(recording=recorder.recording, layer_of=layer_of, read_code=read_code, kept=kept):
                gc.disable()
                try:
                    lineage = follow(recording, layer_of, read_code=read_code)
                    kept.append((lineage.coverage().complete, bool(lineage.build.memory), bool(lineage.code.kernels)))
                finally:
                    gc.enable()

            assert _garbage_of_ours(follow_paused) == []
            assert kept == [(True, True, True)]


def test_a_traced_build_leaves_none_of_its_objects_to_the_cyclic_collector(resnet_mod):
    """Once ``build`` returns, what tracing made is freed as its last reference goes (the
    handle held its follow-ahead thread's holder, which held a method of the handle: a
    cycle that kept the recording's snapshot, every module the build recorded, alive
    until a collection)."""
    built = []
    assert _garbage_of_ours(lambda: built.append(relaytrace.build(resnet_mod, "llvm")[1].coverage().complete)) == []
    assert built == [True]


def test_a_trace_handle_kept_after_its_block_holds_no_module_of_the_build(resnet_mod):
    """The follow-ahead thread's snapshot of the recording (every module the build
    recorded) is let go once the block has taken its lineage: a handle the user keeps
    keeps the lineage (which holds what it reads at a first ask: the memory plans'
    module, the code's functions), not the build's IR besides."""
    import gc

    with relaytrace.trace() as handle:
        tvm.compile(resnet_mod, "llvm")
    assert handle.lineage.coverage().complete

    def reachable(start, past=frozenset()) -> dict[int, object]:
        found, todo = {id(start): start}, [start]
        while todo:
            for child in gc.get_referents(todo.pop()):
                if id(child) not in found and id(child) not in past and not isinstance(child, type):
                    found[id(child)] = child
                    todo.append(child)
        return found

    the_lineages = reachable(handle.lineage)
    besides = reachable(handle, frozenset(the_lineages))
    assert sum(isinstance(o, tvm.IRModule) for o in besides.values()) == 0
