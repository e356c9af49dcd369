"""A rebuild that keeps chosen layers' values: what ``compare --observe`` compares on when
a layer's value never leaves the kernel it is fused into.

After the last op of each observed layer (its first output, for an op of several) the
module gets a call of an opaque copy: FuseOps fuses nothing across an opaque call, so
the kernel that computed the value ends there and writes it out. Everything else is the
imported module as it was, so the rebuild differs from the user's build only in the
kernels that held those values; the user's module is not changed (a new one is made).
"""

from __future__ import annotations

from typing import Any

from ..errors import UnknownNameError

OBSERVE = "relaytrace_observe"  # the copies' PrimFunc names begin so


def observed(imported, layers) -> object:
    """``imported`` (an ``ImportedModel``) with the value of each layer in ``layers``
    written out by the kernel that computes it: an ``ImportedModel`` of a new module,
    its bindings (but the copies) keeping their layers. An unknown layer is an
    ``UnknownNameError`` listing the known ones."""
    import attrs

    check_layers(imported, layers)
    main = imported.mod["main"]
    targets = _targets(main, imported.layers, set(layers))
    copier = _copier()(imported.mod, targets)
    body = copier.visit_expr(main)
    mod = copier.builder_.get()
    mod.update_func(mod.get_global_var("main"), body)
    return attrs.evolve(imported, mod=mod, keep=(*imported.keep, imported.mod))


def check_layers(imported, layers) -> None:
    """Each of ``layers`` is a layer of ``imported``: an ``UnknownNameError`` naming the
    first that is not, with the closest known ones (said before any build)."""
    known = {v[0] for v in imported.layers.values()}
    missing = [name for name in layers if name not in known]
    if missing:
        raise UnknownNameError("layer", missing[0], sorted(known))


def _targets(main, layers: dict, wanted: set[str]) -> set[int]:
    """The handles of the vars holding each wanted layer's value in ``main``: its last
    op's, or the first field of it when the op returns a tuple (batch norm)."""
    from tvm import relax

    last: dict[str, Any] = {}
    first_field: dict[int, Any] = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            named = layers.get(binding.var.__chandle__())
            if named is not None and named[0] in wanted:
                last[named[0]] = binding.var
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


def _copier():
    """The mutator class (made on first use: it needs TVM) inserting an opaque copy
    after each target binding and using the copy wherever the value was used after."""
    from tvm import relax, te

    @relax.expr_functor.mutator
    class Copier(relax.PyExprMutator):
        def __init__(self, mod, targets: set[int]):
            super().__init__(mod)
            self.targets = targets
            self.copies: dict[tuple, object] = {}

        def visit_var_binding_(self, binding):
            super().visit_var_binding_(binding)
            if binding.var.__chandle__() not in self.targets:
                return
            ty = binding.var.ty
            key = (tuple(str(d) for d in ty.shape.values), ty.dtype)
            if key not in self.copies:
                shape = list(ty.shape.values)
                source = te.placeholder(shape, ty.dtype, name="A")
                copy = te.compute(shape, lambda *i: source(*i), name="B")
                func = te.create_prim_func([source, copy]).with_attr("op_pattern", 8)  # kOpaque: never fused
                name = f"{OBSERVE}{len(self.copies)}"  # one per shape and dtype, each its own symbol
                self.copies[key] = self.builder_.add_func(func.with_attr("global_symbol", name), name)
            kept = self.builder_.emit(relax.call_tir(self.copies[key], (binding.var,), out_ty=ty))
            self.set_var_remap(binding.var, kept)

    return Copier
