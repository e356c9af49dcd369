"""Origins: one stable record per op of the input model.

An id depends only on the model (layer name, op, order within the layer), never on
the target, pipeline or layout, so two builds of one model compare id by id.
"""

from __future__ import annotations

from typing import Callable, Mapping

from attrs import define, field

from . import ir

OP = "op"
INSERTED = "inserted"
UNRESOLVED = "unresolved"

Shape = tuple


@define(frozen=True)
class Origin:
    id: str
    layer: str
    op: str
    function: str
    index: int
    input_shapes: tuple[Shape, ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_shapes: tuple[Shape, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    kind: str = OP
    pass_name: str = ""
    serves: tuple[str, ...] = ()
    source_op: str = ""  # the frontend's op (aten op, ONNX op_type), when imported

    @property
    def short_op(self) -> str:
        return ir.short_op(self.op)


@define(frozen=True)
class OriginTable:
    """Origins of one input module and the handles of the vars that carry them."""

    origins: dict[str, Origin]
    by_var: dict[int, str] = field(repr=False)
    edges: tuple[tuple[str, str], ...] = ()
    module: object = field(default=None, repr=False, eq=False)  # keeps by_var's handles valid


# A namer returns (layer, source op) of a binding, or None for the plain-Relax default.
LayerNamer = Callable[[str, object, int], "tuple[str, str] | None"]


def assign_origins(mod, layer_of: LayerNamer | None = None) -> OriginTable:
    origins: dict[str, Origin] = {}
    by_var: dict[int, str] = {}
    edges: set[tuple[str, str]] = set()
    used_layers: dict[str, int] = {}
    used_ids: dict[str, int] = {}
    types: dict[int, tuple[tuple, tuple]] = {}  # handle -> (shapes, dtypes): each var's type is read once

    def types_of(expr) -> tuple[tuple, tuple]:
        handle = expr.__chandle__()
        found = types.get(handle)
        if found is None:
            found = types[handle] = ir.shapes_and_dtypes(ir.expr_type(expr))
        return found

    for fname, func in sorted(ir.relax_functions(mod), key=lambda item: item[0]):
        producers: dict[int, frozenset[str]] = {}
        for index, binding in enumerate(ir.bindings(func)):
            var, value = binding.var, binding.value
            if not ir.is_call(value):
                producers[var.__chandle__()] = _producers_of(value, producers)
                continue
            callee, args, _ = ir.callee_and_args(value)
            if ir.is_bookkeeping(callee):
                continue
            named = layer_of(fname, var, index) if layer_of else None
            if named is None:
                layer, source_op = _unique(var.name if fname == "main" else f"{fname}.{var.name}", used_layers), ""
            else:
                layer, source_op = named
            oid = _unique(f"{layer}/{ir.short_op(callee)}", used_ids, sep="#")
            in_shapes, in_dtypes = (), ()
            for arg in args:
                if ir.kind(arg) in ("var", "const"):
                    shapes, dtypes = types_of(arg)
                    in_shapes += shapes
                    in_dtypes += dtypes
                for src in _producers_of(arg, producers):
                    edges.add((src, oid))
            out_shapes, out_dtypes = types_of(var)
            handle = var.__chandle__()
            origins[oid] = Origin(
                id=oid, layer=layer, op=callee, function=fname, index=index,
                input_shapes=in_shapes, input_dtypes=in_dtypes, output_shapes=out_shapes, output_dtypes=out_dtypes,
                source_op=source_op,
            )
            by_var[handle] = oid
            producers[handle] = frozenset({oid})
    return OriginTable(origins=origins, by_var=by_var, edges=tuple(sorted(edges)), module=mod)


_NONE: frozenset[str] = frozenset()


def _producers_of(expr, producers: Mapping[int, frozenset[str]]) -> frozenset[str]:
    kind = ir.kind(expr)
    if kind == "var":
        return producers.get(expr.__chandle__(), _NONE)
    if kind == "const":
        return _NONE
    if kind == "tuple":
        return _NONE.union(*(_producers_of(f, producers) for f in ir.items(expr.fields)))
    if kind == "item":
        return _producers_of(expr.tuple_value, producers)
    return _NONE


def _unique(name: str, used: dict[str, int], sep: str = "_") -> str:
    """Deterministic de-duplication: first use keeps the name, later ones get a suffix."""
    candidate, count = name, used.get(name, 0)
    while candidate in used:
        count += 1
        candidate = f"{name}{sep}{count}"
    used[name] = count
    used[candidate] = 0
    return candidate


def main_inputs(mod) -> tuple[tuple[str, tuple, str], ...]:
    """(name, shape, dtype) of each tensor parameter of ``main``: what a run needs."""
    main = ir.lookup(mod, "main")
    if main is None:
        return ()
    out = []
    for param in ir.items(main.params):
        for shape, dtype in ir.tensor_types(ir.expr_type(param))[:1]:
            out.append((param.name, shape, dtype))
    return tuple(out)
