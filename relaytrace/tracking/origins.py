"""Origin assignment: an ``Origin`` (``model.origin``) for every op binding of the
input module, with the handles of the vars that carry them."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from attrs import define, field

from ..model.ops import is_bookkeeping, short_op
from ..model.origin import Origin
from . import ir, reader


@define(frozen=True)
class OriginTable:
    """Origins of one input module and the handles of the vars that carry them."""

    origins: dict[str, Origin]
    by_var: dict[int, str] = field(repr=False)
    edges: tuple[tuple[str, str], ...] = ()
    functions: dict = field(factory=dict, repr=False, eq=False)  # keeps by_var's handles valid
    # function name -> the view origins were read from, for the tracker's first walk
    views: dict = field(factory=dict, repr=False, eq=False)


# A namer returns (layer, source op) or (layer, source op, where in the user's code) of a
# binding, given its function's name, its var's handle (``var.__chandle__()``) and its
# position, or None for the plain-Relax default.
LayerNamer = Callable[[str, int, int], "tuple[str, str] | tuple[str, str, str] | None"]


def assign_origins(functions: dict, layer_of: LayerNamer | None = None, read=reader.read) -> OriginTable:
    """Origins of the input's functions (``ir.function_map`` of the module); ``read``
    reads each, typed (``reader.read``)."""
    origins: dict[str, Origin] = {}
    by_var: dict[int, str] = {}
    edges: set[tuple[str, str]] = set()
    used_layers: dict[str, int] = {}
    used_ids: dict[str, int] = {}
    views: dict[str, reader.FunctionView] = {}

    model = ir.model_functions(functions)
    for fname, func in sorted(model.items(), key=lambda item: item[0]):
        d = views[fname] = read(func, None, True)
        producers: dict[int, frozenset[str]] = {}
        prefix = "" if fname == "main" else f"{fname}."
        for index, handle in enumerate(d.vars):
            made = d.call(index)
            if made is None:
                producers[handle] = _producers_of(d.value(index), producers)
                continue
            callee = made.callee
            if is_bookkeeping(callee):
                continue
            if ir.is_subfunction(model, callee, made.global_var):  # its ops are the callee's
                producers[handle] = _producers_of_call(made, producers)
                continue
            named = layer_of(fname, handle, index) if layer_of else None
            if named is None:
                layer, source_op, where, node = _unique(prefix + d.name(index), used_layers), "", "", ""
            else:
                layer, source_op, where, node = (*named, "", "")[:4]
            # a frontend's layer names recur across entry functions (prefill, decode):
            # outside main its ids carry the function, so they do not depend on the others
            scope = "" if named is None or fname == "main" else f"{fname}:"
            oid = _unique(f"{scope}{layer}/{short_op(callee)}", used_ids, sep="#")
            in_shapes, in_dtypes = (), ()
            for arg in made.arguments():
                if arg.kind == reader.VAR or arg.kind == reader.CONST:
                    shapes, dtypes = d.shapes_and_dtypes(arg.type)
                    in_shapes += shapes
                    in_dtypes += dtypes
            for src in _producers_of_call(made, producers):
                edges.add((src, oid))
            out_shapes, out_dtypes = d.shapes_and_dtypes(d.var_types[index])
            # positional: a keyword call costs twice the construction, once per op
            origins[oid] = Origin(
                oid,
                layer,
                callee,
                fname,
                index,
                in_shapes,
                in_dtypes,
                out_shapes,
                out_dtypes,
                source_op=source_op,
                source=where,
                node=node,
            )
            by_var[handle] = oid
            producers[handle] = frozenset((oid,))
    return OriginTable(origins=origins, by_var=by_var, edges=tuple(sorted(edges)), functions=functions, views=views)


_NONE: frozenset[str] = frozenset()


def _producers_of(node: reader.Node, producers: Mapping[int, frozenset[str]]) -> frozenset[str]:
    """The origins whose values an alias, tuple or projection holds."""
    kind = node.kind
    if kind == reader.VAR:
        return producers.get(node.handle, _NONE)
    if kind == reader.TUPLE:
        return _NONE.union(*(_producers_of(f, producers) for f in node.fields))
    if kind == reader.ITEM and node.of is not None:
        return _producers_of(node.of, producers)
    return _NONE


def _producers_of_call(made: reader.CallView, producers: Mapping[int, frozenset[str]]) -> frozenset[str]:
    """The origins whose values a call reads (its var arguments and tuple fields)."""
    return _NONE.union(*(producers.get(a.handle, _NONE) for a in made.atoms if a.kind == reader.VAR))


def _unique(name: str, used: dict[str, int], sep: str = "_") -> str:
    """Deterministic de-duplication: first use keeps the name, later ones get a suffix."""
    if name not in used:
        used[name] = 0
        return name
    candidate, count = name, used[name]
    while candidate in used:
        count += 1
        candidate = f"{name}{sep}{count}"
    used[name] = count
    used[candidate] = 0
    return candidate
