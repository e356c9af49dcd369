"""The layers held against the frontend's program (model.frontend), pure: hand-built
origins and programs, no TVM."""

import json

import attrs

from relaytrace.model.build_facts import BuildFacts
from relaytrace.model.frontend import NN, ONNX, TORCH, Program, SourceNode, can_produce, check_program
from relaytrace.model.lineage import CallSite, Lineage, Role
from relaytrace.model.origin import Origin
from relaytrace.model.verification import SUSPECT, UNVERIFIED, VERIFIED, Member, verify


def _origin(oid, layer, op, source_op, node, index=0):
    return Origin(oid, layer, f"relax.{op}", "main", index, source_op=source_op, node=node)


EMB = _origin("emb/take", "emb", "take", "embedding", "embedding")
ADD = _origin("add_1/add", "add_1", "add", "add", "add_1", 1)
PROGRAM = Program(
    TORCH,
    (
        SourceNode("embedding", "embedding", "emb", True),
        SourceNode("to", "_to_copy", "norm", False),
        SourceNode("add_1", "add", "add_1", True),
        SourceNode("dropout", "clone", "drop", False),
    ),
)


def test_a_right_mapping_passes():
    check = check_program({o.id: o for o in (EMB, ADD)}, PROGRAM)
    assert check.wrong == {} and check.unknown == {} and check.missing == ()


def test_an_op_billed_to_a_node_that_passes_its_value_on_is_wrong():
    moved = _origin("drop/add", "drop", "add", "clone", "dropout")
    check = check_program({o.id: o for o in (EMB, moved)}, PROGRAM)
    assert "computes nothing" in check.wrong["drop/add"]
    assert check.missing == (PROGRAM.nodes[2],)  # add_1 lost its op


def test_an_op_its_node_cannot_produce_is_wrong_and_an_unknown_source_op_unverified():
    took = _origin("norm/take", "norm", "take", "pow", "pow_1")
    odd = _origin("x/foo", "x", "foo", "frobnicate", "f")
    check = check_program({o.id: o for o in (EMB, ADD, took, odd)}, PROGRAM)
    assert "cannot produce take" in check.wrong["norm/take"]
    assert "frobnicate" in check.unknown["x/foo"]


def test_the_tables_speak_each_frontends_vocabulary():
    assert can_produce(TORCH, "addmm", "relax.matmul") and can_produce(TORCH, "relu", "relax.nn.relu")
    assert can_produce(TORCH, "dropout", "relax.add") is False
    assert can_produce(ONNX, "Clip", "maximum3")  # a PrimFunc the converter emitted, by its name
    assert can_produce(ONNX, "LayerNormalization", "relax.nn.layer_norm")
    assert can_produce(NN, "Embedding", "relax.add") is False
    assert can_produce(NN, "Attention", "relax.add") is None  # a user's module class: not told


def test_a_user_nn_module_class_is_not_checked_but_a_tvm_one_is():
    mine = _origin("attn/add", "attn", "add", "Attention", "")
    wrong = _origin("emb/add", "emb", "add", "Embedding", "")
    check = check_program({o.id: o for o in (mine, wrong)}, Program(NN))
    assert check.unknown == {} and list(check.wrong) == ["emb/add"]


def test_verification_gives_each_layer_a_verdict_and_suspects_the_site():
    took = _origin("norm/take", "norm", "take", "_to_copy", "to")
    site = CallSite("take", 0, 0, (Role(took.id, "anchor"),))
    site2 = CallSite("add", 0, 1, (Role(ADD.id, "anchor"),))
    members = {"take": (Member("take", ("relax.take",)),), "add": (Member("add", ("relax.add",)),)}
    lineage = Lineage(
        BuildFacts("m", "llvm", "fused", kernel_members=members),
        {o.id: o for o in (took, ADD)},
        {"take": (site,), "add": (site2,)},
        program=PROGRAM,
    )
    v = verify(lineage)
    lineage = attrs.evolve(lineage, verification=v)
    assert [c.status for c in v.sites] == [SUSPECT, VERIFIED]
    layers = v.by_layer()
    assert layers["norm"].status == SUSPECT and layers["add_1"].status == VERIFIED
    assert layers["emb"].status == SUSPECT and any("no op is billed" in r for r in layers["emb"].reasons)
    assert any("embedding" in p for p in v.problems) and not v.ok
    back = Lineage.from_json(json.loads(json.dumps(lineage.to_json())))
    assert back.program == PROGRAM and back.verification.layers == v.layers


def test_an_unknown_source_op_leaves_its_layer_unverified():
    odd = _origin("x/foo", "x", "foo", "frobnicate", "f")
    site = CallSite("foo", 0, 0, (Role(odd.id, "anchor"),))
    build = BuildFacts("m", "llvm", "fused", kernel_members={"foo": (Member("foo", ("relax.foo",)),)})
    lineage = Lineage(build, {odd.id: odd}, {"foo": (site,)}, program=Program(TORCH))
    v = verify(lineage)
    assert v.sites[0].status == UNVERIFIED and v.by_layer()["x"].status == UNVERIFIED
