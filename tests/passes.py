"""Passes used by the tests: a real AlterOpImpl set-up, user rewrites no rule explains
and a renumbering of every PrimFunc as another TVM release might name them."""

import re

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
    """AlterOpImpl swaps PrimFuncs by their operator_name; LegalizeOps sets none. The
    one tagged is the PrimFunc that the first block's first relu (``layer0_relu1``, a
    binding LegalizeOps keeps by name) calls: the block's two 16-channel relus share it."""
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if binding.var.name == "layer0_relu1":
                callee = binding.value.args[0]
                mod[callee] = mod[callee].with_attr("operator_name", "relax.nn.relu")
    return mod


def alter_op_impl_pipeline(target):
    """The first block's 16-channel relus get an NCHW4c implementation."""
    blocked = lambda n, c, h, w: (n, c // 4, h, w, c % 4)  # noqa: E731
    alter = relax.transform.AlterOpImpl(
        {"relax.nn.relu": _blocked_relu(1, 16, 16, 16)}, {"relax.nn.relu": [blocked, blocked]}
    )
    return tvm.transform.Sequential(
        [relax.transform.LegalizeOps(), _tag_relu, alter, relax.get_default_pipeline(target)]
    )


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


def renumbered(names) -> dict[str, str]:
    """name -> new name, for PrimFunc names as TVM numbers them (``conv2d``, ``conv2d1``,
    ``conv2d2``): within each base name every one takes the next one's number and the
    last a number not used, so every name changes and most now name another function."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        base, digits = re.fullmatch(r"(.*?)(\d*)", name).groups()
        groups.setdefault(base, []).append((int(digits or 0), name))
    new = {}
    for base, members in groups.items():
        members.sort()
        following = [name for _, name in members[1:]] + [f"{base}{members[-1][0] + 1}"]
        new.update((name, then) for (_, name), then in zip(members, following))
    return new


@relax.expr_functor.mutator
class _Callees(relax.PyExprMutator):
    """Calls of the PrimFuncs in ``renamed`` (old GlobalVar -> new) made to the new ones."""

    renamed: dict = {}

    def visit_global_var_(self, gv):
        return self.renamed.get(gv, gv)


@tvm.transform.module_pass(opt_level=0, name="RenumberPrimFuncs")
def renumber_prim_funcs(mod, ctx):
    """Every PrimFunc of the module renamed (``renumbered``) and every call made to its new
    name: what a TVM release that numbers PrimFuncs otherwise would hand on. Run it right
    after LegalizeOps (``renumbered_pipeline``), where the numbers are made: the names
    FuseOps gives its groups are then made of the new ones."""
    prims = [gv for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    names = renumbered(gv.name_hint for gv in prims)
    callees = _Callees(mod)
    callees.renamed = {gv: tvm.ir.GlobalVar(names[gv.name_hint]) for gv in prims}
    for old, new in callees.renamed.items():
        relax.expr._update_type(new, old.ty)  # as a GlobalVar of a module has it
    functions = {}
    for gv, func in mod.functions_items():
        if gv in callees.renamed:
            if "global_symbol" in (func.attrs or {}):
                func = func.with_attr("global_symbol", callees.renamed[gv].name_hint)
            functions[callees.renamed[gv]] = func
        else:
            functions[gv] = callees.visit_expr(func) if isinstance(func, relax.Function) else func
    return tvm.IRModule(functions, attrs=mod.attrs)


def renumbered_pipeline(target):
    """The fused pipeline with every PrimFunc renumbered as LegalizeOps made them."""
    return tvm.transform.Sequential(
        [relax.transform.LegalizeOps(), renumber_prim_funcs, relax.get_default_pipeline(target)]
    )
