"""Passes used by the tests: a real AlterOpImpl set-up and user rewrites no rule explains."""

import tvm
from tvm import relax, te
from tvm.relax import op as R


def _blocked_relu(n, c, h, w):
    a = te.placeholder((n, c // 4, h, w, 4), "float32", name="A")
    b = te.compute(a.shape, lambda *i: te.max(a(*i), tvm.tirx.const(0, "float32")), name="B")
    func = te.create_prim_func([a, b])
    return func.with_attr("operator_name", "relax.nn.relu").with_attr("global_symbol", "relu_nchw4c")


@tvm.transform.module_pass(opt_level=0, name="TagRelu")
def _tag_relu(mod, ctx):
    """AlterOpImpl swaps PrimFuncs by their operator_name; LegalizeOps sets none."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc) and gv.name_hint == "relu1":
            mod[gv] = func.with_attr("operator_name", "relax.nn.relu")
    return mod


def alter_op_impl_pipeline(target):
    """relu1 (the 16-channel relus of the first block) gets an NCHW4c implementation."""
    blocked = lambda n, c, h, w: (n, c // 4, h, w, c % 4)  # noqa: E731
    alter = relax.transform.AlterOpImpl({"relax.nn.relu": _blocked_relu(1, 16, 16, 16)},
                                        {"relax.nn.relu": [blocked, blocked]})
    return tvm.transform.Sequential([relax.transform.LegalizeOps(), _tag_relu, alter,
                                     relax.get_default_pipeline(target)])


@relax.expr_functor.mutator
class _AddToSubtract(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.add":
            return R.subtract(call.args[0], R.negative(call.args[1]))
        return call


@tvm.transform.module_pass(opt_level=0, name="UserAddToSubtract")
def add_to_subtract(mod, ctx):
    """x + y -> x - (-y): same numbers, ops that no tracking rule can explain."""
    mutator = _AddToSubtract(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


@tvm.transform.module_pass(opt_level=0, name="UserAddToSubtractInPlace")
def add_to_subtract_in_place(mod, ctx):
    """The same rewrite, written into the module object the pass was given."""
    mutator = _AddToSubtract(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = mutator.visit_expr(func)
    return mod


def user_pipeline(target, rewrite=add_to_subtract):
    return tvm.transform.Sequential([relax.transform.Normalize(), rewrite, relax.get_default_pipeline(target)])
