"""lineage.json's schema on a hand-built lineage holding every kind of record (no TVM):
the generic reader gives back what was saved, files of earlier schemas migrate to the
same lineage, and a broken field is named by its path in the current schema."""

import json

import attrs
import numpy as np
import pytest

from relaytrace.errors import FileFormatError, LineageFormatError
from relaytrace.model.build_facts import BuildOptions
from relaytrace.model.codec import decode, encode
from relaytrace.model.entry import Param, ParamKind, Tensor, signature
from relaytrace.model.frontend import Program, SourceNode
from relaytrace.model.journal import Change, Journal, PassEvent
from relaytrace.model.lineage import BuiltinSite, Lineage, Role
from relaytrace.model.lineage_schema import SCHEMA, migrate
from relaytrace.model.verification import Member, verify

from ..lineage_files import flat_v2, v5_label
from .test_by_hand import lineage as hand_lineage

HISTORY = {
    "o1": (
        Change(0, "FuseOps", "main", "fused_conv2d_relu", "fuse"),
        Change(1, "FuseTIR", "main", "fused_conv2d_relu", "fuse"),
    ),
    "o2": (Change(0, "FuseOps", "main", "fused_conv2d_relu", "fuse"),),
}


def full() -> Lineage:
    base = hand_lineage()
    members = {
        "fused_conv2d_relu": (Member("fused_conv2d_relu", ("relax.nn.conv2d", "relax.nn.relu")),),
        "layout_transform": (Member("layout_transform", ("relax.layout_transform",), shared=("layout",)),),
        "matmul": (Member("matmul", ("relax.matmul",)),),
    }
    lineage = attrs.evolve(
        base,
        build=attrs.evolve(
            base.build,
            kernel_members=members,
            tuned=("matmul",),
            calls={"main": ()},
            shape_consumers={"shape_func": ("matmul",)},
        ),
        builtins=(BuiltinSite("vm.builtin.reshape", 3, ("o3",)),),
        journal=Journal(
            events=(PassEvent(0, "FuseOps", "main", (("fuse", 2),), merged=(("o1", "o2"),)),),
            history_by_origin=HISTORY,
            eliminated_by={},
            degraded=(),
        ),
        program=Program("torch", (SourceNode("conv1", "aten.conv2d", "conv1", True),)),
    )
    return attrs.evolve(lineage, verification=verify(lineage))


def test_a_lineage_comes_back_equal_with_its_records_as_records():
    lineage = full()
    data = json.loads(json.dumps(lineage.to_json()))
    assert data["schema"] == SCHEMA and list(data)[0] == "schema"
    assert set(data) == {
        "schema",
        "build",
        "origins",
        "kernels",
        "builtins",
        "edges",
        "site_edges",
        "journal",
        "verification",
        "program",
    }
    back = Lineage.from_json(data)
    assert back == lineage
    assert all(type(r) is Role for s in back.call_sites for r in s.roles)
    assert all(type(c) is Change for h in back.journal.history_by_origin.values() for c in h)
    assert type(back.build.kernel_members["matmul"][0]) is Member and back.program.nodes[0].layer == "conv1"
    assert back.journal.history_by_origin == HISTORY and len(data["journal"]["history_by_origin"]["changes"]) == 2


def test_files_of_schemas_1_and_2_migrate_to_the_same_lineage_and_are_not_changed():
    lineage = full()
    data = json.loads(json.dumps(lineage.to_json()))
    v2 = flat_v2(data)
    table = data["journal"]["history_by_origin"]
    v1 = {
        **v2,
        "schema": "relaytrace.lineage/1",
        "history": {
            o: [dict(zip(Change._fields, table["changes"][i])) for i in ids] for o, ids in table["by_origin"].items()
        },
    }
    v1_inputs = {**{k: v for k, v in v1.items() if k != "entries"}, "inputs": v1["entries"]["main"]}  # before entries
    for old in (v2, v1, v1_inputs):
        kept = json.dumps(old)
        assert Lineage.from_json(old) == lineage
        assert json.dumps(old) == kept
    assert migrate(v2, "f")["build"]["model"] == "hand"


@pytest.mark.parametrize(
    "options",
    [
        BuildOptions("fused", "/runs/db", {"relax.nn.conv2d": ("NHWC", "OHWI")}, "float32", True),
        BuildOptions(
            "unfused", convert_layout={"relax.nn.conv2d": ("NHWC", "default"), "relax.nn.max_pool2d": ("NHWC",)}
        ),
        BuildOptions("my+pipeline+with_plus"),  # a user's pipeline whose name holds a plus
        BuildOptions("fused", mixed_precision="float16"),
    ],
)
def test_a_schema_5_label_is_read_apart_into_the_build_options_it_said(options):
    """/5 wrote the options as one string (``fused+tuned(DB)+...``), which advice and the
    tables read with ``in``; /6 holds them as fields, and a /5 file migrates to them."""
    data = json.loads(json.dumps(full().to_json()))
    data["build"]["options"] = encode(options)
    v5 = {
        **data,
        "schema": "relaytrace.lineage/5",
        "build": {**{k: v for k, v in data["build"].items() if k != "options"}, "pipeline": v5_label(options)},
    }
    assert Lineage.from_json(v5).build.options == options
    assert Lineage.from_json(data).build.pipeline == options.label


def test_a_schema_5_label_of_layouts_given_as_a_tuple_is_read_too():
    """``build(convert_layout=)`` took tuples, and /5 printed them as tuples."""
    data = json.loads(json.dumps(full().to_json()))
    v5 = {
        **data,
        "schema": "relaytrace.lineage/5",
        "build": {
            **{k: v for k, v in data["build"].items() if k != "options"},
            "pipeline": "fused+convert_layout(relax.nn.conv2d=('NHWC', 'OHWI'))",
        },
    }
    expected = BuildOptions("fused", convert_layout={"relax.nn.conv2d": ("NHWC", "OHWI")})
    assert Lineage.from_json(v5).build.options == expected


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["build"].pop("target"), "f.json: build has no field 'target'"),
        (lambda d: d["build"].update(tuned="matmul"), r"f.json: build.tuned must be a list"),
        (
            lambda d: d["kernels"]["matmul"][0]["roles"][0].update(role="boss"),
            r"f.json: kernels\['matmul'\]\[0\].roles\[0\].role must be one of anchor, fused, inserted, unresolved",
        ),
        (lambda d: d["journal"].update(extra=1), "f.json: journal has an unknown field 'extra'"),
        (
            lambda d: d["verification"]["sites"][0].update(status="fine"),
            r"verification.sites\[0\].status must be one of",
        ),
        (
            lambda d: d["build"]["kernel_members"]["matmul"].append(3),
            r"kernel_members\['matmul'\]\[1\] must be an object",
        ),
        (
            lambda d: d.update(schema="relaytrace.lineage/9"),
            "not a relaytrace lineage of schema 'relaytrace.lineage/7'",
        ),
    ],
)
def test_a_broken_field_is_named_by_its_path(edit, message):
    data = json.loads(json.dumps(full().to_json()))
    edit(data)
    with pytest.raises(LineageFormatError, match=message):
        Lineage.from_json(data, "f.json")


def test_the_generic_codec_reads_what_it_writes_for_each_record_alone():
    lineage = full()
    for kind, value in (
        (Journal, lineage.journal),
        (type(lineage.build), lineage.build),
        (type(lineage.verification), lineage.verification),
        (Program, lineage.program),
    ):
        assert decode(kind, json.loads(json.dumps(encode(value))), "x") == value


def test_the_codec_reads_a_pair_that_holds_a_record_and_names_a_broken_one():
    pairs = tuple[tuple[str, Role], ...]
    value = (("conv", Role("o1", "anchor")), ("relu", Role("o2", "fused")))
    assert decode(pairs, json.loads(json.dumps(encode(value))), "page") == value
    for broken, message in (
        ([["conv"]], r"page\[0\] must have 2 items, not 1"),
        (["conv"], r"page\[0\] must be a list, not a string"),
        ([["conv", {"origin": "o1", "role": 3}]], r"page\[0\]\[1\].*role must be"),
    ):
        with pytest.raises(FileFormatError, match=message):
            decode(pairs, broken, "page")


def test_a_schema_2_onnx_lineage_names_its_nodes_by_id():
    """/2 wrote an ONNX op's node as ``onnx:`` + its first output; /3 by the node's id
    (its name, ``<node_I>`` when unnamed), as the frontend's program does."""
    from relaytrace.model.frontend import ONNX
    from relaytrace.model.origin import Origin

    origins = {
        "c": Origin("c", "conv", "relax.nn.conv2d", "main", 0, source="onnx node /conv/Conv", node="/conv/Conv"),
        "r": Origin("r", "relu", "relax.nn.relu", "main", 1, source="onnx node ", node="<node_1>"),
    }
    base = hand_lineage()
    lineage = attrs.evolve(
        base,
        origins=origins,
        kernels={},
        edges=(),
        program=Program(
            ONNX, (SourceNode("/conv/Conv", "Conv", "conv", True), SourceNode("<node_1>", "Relu", "relu", True))
        ),
    )
    v2 = flat_v2(json.loads(json.dumps(lineage.to_json())))
    outputs = {"/conv/Conv": "onnx:conv_out", "<node_1>": "onnx:relu_out"}
    v2["origins"] = [{**o, "node": outputs[o["node"]]} for o in v2["origins"]]
    v2["program"]["nodes"] = [{**n, "node": outputs[n["node"]]} for n in v2["program"]["nodes"]]
    back = Lineage.from_json(v2)
    assert back == lineage and back.program.frontend is ONNX


def test_a_layer_beyond_tolerance_at_a_ratio_within_it_is_a_contradiction():
    """A row "beyond" at a tolerance ratio of 0 was read without complaint."""
    from relaytrace.errors import FileFormatError
    from relaytrace.model.numerics import BEYOND, Comparison, LayerError

    def saved(ratio, nan=0):
        layer = LayerError("fc", BEYOND, "matmul#0", max_abs=0.5, max_rel=0.1, tolerance_ratio=ratio, nan=nan)
        return json.loads(json.dumps(Comparison("m", "main", 1e-4, 1e-4, "float32 as built", (layer,)).to_json()))

    assert Comparison.from_json(saved(50.0)).layers[0].tolerance_ratio == 50.0
    assert Comparison.from_json(saved(0.0, nan=3)).layers[0].nan == 3  # a NaN is beyond any tolerance
    from relaytrace.model.numerics import error_of

    beyond = error_of("fc", "matmul#0", np.array([1.0, 2.0]), np.array([1.0, np.nan]), 1e-4, 1e-4)
    assert beyond.status == BEYOND and beyond.tolerance_ratio == 0.0  # a finite value against a NaN reference
    again = json.loads(json.dumps(Comparison("m", "main", 1e-4, 1e-4, "float32 as built", (beyond,)).to_json()))
    assert Comparison.from_json(again).layers[0] == beyond
    with pytest.raises(FileFormatError, match=r"layers\[0\] is beyond tolerance at a tolerance ratio of 0: 1 or below"):
        Comparison.from_json(saved(0.0))


def test_a_comparison_of_schema_1_loads_without_routes():
    from relaytrace.model.numerics import BEYOND, DIRECT, MOVED, WITHIN, Comparison, LayerError

    layers = (
        LayerError(
            "conv",
            WITHIN,
            "conv2d#0",
            shape=(1, 8),
            max_abs=1e-6,
            max_rel=1e-6,
            tolerance_ratio=0.01,
            cosine=1.0,
            route=DIRECT,
        ),
        LayerError(
            "fc",
            BEYOND,
            "matmul#0",
            shape=(1, 4),
            max_abs=0.5,
            max_rel=0.1,
            tolerance_ratio=50.0,
            cosine=0.9,
            route=MOVED,
        ),
    )
    comparison = Comparison("m", "main", 1e-4, 1e-4, "float32 as built", layers, tolerance="the default for float32")
    data = json.loads(json.dumps(comparison.to_json()))
    assert Comparison.from_json(data) == comparison and data["first_beyond"] == "fc"
    old = {
        **data,
        "schema": "relaytrace.compare/1",
        "layers": [{k: v for k, v in e.items() if k != "route"} for e in data["layers"]],
    }
    old.pop("tolerance")
    back = Comparison.from_json(old)
    assert [e.route for e in back.layers] == [None, None] and back.tolerance == "given"
    assert comparison.worst() == (layers[1],) and "fc (x50)" not in comparison.summary()  # the first is the worst


def test_odd_files_are_refused_as_files_and_old_keys_are_read():
    """A schema that is no string is a format error, not a crash; a /1 file with the
    ``subfunctions`` some versions wrote loads; a /2 ONNX op without a program is
    named by its node's name (its source says it), or by none when unnamed."""
    from relaytrace.model.origin import Origin

    data = json.loads(json.dumps(full().to_json()))
    for schema in ([], {}, 3, None):
        with pytest.raises(LineageFormatError, match="not a relaytrace lineage"):
            Lineage.from_json({**data, "schema": schema}, "f.json")
    v1 = {**flat_v2(data), "schema": "relaytrace.lineage/1", "subfunctions": []}
    v1["history"] = {
        o: [dict(zip(Change._fields, data["journal"]["history_by_origin"]["changes"][i])) for i in ids]
        for o, ids in data["journal"]["history_by_origin"]["by_origin"].items()
    }
    assert Lineage.from_json(v1) == full()
    origins = {
        "c": Origin("c", "conv", "relax.nn.conv2d", "main", 0, source="onnx node /conv/Conv", node="/conv/Conv"),
        "r": Origin("r", "relu", "relax.nn.relu", "main", 1, source="onnx node ", node=""),
    }
    bare = attrs.evolve(hand_lineage(), origins=origins, kernels={}, edges=(), program=None)
    v2 = flat_v2(json.loads(json.dumps(bare.to_json())))
    v2["origins"] = [{**o, "node": "onnx:" + o["id"]} for o in v2["origins"]]
    assert Lineage.from_json(v2) == bare
    v2["origins"][0]["node"] = ["x"]  # not a string: the reader names it
    with pytest.raises(LineageFormatError, match=r"origins\[0\].node must be a string"):
        Lineage.from_json(v2, "f.json")


def test_a_route_loads_as_a_member_and_observing_leaves_compared_layers_alone():
    from relaytrace.model.numerics import DIRECT, FUSED, OBSERVED, WITHIN, Comparison, LayerError, with_observed

    built = (
        LayerError(
            "conv", WITHIN, "conv2d#0", max_abs=1e-6, max_rel=1e-6, tolerance_ratio=0.01, cosine=1.0, route=DIRECT
        ),
        LayerError("bn", FUSED, "fused_bn_relu#0", note="kept inside fused_bn_relu#0"),
    )
    comparison = Comparison("m", "main", 1e-4, 1e-4, "float32 as built", built)
    back = Comparison.from_json(json.loads(json.dumps(comparison.to_json())))
    assert back.layers[0].route is DIRECT
    rebuilt = Comparison(
        "m",
        "main",
        1e-4,
        1e-4,
        "float32 as built",
        (
            LayerError("conv", WITHIN, "conv2d#0", max_abs=2e-6, max_rel=2e-6, tolerance_ratio=0.02, cosine=1.0),
            LayerError("bn", WITHIN, "batch_norm#0", max_abs=1e-6, max_rel=1e-6, tolerance_ratio=0.01, cosine=1.0),
        ),
    )
    merged = with_observed(comparison, rebuilt, ["conv", "bn"])
    assert merged.layers[0] == built[0]  # compared in the build itself: its own figures
    assert merged.layers[1].route is OBSERVED and "keeps it inside fused_bn_relu#0" in merged.layers[1].note


def _packed() -> Lineage:
    """``full()`` whose main takes an input and its weights packed in one tuple."""
    lineage = full()
    params = (
        Param("x", ParamKind.TENSOR, (Tensor("x", (1, "n"), "float32"),)),
        Param(
            "packed_params",
            ParamKind.TUPLE,
            (Tensor("packed_params[0]", (8, 4), "float32"), Tensor("packed_params[1]", (4,), "float32")),
        ),
    )
    return attrs.evolve(
        lineage, build=attrs.evolve(lineage.build, entries={"main": signature(params)}, params={"main": params})
    )


def test_a_schema_6_entry_signature_is_read_as_its_params_give_it():
    """/6 wrote an entry's inputs as the input module had them, a tuple by its first
    field under the tuple's name (``packed_params``): two signatures of one entry, which
    a profile's inputs could not match both of. /7 has one, its params'."""
    lineage = _packed()
    data = json.loads(json.dumps(lineage.to_json()))
    v6 = {
        **data,
        "schema": "relaytrace.lineage/6",
        "build": {
            **data["build"],
            "entries": {"main": [["x", [1, "n"], "float32"], ["packed_params", [8, 4], "float32"]]},
        },
    }
    assert Lineage.from_json(v6).build.entries == lineage.build.entries
    assert [n for n, _, _ in lineage.build.entries["main"]] == ["x", "packed_params[0]", "packed_params[1]"]


def test_an_entry_signature_its_params_do_not_give_is_refused():
    data = json.loads(json.dumps(_packed().to_json()))
    data["build"]["entries"]["main"] = data["build"]["entries"]["main"][:1]
    with pytest.raises(LineageFormatError, match=r"f.json: build.entries\['main'\] is not the tensors"):
        Lineage.from_json(data, "f.json")
