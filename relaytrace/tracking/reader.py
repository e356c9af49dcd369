"""A Relax function as the tracker reads it: named records, each read when first asked.

``read(func, old)`` returns a ``FunctionView``: the handles (object addresses, which
key the tracker's tables) of every binding's var, and of each value a pass wrote. What
a binding holds is read from TVM only when someone asks the view: ``callee`` (the
callee's name), ``call`` (the call as the tracker compares calls, a ``CallView`` of ``Atom``
arguments), ``value`` (an alias, tuple, projection or constant as a ``Node``),
``name``. Most bindings a pass writes are memory and shape bookkeeping, of which the
tracker asks only the callee; reading an argument list costs more than the rest of a
binding together, so it is read once, for the bindings whose arguments matter.

Two shortcuts keep re-reading cheap: a binding a pass kept (the same object as in
``old``) is left out but for its var's handle, and a function rebuilt around the same
bindings is not read at all (None).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple, overload

import tvm_ffi
from attrs import define, field

from . import ir


class AtomKind(IntEnum):
    """What a value the reader meets is: a var, a constant, a tuple, a tuple's item, a
    call, an op, a global function, an extern function, or something else. An IntEnum:
    compared and hashed as the small ints the reads are made of."""

    OTHER = 0
    VAR = 1
    CONST = 2
    TUPLE = 3
    ITEM = 4
    CALL = 5
    OP = 6
    GLOBAL = 7
    EXTERN = 8


OTHER, VAR, CONST, TUPLE, ITEM, CALL, OP, GLOBAL, EXTERN = AtomKind
# A type is its index in the view's table of distinct types (``FunctionView.types``), or
# this for a read that did not ask for types.
TYPES_NOT_ASKED = -2
TensorTypes = tuple[tuple[tuple, str], ...]  # (shape, dtype) of each tensor, as ``ir.tensor_types``


class Atom(NamedTuple):
    """One argument of a call as the tracker compares calls, or one field of a tuple
    argument (``field``: it follows its tuple). ``type`` is the type's string index in
    a typed read for a var or a constant, else 0 or ``TYPES_NOT_ASKED``."""

    kind: AtomKind
    handle: int
    type: int
    field: bool


class CallView(NamedTuple):
    """A call binding's call: ``call_tir(F, (a, b))`` and the lowered ``F(a, b, out)``
    both name callee F with arguments (a, b[, out]), so the two compare alike; a packed
    call names its function. ``global_var``: the GlobalVar handle of a call of a
    function of the module, else 0. ``handles``: every atom's handle, in order, for
    looking up all their tokens at once (``keys.ValueKeys.key``)."""

    callee: str
    global_var: int
    atoms: tuple[Atom, ...]
    handles: tuple[int, ...]

    def arguments(self) -> list[Atom]:
        """The call's own arguments, tuple fields left out."""
        return [a for a in self.atoms if not a.field]


class Node(NamedTuple):
    """An expression that is not a call: a var or constant (``type`` as in ``Atom``), a
    tuple (``fields``), a projection (``of``, field ``item``), or anything else (a
    callee, a shape: ``name``). A call inside one is a ``CALL`` node with no more."""

    kind: AtomKind
    handle: int
    type: int = 0
    fields: tuple[Node, ...] = ()
    of: Node | None = None
    item: int = -1
    name: str = ""


class Decoded:
    """What has been read of each value so far, by the value's handle, so that each is
    read from TVM once: one per view, or one for every view of a build
    (``SharedReads``), where a binding a pass kept, or a full read of a function read in
    part before, finds its values read. Handles stay valid while the build's functions
    are pinned (the tracker pins them)."""

    __slots__ = ("calls", "callees", "names", "bindings_of", "var_of", "tensor_types")

    def __init__(self):
        self.calls: dict[int, CallView | None] = {}  # value handle -> its call (None: not a call)
        self.callees: dict[int, str | None] = {}  # value handle -> its callee
        self.names: dict[int, tuple[AtomKind, str]] = {}  # callee object handle -> (kind, name)
        self.bindings_of: dict[int, list[int]] = {}  # function handle -> its bindings' handles
        self.var_of: dict[int, int] = {}  # binding handle -> its var's handle
        # structural hash of a type -> its tensors' (shape, dtype). Per build, never across
        # builds: a free TIR var hashes by address, and a later build's var may reuse one
        self.tensor_types: dict[int, TensorTypes] = {}


class _Cache:
    """A view's reads: its values' (``Decoded``), and in a typed view the index of each
    expression's type in the view's table of distinct types."""

    __slots__ = ("decoded", "typed", "types", "indices", "table")

    def __init__(self, typed: bool = False, decoded: Decoded | None = None):
        self.decoded = decoded if decoded is not None else Decoded()
        self.typed = typed
        self.types: dict[int, int] = {}  # expression handle -> index in table
        self.indices: dict[TensorTypes, int] = {}
        self.table: list[TensorTypes] = []


@define(frozen=True, slots=True)
class FunctionView:
    """A function as the tracker reads it. ``vars``: each binding's var handle, in
    order; ``values``: each binding's value handle, 0 for a binding the pass kept (left
    out); ``changed``: the positions of the bindings written in full, the only ones the
    functions below may be asked about. A typed read (``read(types=True)``) has every
    var's and parameter's type in ``var_types`` / ``param_types`` (indices in ``types``,
    the view's distinct types)."""

    params: tuple[int, ...]
    param_names: tuple[str, ...]
    param_types: tuple[int, ...]
    vars: list[int]
    values: list[int]
    changed: list[int]
    var_types: list[int]
    types: list[TensorTypes]
    kinds: list[int]  # each written binding's value kind (VAR, CONST, TUPLE, ITEM, CALL, OTHER); -1 kept
    _bindings: list  # the binding objects, None for a kept one
    _value_objects: list  # their values, None for a kept one
    _output: object
    _cache: _Cache = field(factory=_Cache)

    @property
    def partial(self) -> bool:
        """Some bindings were known (``read(func, old)``) and left out."""
        return len(self.changed) < len(self.vars)

    def is_call(self, position: int) -> bool:
        """The binding at ``position`` (written in full) binds a call."""
        return self.kinds[position] == CALL

    def callee(self, position: int) -> str | None:
        """The callee of a call binding, as ``CallView.callee`` names it; None otherwise."""
        callees = self._cache.decoded.callees
        handle = self.values[position]
        if handle not in callees:
            value = self._value_objects[position]
            callees[handle] = _named(self, value)[1] if ir.kind(value) == "call" else None
        return callees[handle]

    def call(self, position: int) -> CallView | None:
        """The call a binding written in full makes; None when it is not a call."""
        calls = self._cache.decoded.calls
        handle = self.values[position]
        if handle not in calls:
            value = self._value_objects[position]
            calls[handle] = _call(self, value) if ir.kind(value) == "call" else None
        return calls[handle]

    def local_function(self, position: int):
        """The Relax function a call binding (written in full) calls in place (a composite
        function inside an offloaded group, ``ir.called_function``), else None."""
        value = self._value_objects[position]
        return ir.called_function(value, self._bindings[:position]) if ir.kind(value) == "call" else None

    def value_object(self, position: int):
        """The value of a binding written in full, as TVM holds it: for what a view does
        not say (a builtin's arguments)."""
        return self._value_objects[position]

    def value(self, position: int) -> Node:
        """The value of a binding written in full that is not a call (an alias, a tuple,
        a projection, a constant, a shape)."""
        return _node(self, self._value_objects[position])

    def name(self, position: int) -> str:
        """The name of a binding's var (written in full)."""
        return self._bindings[position].var.name

    def integer_arguments(self, position: int) -> list[int | None]:
        """The value of each argument of a call binding (written in full) that is an
        integer (a ``PrimValue``, an ``IntImm``), None for any other, the arguments as
        ``CallView`` counts them (a packed call's name is no argument); read from TVM each
        time (``vm.builtin.make_shape`` says heap slots this way)."""
        value = self._value_objects[position]
        kind, _, _ = _named(self, value)
        args = ir.items(value.args)
        out: list[int | None] = []
        for arg in args[1:] if kind == _PACKED else args:
            try:
                out.append(int(arg.value) if hasattr(arg, "value") else int(arg))
            except (TypeError, ValueError):
                out.append(None)
        return out

    def argument_types(self, position: int) -> TensorTypes:
        """``(shape, dtype)`` of each tensor among a call binding's arguments (written in
        full), as the IR types them (``ir.tensor_types``), each distinct type read once."""
        out: list[tuple[tuple, str]] = []
        for arg in ir.items(self._value_objects[position].args):
            out.extend(_tensor_types(self._cache.decoded, ir.expr_type(arg)))
        return tuple(out)

    def shapes_and_dtypes(self, type_: int) -> tuple[tuple[tuple, ...], tuple[str, ...]]:
        """(shapes, dtypes) of the tensors of the type at ``type_`` (an index in ``types``)."""
        tensors = self.types[type_]
        return tuple(shape for shape, _ in tensors), tuple(dtype for _, dtype in tensors)

    def output(self) -> Node | None:
        """The body's result; None for a function without one."""
        return _node(self, self._output) if self._output is not None else None


_ARRAY_SIZE = tvm_ffi.get_global_func("ffi.ArraySize")
_ARRAY_ITEM = tvm_ffi.get_global_func("ffi.ArrayGetItem")
_KINDS: dict[str, AtomKind] = {"var": VAR, "const": CONST, "tuple": TUPLE, "item": ITEM, "call": CALL}
_CALLEE_KINDS: dict[str, AtomKind] = {"op": OP, "global": GLOBAL, "extern": EXTERN, "other": OTHER}


def _callee(d: FunctionView, e) -> tuple[AtomKind, str]:
    """(kind, name) of a callee object, once per object: ops recur at every call."""
    handle = e.__chandle__()
    names = d._cache.decoded.names
    found = names.get(handle)
    if found is None:
        category, text = ir.callee_category(e)
        found = names[handle] = (_CALLEE_KINDS[category], text)
    return found


_CALL_TIR, _PACKED, _DIRECT = range(3)


def _named(d: FunctionView, value) -> tuple[int, str, Any]:
    """How a call names its callee: (``_CALL_TIR``, F, F) for ``call_tir(F, ...)``,
    (``_PACKED``, name, the name's object) for ``call_packed("name", ...)``,
    (``_DIRECT``, callee, the op or function) otherwise."""
    op = value.op
    kind, name = _callee(d, op)
    if kind == OP and (name in ir.CALL_TIR_OPS or name in ir.PACKED_OPS) and _ARRAY_SIZE(value.args):
        first = _ARRAY_ITEM(value.args, 0)
        return (_CALL_TIR if name in ir.CALL_TIR_OPS else _PACKED), _callee(d, first)[1], first
    return _DIRECT, name, op


def _call(d: FunctionView, value) -> CallView:
    args = ir.items(value.args)
    form, callee, target = _named(d, value)
    global_var = target.__chandle__() if _callee(d, target)[0] == GLOBAL else 0
    if form == _CALL_TIR:  # call_tir(F, (inputs...))
        inner = args[1] if len(args) > 1 else None
        args = [] if inner is None else ir.items(inner.fields) if ir.kind(inner) == "tuple" else [inner]
    elif form == _PACKED:  # call_packed("name", args...)
        args = args[1:]
    atoms = []
    for arg in args:
        atoms.append(_atom(d, arg, False))
        if atoms[-1].kind == TUPLE:
            atoms.extend(_atom(d, f, True) for f in ir.items(arg.fields))
    return CallView(callee, global_var, tuple(atoms), tuple(a.handle for a in atoms))


def _atom(d: FunctionView, e, is_field: bool) -> Atom:
    kind = _KINDS.get(ir.kind(e))
    if kind is None:
        return Atom(_callee(d, e)[0], e.__chandle__(), 0, is_field)
    return Atom(kind, e.__chandle__(), _type(d._cache, e) if kind == VAR or kind == CONST else 0, is_field)


def _node(d: FunctionView, e) -> Node:
    kind = _KINDS.get(ir.kind(e))
    if kind == VAR or kind == CONST:
        return Node(kind, e.__chandle__(), _type(d._cache, e))
    if kind == TUPLE:
        return Node(TUPLE, e.__chandle__(), fields=tuple(_node(d, f) for f in ir.items(e.fields)))
    if kind == ITEM:
        return Node(ITEM, e.__chandle__(), of=_node(d, e.tuple_value), item=int(e.index))
    if kind == CALL:
        return Node(CALL, e.__chandle__())
    callee_kind, text = _callee(d, e)
    return Node(callee_kind, e.__chandle__(), name=text)


# -- reading a function ---------------------------------------------------------


@overload
def read(func: Any, old: None = None, types: bool = False, decoded: Decoded | None = None) -> FunctionView: ...
@overload
def read(func: Any, old: Any, types: bool = False, decoded: Decoded | None = None) -> FunctionView | None: ...
def read(func, old=None, types=False, decoded=None):
    """The view of one Relax function. Bindings that ``old`` (the function before a
    pass) has too are left out but for their vars' handles: a pass keeps most binding
    objects, and the tracker knows the rest of them already. None when ``func`` has
    all of ``old``'s params, bindings and result: many passes rebuild a function they
    changed nothing in. ``types`` asks for each var's type (origin assignment does);
    ``decoded`` is where values already read are found (default: the view's own; a
    typed view always has its own, whose calls carry their arguments' types)."""
    shared = decoded if decoded is not None else Decoded()
    params = ir.items(func.params)
    binds = ir.bindings(func)
    out = ir.function_output(func)
    handles = shared.bindings_of[func.__chandle__()] = [b.__chandle__() for b in binds]
    known: set[int] = set()
    if old is not None:
        before = shared.bindings_of.get(old.__chandle__())
        if before is None:
            before = [b.__chandle__() for b in ir.bindings(old)]
        if (
            handles == before
            and _handles(params) == _handles(ir.items(old.params))
            and _handles([out]) == _handles([ir.function_output(old)])
        ):
            return None
        known = set(before)
    kept = [h in known for h in handles] if known else [False] * len(binds)
    written = [None if k else b for b, k in zip(binds, kept)]
    value_objects = [None if b is None else b.value for b in written]
    changed = [position for position, k in enumerate(kept) if not k]
    var_of = shared.var_of
    for h, b in zip(handles, binds):
        if h not in var_of:  # a binding seen in an earlier read has its var's handle known
            var_of[h] = b.var.__chandle__()
    cache = _Cache(types, None if types else shared)
    return FunctionView(
        params=tuple(_handles(params)),
        param_names=tuple(p.name for p in params),
        param_types=tuple(_type(cache, p) for p in params),
        vars=[var_of[h] for h in handles],
        values=[0 if v is None else v.__chandle__() for v in value_objects],
        kinds=[-1 if v is None else _KINDS.get(ir.kind(v), OTHER) for v in value_objects],
        changed=changed,
        var_types=[_type(cache, b.var) for b in binds] if types else [TYPES_NOT_ASKED] * len(binds),
        types=cache.table,
        bindings=written,
        value_objects=value_objects,
        output=out,
        cache=cache,
    )


class SharedReads:
    """``read`` with each result kept for the build: verification reads the functions
    the tracker read, in the same order, and finds them read. A typed read serves an
    untyped one. Lives as long as one traced build."""

    def __init__(self):
        self._views: dict[tuple[int, int, bool], FunctionView | None] = {}
        self._decoded = Decoded()  # every view's values, read once for the build

    def read(self, func, old=None, types: bool = False) -> FunctionView | None:
        """The module's ``read`` of ``func`` after ``old``, once per build for each
        (``func``, ``old``, ``types``); an untyped read is served a typed view read before."""
        key = (func.__chandle__(), old.__chandle__() if old is not None else 0, types)
        if key not in self._views:
            typed = (key[0], key[1], True)
            self._views[key] = self._views[typed] if typed in self._views else read(func, old, types, self._decoded)
        return self._views[key]


def _handles(objects) -> list[int]:
    return [o.__chandle__() if o is not None else 0 for o in objects]


def _tensor_types(decoded: Decoded, ty) -> TensorTypes:
    """A type's tensors, read once per distinct type of the build (by structural hash:
    reading a shape costs more than hashing it); none for no type."""
    if ty is None:
        return ()
    key = tvm_ffi.structural_hash(ty)
    found = decoded.tensor_types.get(key)
    if found is None:
        found = decoded.tensor_types[key] = tuple(ir.tensor_types(ty))
    return found


def _type(cache: _Cache, expr) -> int:
    """The index of an expression's type in a typed view's table of distinct types, once
    per expression; ``TYPES_NOT_ASKED`` in an untyped one."""
    if not cache.typed:
        return TYPES_NOT_ASKED
    found = cache.types.get(expr.__chandle__())
    if found is None:
        tensors = _tensor_types(cache.decoded, ir.expr_type(expr))
        found = cache.indices.get(tensors)
        if found is None:
            cache.table.append(tensors)
            found = cache.indices[tensors] = len(cache.table) - 1
        cache.types[expr.__chandle__()] = found
    return found
