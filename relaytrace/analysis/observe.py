"""A rebuild that keeps chosen values: what ``compare --observe`` compares on when a
layer's value never leaves the kernel it is fused into, and what the search inside a
kernel (``analysis.narrow``) compares single ops on.

After each chosen binding of ``main`` (a layer's last op, for an op of several
outputs its first field; or a binding by position) the imported module gets a
marker, a reshape of the value to its own shape bound to a var named
``relaytrace_observe``, used wherever the value was used after. A pass right after
ToMixedPrecision (``observing``) replaces each marker by a call of an opaque copy:
FuseOps fuses nothing across it, so the kernel that computed the value ends there
and writes it out. The marker is a reshape because ToMixedPrecision lets a reshape
follow its input's dtype: the copy holds the value in the dtype the build computes
it in, and every op after it sees that dtype, as in the build that is compared (a
copy in the model's float32 would make the ops after it compute in float32).
Everything else is the user's pipeline as it was, so the rebuild differs from the
user's build only in the kernels that held those values; the user's module is not
changed (a new one is made).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..errors import RelaytraceError, UnknownNameError

OBSERVE = "relaytrace_observe"  # the copies' PrimFunc names begin so
MARK = "relaytrace_observe"  # the markers' vars are named so


def build_observed(imported, options, target, layers=(), at: Collection[int] = (), progress=None):
    """``(executable, lineage)``: ``imported`` (the ``ImportedModel`` a build was made
    from) built again for ``target`` as ``options`` (its ``BuildOptions``) say, with
    the value of each layer in ``layers`` and of each binding of ``main`` at a
    position in ``at`` (an op's ``Origin.index``) written out by the kernel that
    computes it. The model's ops keep their origin ids. An unknown layer is an
    ``UnknownNameError`` listing the known ones; a tuned build, or one that folded its
    batch norms (a value written out between a conv and its norm would keep the fold
    from happening), cannot be made again so: a ``RelaytraceError`` saying so."""
    import attrs
    import tvm

    from ..build import build, build_pipeline

    if options.database:
        raise RelaytraceError("a rebuild that writes values out cannot apply a tuning database (not yet)")
    if options.fold_batch_norm:  # a marker after a conv would keep FoldBatchnormToConv2D from folding its norm
        raise RelaytraceError("a rebuild that writes values out cannot fold batch norms as the build did (not yet)")
    check_layers(imported, layers)
    main = imported.mod["main"]
    # a copy of the module: the builder adds to the module it is given, and the user's
    # module (and the next rebuild's positions) must stay as they were
    marker = _marker()(imported.mod.clone(), _targets(main, imported.layers, set(layers), set(at)))
    body = marker.visit_expr(main)
    mod = marker.builder_.get()
    mod.update_func(mod.get_global_var("main"), body)
    marked = attrs.evolve(imported, mod=mod, keep=(*imported.keep, imported.mod))
    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    pipeline = build_pipeline(
        options.pipeline,
        target,
        {op: list(layouts) for op, layouts in options.convert_layout.items()} or None,
        options.mixed_precision,
        options.fold_batch_norm,
        options.lift_params,
        observe=observing(),
    )
    return build(marked, target, pipeline=pipeline, progress=progress)


def observing():
    """The module pass that replaces each marker ``build_observed`` put in ``main`` by
    a call of an opaque copy of its value, in the dtype the value has by then (for
    ``build.build_pipeline(observe=...)``)."""
    import tvm

    copier = _copier()

    @tvm.transform.module_pass(opt_level=0, name="relaytrace.Observe")
    def observe(mod, ctx):
        mutator = copier(mod)
        body = mutator.visit_expr(mod["main"])
        out = mutator.builder_.get()
        out.update_func(out.get_global_var("main"), body)
        return out

    return observe


def check_layers(imported, layers) -> None:
    """Each of ``layers`` is a layer of ``imported``: an ``UnknownNameError`` naming the
    first that is not, with the closest known ones (said before any build)."""
    known = {v[0] for v in imported.layers.values()}
    missing = [name for name in layers if name not in known]
    if missing:
        raise UnknownNameError("layer", missing[0], sorted(known))


def _targets(main, layers: dict, wanted: set[str], at: set[int]) -> set[int]:
    """The handles of the vars holding each wanted layer's value in ``main`` (its last
    op's) and the value of the binding at each position in ``at``: the var, or its
    first field when the op returns a tuple (batch norm)."""
    from tvm import relax

    from ..tracking import ir

    last: dict[Any, Any] = {}
    first_field: dict[int, Any] = {}
    for position, binding in enumerate(ir.bindings(main)):
        named = layers.get(binding.var.__chandle__())
        if named is not None and named[0] in wanted:
            last[named[0]] = binding.var
        if position in at:
            last[position] = binding.var
        value = binding.value
        if isinstance(value, relax.TupleGetItem) and value.index == 0:
            first_field.setdefault(value.tuple_value.__chandle__(), binding.var)
    targets = set()
    for var in last.values():
        is_tuple = isinstance(getattr(var, "ty", None), relax.TupleType)
        held = first_field.get(var.__chandle__()) if is_tuple else var
        if held is not None:
            targets.add(held.__chandle__())
    return targets


def _marker():
    """The mutator class (made on first use: it needs TVM) binding a marker after each
    target binding, a reshape of its value to its own shape named ``MARK``, and using
    the marker wherever the value was used after."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Marker(relax.PyExprMutator):
        def __init__(self, mod, targets: set[int]):
            super().__init__(mod)
            self.targets = targets

        def visit_var_binding_(self, binding):
            super().visit_var_binding_(binding)
            if binding.var.__chandle__() in self.targets:
                value = relax.op.reshape(binding.var, binding.var.ty.shape)
                self.set_var_remap(binding.var, self.builder_.emit(value, name_hint=MARK))

    return Marker


def _copier():
    """The mutator class (made on first use: it needs TVM) replacing each marker's
    reshape by a call of an opaque copy of the value it reshapes. The copy is a Relax
    function of one ``call_tir``, so that a pass after it sees a call as any other."""
    from tvm import relax, te

    @relax.expr_functor.mutator
    class Copier(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.copies: dict[tuple, object] = {}

        def visit_var_binding_(self, binding):
            value = binding.value
            if not (
                binding.var.name.startswith(MARK) and isinstance(value, relax.Call) and value.op.name == "relax.reshape"
            ):
                super().visit_var_binding_(binding)
                return
            source = self.visit_expr(value.args[0])
            ty = source.ty
            key = (tuple(str(d) for d in ty.shape.values), ty.dtype)
            if key not in self.copies:
                self.copies[key] = self._copy_of(ty, len(self.copies))
            self.set_var_remap(binding.var, self.builder_.emit(relax.Call(self.copies[key], [source]), name_hint=MARK))

        def _copy_of(self, ty, n: int):
            """A Relax function returning a copy of its one argument of type ``ty``,
            made by a kernel no pass fuses (``op_pattern`` 8, kOpaque): one per shape
            and dtype, each its own symbol."""
            shape = list(ty.shape.values)
            source = te.placeholder(shape, ty.dtype, name="A")
            copy = te.compute(shape, lambda *i: source(*i), name="B")
            kernel = te.create_prim_func([source, copy]).with_attr("op_pattern", 8)
            name = f"{OBSERVE}{n}"
            tir = self.builder_.add_func(kernel.with_attr("global_symbol", name), name)
            value = relax.Var("value", ty)
            held = relax.Var("held", ty)
            body = relax.SeqExpr(
                [relax.DataflowBlock([relax.VarBinding(held, relax.call_tir(tir, (value,), out_ty=ty))])], held
            )
            func = relax.Function([value], body, ret_ty=ty).with_attr("global_symbol", f"{name}_value")
            return self.builder_.add_func(self.builder_.normalize(func), f"{name}_value")

    return Copier
