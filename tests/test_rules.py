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
from relaytrace.tracking.tracker import Tracker
from relaytrace.tracking.origins import assign_origins
from relaytrace.tracking.rules import DEFAULT_RULES, ValueKey

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
    assert [rule.name for rule in DEFAULT_RULES] == ["value", "replay", "args", "inputs"]
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
    after["main"] = _module(x, lambda bb, x: bb.emit(
        relax.call_tir(impl, [x], T((1, 4, 8, 8), "float32")), name_hint="swapped"))["main"]
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
    assert {origins(t, first.var), origins(t, second.var)}.isdisjoint({("first/strided_slice",),
                                                                       ("second/strided_slice",)})
    assert set(t.log.events[-1].unresolved) >= {o for v in (first.var, second.var) for o in origins(t, v)}


def test_a_var_that_named_a_value_and_now_calls_an_op_is_not_that_value():
    """out = y (an alias) becomes out = permute_dims(y): the permute is new, y keeps its op."""
    x = _x()
    y = relax.Var("y", T((1, 4, 8, 8), "float32"))
    out = relax.Var("out", T((1, 4, 8, 8), "float32"))
    out_after = out  # the same Var object, rebound

    def function(value):
        body = relax.SeqExpr([relax.DataflowBlock([relax.VarBinding(y, R.nn.relu(x)), relax.VarBinding(out, value)])],
                             out)
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
    before = tvm.IRModule({"main": relax.Function([x], relax.SeqExpr([relax.DataflowBlock([
        relax.VarBinding(a, R.nn.relu(x)), relax.VarBinding(pair, relax.Tuple([a, x])),
        relax.VarBinding(first, relax.TupleGetItem(pair, 0)), relax.VarBinding(out, R.sigmoid(first))])], out),
        T((1, 4, 8, 8), "float32"))})
    out2 = relax.Var("out2", T((1, 4, 8, 8), "float32"))
    after = tvm.IRModule({"main": relax.Function([x], relax.SeqExpr([relax.DataflowBlock([
        relax.VarBinding(a, R.nn.relu(x)), relax.VarBinding(out2, R.sigmoid(a))])], out2),
        T((1, 4, 8, 8), "float32"))})  # CanonicalizeBindings: sigmoid(pair[0]) is sigmoid(a)
    t = follow(before, after)
    assert origins(t, out2) == ("out/sigmoid",)
    assert rules(t) == {"identity": 1, "value": 1}
