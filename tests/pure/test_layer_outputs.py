"""Where each layer's value is read (``analysis.layer_outputs``), on a hand-built
lineage (no TVM): directly, through ops that only move data, on the value a trailing
reshape takes, or not at all, with the reason."""

from relaytrace.analysis.layer_outputs import layer_outputs
from relaytrace.model.build_facts import BuildFacts
from relaytrace.model.lineage import BuiltinSite, CallSite, Lineage, Role
from relaytrace.model.numerics import DIRECT, FUSED, MOVED, NOT_COMPARABLE
from relaytrace.model.origin import Origin

OPS = [  # (id, layer, op, node)
    ("o1", "fc", "relax.matmul", "linear"),
    ("o2", "fc", "relax.reshape", "linear"),  # a Linear's matmul, reshape
    ("o3", "act", "relax.nn.relu", "relu"),
    ("o4", "t", "relax.nn.softmax", "softmax"),
    ("o5", "p", "relax.permute_dims", "permute"),
    ("o6", "v", "relax.reshape", "view"),
    ("o7", "q", "relax.nn.softmax", "softmax_1"),
    ("o8", "lin", "relax.permute_dims", "linear_1"),
    ("o9", "lin", "relax.matmul", "linear_1"),
    ("o10", "emb", "relax.take", "embedding"),
    ("o11", "emb", "relax.reshape", "embedding"),
    ("o12", "g", "relax.nn.gelu", "gelu"),
    ("o13", "h", "relax.add", "add"),
]
KERNELS = [
    ("matmul", ["o1"]),
    ("fused_reshape_relu", ["o2", "o3"]),
    ("fused_softmax_transpose_reshape", ["o4", "o5", "o6"]),
    ("fused_softmax_transpose", ["o7", "o8"]),
    ("matmul1", ["o9"]),
    ("take", ["o10"]),
    ("fused_gelu_add", ["o12", "o13"]),
]


def lineage() -> Lineage:
    origins = {oid: Origin(oid, layer, op, "main", i, node=node) for i, (oid, layer, op, node) in enumerate(OPS)}
    sites = {
        name: (CallSite(name, 0, p, tuple(Role(o, "anchor" if j == 0 else "fused") for j, o in enumerate(ids))),)
        for p, (name, ids) in enumerate(KERNELS)
    }
    edges = (
        ("o1", "o2"),
        ("o2", "o3"),
        ("o3", "o4"),
        ("o4", "o5"),
        ("o5", "o6"),
        ("o6", "o7"),
        ("o7", "o8"),
        ("o8", "o9"),
        ("o10", "o11"),
        ("o12", "o13"),
    )
    return Lineage(
        BuildFacts("m", "llvm", "fused", entries={"main": ()}),
        origins,
        sites,
        builtins=(BuiltinSite("vm.builtin.reshape", len(KERNELS), ("o11",)),),
        edges=edges,
    )


def test_each_layer_is_read_by_its_route_or_said_why_not():
    plan = {p.layer: p for p in layer_outputs(lineage())}
    # a Linear whose trailing reshape runs in the next kernel: its matmul's value, reshaped
    assert (plan["fc"].route, plan["fc"].site, plan["fc"].node, plan["fc"].reshaped) == (
        MOVED,
        "matmul#0",
        "linear",
        True,
    )
    assert plan["act"].route == DIRECT and plan["act"].site == "fused_reshape_relu#0"
    # the kernel writes the softmax transposed, then reshaped: the reference after the transpose, element for element
    assert (plan["t"].route, plan["t"].node, plan["t"].reshaped) == (MOVED, "permute", True)
    assert (plan["p"].route, plan["p"].node, plan["p"].reshaped) == (MOVED, "permute", True)
    assert plan["v"].route == DIRECT
    # a transpose the next layer's node goes on after: no value of the source program
    assert plan["q"].status == NOT_COMPARABLE and "does not hold" in plan["q"].note
    assert plan["lin"].route == DIRECT and plan["lin"].site == "matmul1#0"
    # the last op runs as a VM builtin that only reshapes: read where the take's kernel writes it
    assert (plan["emb"].route, plan["emb"].site, plan["emb"].reshaped) == (MOVED, "take#0", True)
    assert "only reshapes its take" in plan["emb"].note
    # computed on inside the kernel: never written
    assert plan["g"].status == FUSED and "which writes h's output" in plan["g"].note and plan["h"].route == DIRECT
