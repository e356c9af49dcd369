"""Each tracking rule on a small hand-written before/after pair of Relax functions: it
fires where it should, gives the right origins, and does not fire where it should not.

``follow(before, after)`` runs the tracker over one pass; ``origins(t, var)`` is what
the tracker says a var of ``after`` carries.
"""

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as R

from relaytrace.tracking import ir
from relaytrace.tracking.origins import assign_origins
from relaytrace.tracking.rules import DEFAULT_RULES, ValueKey
from relaytrace.tracking.tracker import Tracker

T = relax.TensorType


def follow(before: tvm.IRModule, after: tvm.IRModule, pass_name: str = "P", rules=DEFAULT_RULES) -> Tracker:
    tracker = Tracker(assign_origins(ir.function_map(before)), rules=rules)
    tracker.start(ir.function_map(before))
    tracker.observe(ir.function_map(after), pass_name)
    return tracker


def origins(tracker: Tracker, var) -> tuple:
    tok = tracker.tokens.of(var.__chandle__())
    return tracker.tokens.origins[tok] if tok is not None else ()


def rules(tracker: Tracker) -> dict:
    return dict(tracker.log.events[-1].rules) if tracker.log.events else {}


def _module(x, emit):
    """A one-function module: ``emit(bb, x)`` adds the bindings and returns the output."""
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(emit(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def _x(shape=(1, 4, 8, 8)):
    return relax.Var("x", T(shape, "float32"))


def _const(shape, value=0.5):
    return relax.const(np.full(shape, value, "float32"))


def test_identity_keeps_the_origins_of_a_var_a_pass_rewrote():
    x = _x()
    before = _module(x, lambda bb, x: bb.emit(R.nn.relu(x), name_hint="act"))
    after = relax.transform.LegalizeOps()(before)  # same Var, now call_tir(relu, x)
    t = follow(before, after)
    (binding,) = [b for b in ir.bindings(after["main"]) if b.var.name == "act"]
    assert origins(t, binding.var) == ("act/relu",)
    assert rules(t) == {"identity": 1}


def test_value_key_follows_a_binding_re_created_with_a_new_var():
    x = _x()
    before = _module(x, lambda bb, x: bb.emit(R.nn.relu(x), name_hint="act"))
    after = _module(x, lambda bb, x: bb.emit(R.nn.relu(x), name_hint="renamed"))  # new Var, same value
    t = follow(before, after)
    (binding,) = ir.bindings(after["main"])[:1]
    assert origins(t, binding.var) == ("act/relu",)
    assert rules(t) == {"value": 1}


def test_the_rules_are_listed_and_a_tracker_takes_its_own():
    assert [rule.name for rule in DEFAULT_RULES] == ["value", "replay", "args", "inputs", "constants"]
    x = _x()
    before = _module(x, lambda bb, x: bb.emit(R.nn.relu(x), name_hint="act"))
    after = _module(x, lambda bb, x: bb.emit(R.nn.relu(x), name_hint="renamed"))
    assert rules(follow(before, after, rules=())) == {"new": 1}  # no rule: the re-created relu is new
    assert rules(follow(before, after, rules=(ValueKey(),))) == {"value": 1}


def test_a_name_is_not_evidence():
    """A new binding with an old name and another value: new, not the old op."""
    x = _x()
    before = _module(x, lambda bb, x: bb.emit(R.nn.relu(x), name_hint="lv20"))
    after = _module(x, lambda bb, x: bb.emit(R.sigmoid(x), name_hint="lv20"))
    t = follow(before, after)
    (binding,) = ir.bindings(after["main"])[:1]
    assert "lv20/relu" not in origins(t, binding.var)
    assert rules(t) == {"new": 1}
    assert t.log.events[-1].unresolved and t.log.events[-1].eliminated == ("lv20/relu",)


def test_args_rule_takes_an_implementation_swap_not_another_op():
    """AlterOpImpl-like: one PrimFunc for another on the same inputs is the same op;
    one Relax op for another (relu -> sigmoid, in the test above) is not."""
    x = _x()
    before = relax.transform.LegalizeOps()(_module(x, lambda bb, x: bb.emit(R.nn.relu(x), name_hint="act")))
    bb = relax.BlockBuilder(before)
    impl = bb.add_func(before[before.get_global_var("relu")].with_attr("global_symbol", "relu_impl"), "relu_impl")
    after = bb.get()
    after["main"] = _module(
        x, lambda bb, x: bb.emit(relax.call_tir(impl, [x], T((1, 4, 8, 8), "float32")), name_hint="swapped")
    )["main"]
    t = follow(before, after)
    (binding,) = ir.bindings(after["main"])[:1]
    assert origins(t, binding.var) == ("act/relu",)
    assert rules(t) == {"args": 1}


def _ints(*values):
    return relax.Tuple([tvm.tirx.IntImm("int64", v) for v in values])


def _two_slices(axis_a, axis_b, begin, end):
    def emit(bb, x):
        a = bb.emit(R.strided_slice(x, axis_a, begin[0], end[0]), name_hint="first")
        b = bb.emit(R.strided_slice(x, axis_b, begin[1], end[1]), name_hint="second")
        return bb.emit(R.add(a, b), name_hint="sum")

    return emit


def test_inputs_rule_follows_an_op_whose_constant_arguments_a_pass_rewrote():
    """Two slices of one input, their axis rewritten (as ConvertLayout does): each
    keeps its own origin, told apart by the begin/end arguments that stayed."""
    x = _x((1, 4, 4, 4))
    begin, end = (_ints(0), _ints(2)), (_ints(2), _ints(4))
    before = _module(x, _two_slices(_ints(1), _ints(1), begin, end))
    after = _module(x, _two_slices(_ints(3), _ints(3), begin, end))
    t = follow(before, after)
    first, second = ir.bindings(after["main"])[:2]
    assert origins(t, first.var) == ("first/strided_slice",)
    assert origins(t, second.var) == ("second/strided_slice",)
    assert rules(t)["inputs"] == 2


def test_inputs_rule_declines_a_tie():
    """Two slices whose every constant argument was rewritten: no guess."""
    x = _x((1, 4, 4, 4))
    before = _module(x, _two_slices(_ints(1), _ints(1), (_ints(0), _ints(2)), (_ints(2), _ints(4))))
    after = _module(x, _two_slices(_ints(3), _ints(3), (_ints(0), _ints(2)), (_ints(2), _ints(4))))
    t = follow(before, after)
    first, second = ir.bindings(after["main"])[:2]
    assert "inputs" not in rules(t)
    assert {origins(t, first.var), origins(t, second.var)}.isdisjoint(
        {("first/strided_slice",), ("second/strided_slice",)}
    )
    assert set(t.log.events[-1].unresolved) >= {o for v in (first.var, second.var) for o in origins(t, v)}


def test_a_var_that_named_a_value_and_now_calls_an_op_is_not_that_value():
    """out = y (an alias) becomes out = permute_dims(y): the permute is new, y keeps its op."""
    x = _x()
    y = relax.Var("y", T((1, 4, 8, 8), "float32"))
    out = relax.Var("out", T((1, 4, 8, 8), "float32"))
    out_after = out  # the same Var object, rebound

    def function(value):
        body = relax.SeqExpr(
            [relax.DataflowBlock([relax.VarBinding(y, R.nn.relu(x)), relax.VarBinding(out, value)])], out
        )
        return tvm.IRModule({"main": relax.Function([x], body, T((1, 4, 8, 8), "float32"))})

    before = function(y)
    after = function(R.permute_dims(y, [0, 1, 2, 3]))
    t = follow(before, after)
    assert origins(t, y) == ("y/relu",)
    assert origins(t, out_after) != ("y/relu",)
    assert rules(t) == {"identity": 1, "new": 1}  # y rebound in place; the permute inserted
    assert t.log.events[-1].inserted


def test_projections_of_a_split_are_three_values():
    x = _x((1, 12, 4, 4))

    def emit(bb, x):
        parts = bb.emit(R.split(x, 3, axis=1), name_hint="qkv")
        q, k, v = (bb.emit(relax.TupleGetItem(parts, i), name_hint=n) for i, n in enumerate("qkv"))
        return bb.emit(R.add(bb.emit(R.multiply(q, k), name_hint="qk"), v), name_hint="mix")

    before = _module(x, emit)
    t = follow(before, before)
    toks = {b.var.name: t.tokens.of(b.var.__chandle__()) for b in ir.bindings(before["main"])}
    assert len({toks["q"], toks["k"], toks["v"]}) == 3
    assert origins(t, [b for b in ir.bindings(before["main"]) if b.var.name == "q"][0].var) == ("qkv/split",)


def test_a_tuple_literals_field_is_the_value_it_holds():
    x = _x()
    a = relax.Var("a", T((1, 4, 8, 8), "float32"))
    pair = relax.Var("pair", relax.TupleType([T((1, 4, 8, 8), "float32"), T((1, 4, 8, 8), "float32")]))
    first = relax.Var("first", T((1, 4, 8, 8), "float32"))
    out = relax.Var("out", T((1, 4, 8, 8), "float32"))
    before = tvm.IRModule(
        {
            "main": relax.Function(
                [x],
                relax.SeqExpr(
                    [
                        relax.DataflowBlock(
                            [
                                relax.VarBinding(a, R.nn.relu(x)),
                                relax.VarBinding(pair, relax.Tuple([a, x])),
                                relax.VarBinding(first, relax.TupleGetItem(pair, 0)),
                                relax.VarBinding(out, R.sigmoid(first)),
                            ]
                        )
                    ],
                    out,
                ),
                T((1, 4, 8, 8), "float32"),
            )
        }
    )
    out2 = relax.Var("out2", T((1, 4, 8, 8), "float32"))
    after = tvm.IRModule(
        {
            "main": relax.Function(
                [x],
                relax.SeqExpr(
                    [relax.DataflowBlock([relax.VarBinding(a, R.nn.relu(x)), relax.VarBinding(out2, R.sigmoid(a))])],
                    out2,
                ),
                T((1, 4, 8, 8), "float32"),
            )
        }
    )  # CanonicalizeBindings: sigmoid(pair[0]) is sigmoid(a)
    t = follow(before, after)
    assert origins(t, out2) == ("out/sigmoid",)
    assert rules(t) == {"identity": 1, "value": 1}


# -- replay of fused groups with symbolic shapes ------------------------------


def _symbolic_module(params, emit):
    """A one-function module over ``params``: ``emit(bb, *params)`` adds the bindings
    and returns the output."""
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(emit(bb, *params))
        bb.emit_func_output(out)
    return bb.get()


def _fused(mod):
    """(the module as FuseOps finds it, as FuseOps leaves it)."""
    before = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern()])(mod)
    return before, relax.transform.FuseOps()(before)


def _group_calls(t, after) -> list:
    """The origins each call of a fused group in ``after``'s main carries, in order."""
    return [
        origins(t, b.var)
        for b in ir.bindings(after["main"])
        if ir.is_call(b.value) and isinstance(b.value.op, relax.GlobalVar) and ir.is_primitive(after[b.value.op])
    ]


def test_replay_reads_past_a_symbolic_dim_passed_as_a_var():
    """LegalizeOps passes a symbolic dim a PrimFunc cannot read off its buffers (``n``
    of an ``n + 1`` long concat) as a var in call_tir's arguments; in the fused group
    that var is bound nowhere. It is no input the replay failed to follow: the scale
    multiply that reads it is matched with the matmul (it was lost before)."""
    n = tvm.tirx.Var("n", "int64")
    params = [
        relax.Var("x", T((n, 4), "float32")),
        relax.Var("y", T((1, 4), "float32")),
        relax.Var("w", T((4, 4), "float32")),
    ]

    def emit(bb, x, y, w):
        cat = bb.emit(R.concat([x, y], axis=0), name_hint="cat")
        proj = bb.emit(R.matmul(cat, w), name_hint="proj")
        return bb.emit(R.multiply(proj, relax.const(0.25, "float32")), name_hint="scale")

    before, after = _fused(_symbolic_module(params, emit))
    t = follow(before, after, "FuseOps")
    groups = _group_calls(t, after)
    assert groups == [("proj/matmul", "scale/multiply")]  # not the concat, which runs on its own
    assert rules(t).get("replay") == 1 and not t.log.events[-1].eliminated


def _two_position_chains(bb, x, w):
    """Two ``arange``s of the symbolic length: equal values from no tensor, one key. The
    second one's chain ends first, so FuseOps emits its group first."""
    n = x.ty.shape[0]
    pos = bb.emit(R.arange(0, n, 1, "float32"), name_hint="pos")
    bias_pos = bb.emit(R.arange(0, n, 1, "float32"), name_hint="bias_pos")
    bias_col = bb.emit(R.expand_dims(bias_pos, [1]), name_hint="bias_col")
    biased = bb.emit(R.add(bias_col, x), name_hint="biased")
    proj = bb.emit(R.matmul(biased, w), name_hint="proj")
    pos_col = bb.emit(R.expand_dims(pos, [1]), name_hint="pos_col")
    return bb.emit(R.multiply(pos_col, proj), name_hint="scaled")


def test_replay_gives_equal_values_to_the_group_the_rest_of_its_body_agrees_with():
    """The first fused group runs the second arange's chain. Taking the first fit of
    the arange's key gave it ``pos`` (and then ``pos_col``, whose expand_dims of it has
    the same key), leaving its add and all of the second group but the matmul lost.
    Each group gets its own chain."""
    n = tvm.tirx.Var("n", "int64")
    params = [relax.Var("x", T((n, 4), "float32")), relax.Var("w", T((4, 4), "float32"))]
    before, after = _fused(_symbolic_module(params, _two_position_chains))
    t = follow(before, after, "FuseOps")
    assert sorted(_group_calls(t, after)) == [
        ("bias_col/expand_dims", "bias_pos/arange", "biased/add"),
        ("pos/arange", "pos_col/expand_dims", "proj/matmul", "scaled/multiply"),
    ]
    assert rules(t).get("replay") == 2 and not t.log.events[-1].eliminated


def test_replay_keeps_program_order_between_groups_that_compute_equal_values():
    """Two chains alike op for op (the same mask made for two layers): nothing tells
    their values apart, and each group takes the first fit, in program order."""
    n = tvm.tirx.Var("n", "int64")
    params = [relax.Var("x", T((n, 4), "float32")), relax.Var("w", T((4, 4), "float32"))]

    def emit(bb, x, w):
        first = bb.emit(
            R.matmul(
                bb.emit(
                    R.add(
                        bb.emit(
                            R.expand_dims(bb.emit(R.arange(0, n, 1, "float32"), name_hint="a0"), [1]), name_hint="e0"
                        ),
                        x,
                    ),
                    name_hint="s0",
                ),
                w,
            ),
            name_hint="m0",
        )
        second = bb.emit(
            R.matmul(
                bb.emit(
                    R.add(
                        bb.emit(
                            R.expand_dims(bb.emit(R.arange(0, n, 1, "float32"), name_hint="a1"), [1]), name_hint="e1"
                        ),
                        x,
                    ),
                    name_hint="s1",
                ),
                w,
            ),
            name_hint="m1",
        )
        return bb.emit(R.add(first, second), name_hint="both")

    before, after = _fused(_symbolic_module(params, emit))
    t = follow(before, after, "FuseOps")
    chains = [o for o in _group_calls(t, after) if any(i.endswith("/arange") for i in o)]
    assert chains == [("a0/arange", "e0/expand_dims", "s0/add"), ("a1/arange", "e1/expand_dims", "s1/add")]


def test_identity_exceptions_are_listed_and_a_folded_op_is_gone():
    """A pass that folds an op into a constant keeps the op's Var, now bound to the
    constant (LegalizeOps folds a static ``arange``): the var holds a constant, and the
    op is eliminated. Without the exception identity would keep the op alive."""
    from relaytrace.tracking.rules import IDENTITY_EXCEPTIONS

    assert [e.name for e in IDENTITY_EXCEPTIONS] == ["alias-calls", "folded", "layout-reuse"]
    x = _x((4,))
    before = _module(x, lambda bb, x: bb.emit(R.add(bb.emit(R.nn.relu(x), name_hint="act"), x), name_hint="out"))
    old = before["main"]
    act_binding, out_binding = ir.bindings(old)[:2]
    block = relax.DataflowBlock([relax.VarBinding(act_binding.var, _const((4,))), out_binding] + ir.bindings(old)[2:])
    after = tvm.IRModule({"main": relax.Function(old.params, relax.SeqExpr([block], old.body.body), old.ret_ty)})
    folded = follow(before, after)
    assert origins(folded, act_binding.var) == () and "act/relu" in folded.log.eliminated
    tracker = Tracker(assign_origins(ir.function_map(before)), identity_exceptions=())
    tracker.start(ir.function_map(before))
    tracker.observe(ir.function_map(after), "P")
    assert origins(tracker, act_binding.var) == ("act/relu",)


def _conv_norm(bb, x, weight):
    """conv2d(x, weight) -> batch_norm -> its first field -> relu."""
    conv = bb.emit(R.nn.conv2d(x, weight), name_hint="conv")
    norm = bb.emit(
        R.nn.batch_norm(conv, _const((4,), 2.0), _const((4,), 0.1), _const((4,), 0.0), _const((4,), 1.0), axis=1),
        name_hint="norm",
    )
    return bb.emit(R.nn.relu(bb.emit(relax.TupleGetItem(norm, 0), name_hint="normed")), name_hint="act")


def test_constants_rewritten_follows_a_batch_norm_folded_into_its_conv():
    x = _x()
    weight = _const((4, 4, 3, 3))
    before = _module(x, lambda bb, x: _conv_norm(bb, x, weight))
    after = relax.transform.FoldBatchnormToConv2D()(before)  # conv2d(x, W * s) + b, the norm gone
    t = follow(before, after, "FoldBatchnormToConv2D")
    made = {
        b.value.op.name: b.var
        for b in ir.bindings(after["main"])
        if isinstance(b.value, relax.Call)
        and b.value.op.name in ("relax.nn.conv2d", "relax.add", "relax.nn.relu")
        and (b.value.op.name != "relax.add" or b.value.args[0].ty.ndim == 4)
    }
    assert origins(t, made["relax.nn.conv2d"]) == ("conv/conv2d",)
    assert origins(t, made["relax.add"]) == ("norm/batch_norm",)  # the bias add takes the norm's place
    assert origins(t, made["relax.nn.relu"]) == ("act/relu",)
    assert rules(t)["constants"] == 2
    scaled = [o for o in t.origins.values() if o.pass_name == "FoldBatchnormToConv2D"]
    assert scaled and all(o.kind == "inserted" for o in scaled)  # the weight's scaling, made of constants alone


def test_constants_rewritten_does_not_take_a_conv_of_another_input():
    x, y = _x(), relax.Var("y", T((1, 4, 8, 8), "float32"))
    weight = _const((4, 4, 3, 3))
    before = _module(x, lambda bb, x: bb.emit(R.nn.conv2d(x, weight), name_hint="conv"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            scaled = bb.emit(R.multiply(weight, _const((4, 1, 1, 1), 2.0)))
            out = bb.emit_output(R.nn.conv2d(y, scaled))  # another input: no fold of the old conv
        bb.emit_func_output(out)
    t = follow(before, bb.get())
    assert "constants" not in rules(t)
