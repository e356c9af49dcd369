"""A Relax function read in one go, as plain ints and strings.

The tracker reads every function after every pass. ``read(func)`` returns the whole
function as a ``FunctionView``: handles (object addresses, which key the tracker's tables),
names, and every value as a flat prefix-order *stream* of ``(kind, handle, payload)``
triples, so the rules compare Python ints instead of TVM objects. Two shortcuts keep
re-reading cheap: a binding a pass kept is left out but for
its var's handle, and a function rebuilt around the same bindings is not read again.

Stream payloads: a var or constant's type (see ``TYPES_NOT_ASKED``); a
tuple's field count, its fields following; a projection's index, its tuple following;
a call's argument count, its callee then its arguments following; a callee's name
(an index into the string table). Each call binding's value is followed by its *call
record*, the call as the tracker compares calls: ``call(view, position)`` gives it as
a ``CallView``, ``binding(view, position)`` a written binding as a ``BindingView``.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

import tvm_ffi
from attrs import define

from . import ir

OTHER, VAR, CONST, TUPLE, ITEM, CALL, OP, GLOBAL, EXTERN = range(9)
FIELD = 16  # added to the kind of an argument atom that is a field of a tuple argument
_HEAD = 4  # n_params, n_bindings, output offset, n_changed
# A type is the string-table index of its text, or one of these. The text holds each
# tensor's dtype and dims, split by ASCII separators: a printed symbolic dim may hold
# commas and brackets, never those.
DIM, DTYPE, TENSOR = "\x1f", "\x1e", "\x1d"
TYPES_NOT_ASKED = -2
Ints = array  # of int64 words


@define(frozen=True, slots=True)
class FunctionView:
    """A function as the tracker reads it. The int columns are ``array('q')``: compact,
    and nothing in them for the garbage collector to walk."""

    params: Ints
    param_names: list[str]
    param_types: Ints
    vars: Ints  # of the bindings, in order
    values: Ints
    name_at: Ints  # var names, as string-table indices
    var_types: Ints
    value_at: Ints  # where each binding's value starts in the stream; -1: known binding
    call_at: Ints  # where each call binding's call record starts; -1: not a call
    output_at: int  # where the body's result starts, -1 without one
    stream: Ints
    strings: list[str]
    changed: list[int]  # positions of the bindings written in full

    @property
    def partial(self) -> bool:
        """Some bindings were known (``read(func, old)``) and left out."""
        return len(self.changed) < len(self.vars)


# -- reading the stream ---------------------------------------------------------

def node(d, at: int) -> tuple[tuple, int]:
    """The expression at ``at`` as ``(kind, handle, payload)`` and where the next
    starts. Payload: type (var, const), field nodes (tuple), the tuple node
    (item, followed by the index as a fourth element), ``(callee node, argument
    nodes)`` (call), the name (callees)."""
    s = d.stream
    kind, handle, payload = s[at], s[at + 1], s[at + 2]
    at += 3
    if kind == VAR or kind == CONST:
        return (kind, handle, payload), at
    if kind == TUPLE or kind == CALL:
        if kind == CALL:
            callee, at = node(d, at)
        parts = []
        for _ in range(payload):
            if s[at] == VAR or s[at] == CONST:  # most arguments: read here, not by a call
                parts.append((s[at], s[at + 1], s[at + 2]))
                at += 3
            else:
                part, at = node(d, at)
                parts.append(part)
        return (kind, handle, parts if kind == TUPLE else (callee, parts)), at
    if kind == ITEM:
        inner, at = node(d, at)
        return (kind, handle, inner, payload), at
    return (kind, handle, d.strings[payload]), at


def value(d: FunctionView, position: int) -> tuple:
    """The value node of a binding written in full (see ``FunctionView.changed``)."""
    return node(d, d.value_at[position])[0]


def output(d: FunctionView) -> tuple | None:
    return node(d, d.output_at)[0] if d.output_at >= 0 else None


def call_parts(call: tuple) -> tuple[str, list, int | None]:
    """(callee name, tensor-carrying argument nodes, GlobalVar handle or None) of a
    call node. ``call_tir(F, (a, b))`` and the lowered ``F(a, b, out)`` both name
    callee F, so the two forms compare alike."""
    callee, args = call[2]
    category, name = _category(callee)
    if category == "call_tir" and args:
        target = args[0]
        inner = args[1] if len(args) > 1 else None
        inner_args = [] if inner is None else inner[2] if inner[0] == TUPLE else [inner]
        return _category(target)[1], inner_args, target[1] if target[0] == GLOBAL else None
    if category == "packed" and args:
        return _category(args[0])[1], args[1:], None
    return name, args, callee[1] if category == "global" else None


def callee_of(d: FunctionView, position: int) -> str | None:
    """The callee of a call binding, as ``call_parts`` names it; None otherwise."""
    at = d.call_at[position]
    return d.strings[d.stream[at]] if at >= 0 else None


class CallView(NamedTuple):
    """A call binding as the tracker compares calls (what ``call_parts`` says, without
    building nodes). ``atoms`` is a flat array of ``kind, handle, type`` triples (type 0
    but for vars and constants): each argument, a tuple argument followed by its fields
    with ``FIELD`` added to their kind; flat so that tokens of every argument are looked
    up in one pass (``keys.ValueKeys.key``)."""

    callee: str
    global_var: int  # the GlobalVar handle of a call of a function of the module, else 0
    atoms: Ints

    def arguments(self) -> list[tuple[int, int]]:
        """(kind, handle) of the call's own arguments, tuple fields left out."""
        atoms = self.atoms
        return [(atoms[i], atoms[i + 1]) for i in range(0, len(atoms), 3) if atoms[i] < FIELD]


class BindingView(NamedTuple):
    """One binding written in full: its var, its name, and either the call it makes or,
    for an alias, tuple, projection or constant, its value node."""

    position: int
    var: int
    name: str
    call: CallView | None
    value: tuple | None  # None for a call


def call(d: FunctionView, position: int) -> CallView | None:
    """The call a binding written in full makes; None when it is not a call."""
    at = d.call_at[position]
    if at < 0:
        return None
    s = d.stream
    return CallView(d.strings[s[at]], s[at + 1], s[at + 3:at + 3 + 3 * s[at + 2]])


def binding(d: FunctionView, position: int) -> BindingView:
    """A binding written in full (see ``FunctionView.changed``)."""
    made = call(d, position)
    return BindingView(position, d.vars[position], d.strings[d.name_at[position]], made,
                       value(d, position) if made is None else None)


def _category(callee: tuple) -> tuple[str, str]:
    kind, _, name = callee
    if kind == OP:
        return ("call_tir" if name in ir.CALL_TIR_OPS else "packed" if name in ir.PACKED_OPS else "op"), name
    if kind == GLOBAL:
        return "global", name
    return "extern", name if isinstance(name, str) else _KIND_NAMES[kind]


_KIND_NAMES = {VAR: "Var", CONST: "Constant", TUPLE: "Tuple", ITEM: "TupleGetItem", CALL: "Call"}


# -- writing it -----------------------------------------------------------------

def read(func, old=None, types: bool = False) -> FunctionView | None:
    """The view of one Relax function. Bindings that ``old`` (the function before a
    pass) has too are left out but for their vars' handles: a pass keeps most binding
    objects, and the tracker knows the rest of them already. None when ``func`` has
    all of ``old``'s params, bindings and result: many passes rebuild a function they
    changed nothing in. ``types`` asks for each var's type (origin assignment does)."""
    params = ir.items(func.params)
    binds = ir.bindings(func)
    out = ir.function_output(func)
    known = [b.__chandle__() for b in ir.bindings(old)] if old is not None else []
    if old is not None and _handles(params) == _handles(ir.items(old.params)) \
            and _handles(binds) == known and _handles([out]) == _handles([ir.function_output(old)]):
        return None
    known = set(known)
    w = _Writer(types)
    head = [len(params), len(binds), -1, 0]
    for p in params:
        head += (p.__chandle__(), w.append(p.name), w.type_(p))
    columns: list[list[int]] = [[] for _ in range(6)]
    changed: list[int] = []
    for position, b in enumerate(binds):
        if b.__chandle__() in known:
            for column, word in zip(columns, (b.var.__chandle__(), 0, -1, TYPES_NOT_ASKED, -1, -1)):
                column.append(word)
            continue
        var = b.var
        changed.append(position)
        name, type_, at = w.append(var.name), w.type_(var), len(w.stream)
        w.expr(b.value)
        record = w.write_call(at)
        for column, word in zip(columns, (var.__chandle__(), b.value.__chandle__(), name, type_, at, record)):
            column.append(word)
    if out is not None:
        head[2] = len(w.stream)
        w.expr(out)
    head[3] = len(changed)
    return _decode(array("q", head + [x for column in columns for x in column] + w.stream + changed), w.strings)


class SharedReads:
    """``read`` with each result kept for the build: verification reads the functions
    the tracker read, in the same order, and finds them read. A typed read serves an
    untyped one. Lives as long as one traced build."""

    def __init__(self):
        self._views: dict[tuple[int, int, bool], FunctionView | None] = {}

    def read(self, func, old=None, types: bool = False) -> FunctionView | None:
        key = (func.__chandle__(), old.__chandle__() if old is not None else 0, types)
        if key not in self._views:
            typed = (key[0], key[1], True)
            self._views[key] = self._views[typed] if typed in self._views else read(func, old, types)
        return self._views[key]


def _handles(objects) -> list[int]:
    return [o.__chandle__() if o is not None else 0 for o in objects]


_SHAPES: dict[str, tuple[tuple[tuple, ...], tuple[str, ...]]] = {}


def shapes_and_dtypes(d: FunctionView, type_: int) -> tuple[tuple[tuple, ...], tuple[str, ...]]:
    """(shapes, dtypes) of the tensors in a view's type, memoised by its text."""
    text = d.strings[type_]
    found = _SHAPES.get(text)
    if found is None:
        if len(_SHAPES) > 100_000:  # a long-lived process building many models
            _SHAPES.clear()
        tensors = [t.split(DTYPE) for t in text.split(TENSOR)] if text else []
        found = _SHAPES[text] = (tuple(tuple(ir.dim(v) for v in dims.split(DIM)) if dims else () for _, dims in tensors),
                                 tuple(dtype for dtype, _ in tensors))
    return found


_TYPE_TEXTS: dict[int | None, str] = {None: ""}  # structural hash -> type text


def _type_text(ty) -> str:
    if ty is None:
        return ""
    return TENSOR.join(dtype + DTYPE + DIM.join(map(str, shape)) for shape, dtype in ir.tensor_types(ty))


def _decode(words: Ints, strings: list[str]) -> FunctionView:
    n_params, n, output_at, n_changed = words[0], words[1], words[2], words[3]
    p = words[_HEAD:_HEAD + 3 * n_params]
    c = _HEAD + 3 * n_params
    stream_at = c + 6 * n
    value_at = words[c + 4 * n:c + 5 * n]
    return FunctionView(
        params=p[0::3], param_names=[strings[i] for i in p[1::3]], param_types=p[2::3],
        vars=words[c:c + n], values=words[c + n:c + 2 * n],
        name_at=words[c + 2 * n:c + 3 * n], var_types=words[c + 3 * n:c + 4 * n],
        value_at=value_at, call_at=words[c + 5 * n:stream_at], output_at=output_at,
        stream=words[stream_at:len(words) - n_changed], strings=strings, changed=words[len(words) - n_changed:].tolist(),
    )


class _Writer:
    """Writes a view, attribute by attribute. It has a view's ``stream`` and
    ``strings``, so ``node`` reads it while it is written."""

    def __init__(self, types: bool):
        self.types = types
        self.stream: list[int] = []
        self.strings: list[str] = []
        self._index: dict[str, int] = {}
        self._types_of: dict[int, int] = {}
        self._callees: dict[int, tuple[int, int]] = {}

    def string(self, text: str) -> int:
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = self.append(text)
        return found

    def append(self, text: str) -> int:
        """A var's name: not interned (names rarely repeat; a look-up per name costs more)."""
        self.strings.append(text)
        return len(self.strings) - 1

    def type_(self, expr) -> int:
        """Once per expression, and the text once per distinct type
        (by structural hash: reading a shape costs more than hashing it)."""
        if not self.types:
            return TYPES_NOT_ASKED
        found = self._types_of.get(expr.__chandle__())
        if found is None:
            ty = ir.expr_type(expr)
            key = tvm_ffi.structural_hash(ty) if ty is not None else None
            text = _TYPE_TEXTS.get(key)
            if text is None:
                if len(_TYPE_TEXTS) > 100_000:  # a long-lived process building many models
                    _TYPE_TEXTS.clear()
                    _TYPE_TEXTS[None] = ""
                text = _TYPE_TEXTS[key] = _type_text(ty)
            found = self._types_of[expr.__chandle__()] = self.string(text)
        return found

    def expr(self, e) -> None:
        kind = ir.kind(e)
        if kind == "var":
            self.put(VAR, e, self.type_(e))
        elif kind == "const":
            self.put(CONST, e, self.type_(e))
        elif kind == "tuple":
            fields = ir.items(e.fields)
            self.put(TUPLE, e, len(fields))
            for f in fields:
                self.expr(f)
        elif kind == "item":
            self.put(ITEM, e, int(e.index))
            self.expr(e.tuple_value)
        elif kind == "call":
            args = ir.items(e.args)
            self.put(CALL, e, len(args))
            self.expr(e.op)
            for a in args:
                self.expr(a)
        else:
            self.callee(e)

    def callee(self, e) -> None:
        """Named once per object: ops recur at every call site."""
        handle = e.__chandle__()
        found = self._callees.get(handle)
        if found is None:
            category, name = ir.callee_category(e)
            found = self._callees[handle] = (_CALLEE_KINDS[category], self.string(name))
        self.stream += (found[0], handle, found[1])

    def put(self, kind: int, e, payload: int) -> None:
        self.stream += (kind, e.__chandle__(), payload)

    def write_call(self, at: int) -> int:
        """The record of the call written at ``at``; -1 when it is not a call."""
        if self.stream[at] != CALL:
            return -1
        callee, args, gv = call_parts(node(self, at)[0])
        record = len(self.stream)
        self.stream += (self.string(callee), gv or 0, 0)
        for arg in args:
            self.stream += _atom(arg, 0)
            if arg[0] == TUPLE:
                for field in arg[2]:
                    self.stream += _atom(field, FIELD)
        self.stream[record + 2] = (len(self.stream) - record - 3) // 3
        return record


_CALLEE_KINDS = {"op": OP, "global": GLOBAL, "extern": EXTERN, "other": OTHER}


def _atom(arg: tuple, flag: int) -> tuple[int, int, int]:
    return arg[0] + flag, arg[1], arg[2] if arg[0] == VAR or arg[0] == CONST else 0
