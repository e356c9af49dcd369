"""What a new user reads (issue 33): models named by their factory, a shape function of
the whole entry on a row of its own, unresolved ops not named by a kernel, and an op's
history grouped by op with the pass that ended it."""

import attrs

from relaytrace.analysis.report import make_report
from relaytrace.commands.query import histories, history_rows
from relaytrace.frontends.loader import model_name
from relaytrace.model.journal import Change
from relaytrace.model.lineage import CallSite, Role
from relaytrace.model.lineage_index import billed_layers
from relaytrace.model.origin import INSERTED, UNRESOLVED, Origin
from relaytrace.model.profile import KERNEL, CallRecord, Profile

from .test_by_hand import ORIGINS, SITES, lineage


def test_a_factory_names_its_model_unless_its_name_says_nothing():
    assert model_name("tests/fixtures/hf_models.py", "llama") == "llama"
    assert model_name("tests/fixtures/hf_models.py", "vit") == "vit"
    assert model_name("mymodel.py", "make") == "mymodel"
    assert model_name("dir/net.py", "get_model") == "net"


def _with(origins: dict, sites: tuple):
    base = lineage()
    return attrs.evolve(base, origins={**ORIGINS, **origins}, kernels={s.kernel: (s,) for s in sites})


def _profile(sites, us: float = 10.0) -> Profile:
    return Profile(
        "hand",
        "llvm",
        "cpu(0)",
        "timeline",
        1,
        tuple(CallRecord(s.kernel, 0, 0, 20.0 * i, us, KERNEL) for i, s in enumerate(sites)),
        e2e_us=(200.0,),
    )


def test_a_shape_function_of_the_entry_is_its_own_row_and_no_layers_kernel_call():
    shape = Origin(
        "s1", "conv1", "shape_func", "main", 4, kind=INSERTED, pass_name="VMShapeLower", serves=("o1", "o2", "o3")
    )
    sites = SITES + (CallSite("shape_func", 0, 3, (Role("s1", "inserted"),)),)
    lin = _with({"s1": shape}, sites)
    assert billed_layers(shape, lin.origins) == ("main.shape_func",)
    assert billed_layers(ORIGINS["t1"], lin.origins) == ("conv1", "fc")  # a layout transform: whom it serves
    assert "shape_func#0" not in [s.label for s in lin.kernels_of("conv1")]
    rows = {r.layer: r for r in make_report(lin, _profile(sites)).layers}
    assert rows["main.shape_func"].kernels == ("shape_func#0",) and rows["main.shape_func"].inserted_us == 10.0
    assert all("shape_func#0" not in r.kernels for name, r in rows.items() if name != "main.shape_func")
    one = attrs.evolve(shape, serves=("o1",))  # sizing one layer's allocations: that layer's
    assert billed_layers(one, lin.origins) == ("conv1",)


def test_an_unresolved_op_is_said_unresolved_not_named_by_its_kernel():
    odd = Origin("u1", "fc", "fused_where_add3", "main", 5, kind=UNRESOLVED, pass_name="FuseOps", serves=("o3",))
    sites = SITES + (CallSite("fused_where_add3", 0, 3, (Role("u1", "unresolved"),)),)
    rows = {r.layer: r for r in make_report(_with({"u1": odd}, sites), _profile(sites)).layers}
    assert "unresolved" in rows["fc"].ops and "fused_where_add3" not in rows["fc"].ops
    assert "fused_where_add3#0" in rows["fc"].kernels


def test_a_history_is_grouped_by_op_with_the_pass_that_ended_each():
    lin = lineage()
    history = {
        "o1": (
            Change(5, "LegalizeOps", "main", "conv2d", "identity"),
            Change(9, "FuseOps", "main", "fused_conv2d_relu", "replay"),
            Change(11, "FuseTIR", "main", "fused_conv2d_relu", "identity"),
        ),
        "o3": (Change(5, "LegalizeOps", "main", "matmul", "identity"),),
    }
    lin = attrs.evolve(
        lin, journal=attrs.evolve(lin.journal, history_by_origin=history, eliminated_by={"o3": "FoldConstant"})
    )
    (conv,) = histories(lin, "conv1")
    assert conv["kernel_calls"] == ["fused_conv2d_relu#0"] and conv["eliminated_by"] is None
    assert history_rows(conv) == [
        ["o1", "#5 LegalizeOps", "conv2d"],
        ["", "#9 FuseOps (replay), #11 FuseTIR", "fused_conv2d_relu"],
        ["", "END: runs in", "fused_conv2d_relu#0"],
    ]
    (fc,) = histories(lin, "fc")
    assert history_rows(fc)[-1] == ["", "END: eliminated by FoldConstant", ""]


def test_a_layers_call_suffix_cannot_collide_with_a_module_name():
    from relaytrace.analysis.attribution import module_prefix
    from relaytrace.model.layer_name import layer_name, split_layer

    cases = [("relu", 0), ("relu", 1), ("a@b", 0), ("a@b", 2), ("c@1", 0), ("c@1", 1), ("c", 1), ("x@0", 0), ("", 3)]
    names = [layer_name(path, call) for path, call in cases]
    assert len(set(names)) == len(cases)  # no two (module, call) share a layer name
    assert [split_layer(n) for n in names] == cases
    assert names[:6] == ["relu", "relu@1", "a@b", "a@b@2", "c@1@0", "c@1@1"]
    assert module_prefix("blocks@x.0.c@1@1", 1) == "blocks@x" and module_prefix("a@b.relu@1", 2) == "a@b.relu"
