"""The tracker: which binding after a pass carries which origins.

A *token* stands for one value of the program as the passes see it; it carries a set
of origin ids. Tokens outlive passes: a binding that a pass rewrites is given the
token of the binding it came from. A binding whose Var object survived the pass keeps
its token (identity), unless the var named another value and now calls something of
its own, or AlterOpImpl reused it for a layout transform. A binding whose Var is new
is offered to the rules of ``rules.DEFAULT_RULES`` in order (value key, replay,
implementation swap, same inputs); names are never evidence.

A binding no rule explains is new: *inserted* when it only moves data (a layout
transform, a cast), otherwise *unresolved*; both get an origin of their own,
attributed to the layers they serve and marked with the pass.

The tracker owns the tables the rules read (``tok_origins``, ``keys``,
``canon_table``, ``recipes``) and the helpers they call (``match``, ``new_token``,
``alias``, ``item_token``, ``resolve``, ``raw``, ``var_inputs``).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from attrs import define, field

from . import reader
from . import ir
from .reader import CONST, FIELD, ITEM, TUPLE, VAR
from ..model import ops
from ..model.journal import Change, PassEvent
from ..model.origin import INSERTED, OP, UNRESOLVED, Origin
from .origins import OriginTable
from .rules import DEFAULT_RULES, Binding

IDENTITY, PART, NEW = "identity", "part", "new"


@define(frozen=True)
class _Index:
    """Look-ups into a function as the last pass left it, for the rules after identity."""

    by_args: dict[tuple, list[int]]  # argument tokens -> tokens
    tok_var: dict[int, tuple[int, str]]  # token -> (var handle, callee)
    by_inputs: dict[tuple, list[tuple[int, tuple]]]  # (callee, var argument tokens) -> (token, all argument tokens)


@define
class _FunctionState:
    """A function as the last pass left it, as handles and tokens: no Python wrapper
    outlives the walk, so none piles up for the garbage collector. The index serves
    only the rare binding that identity does not explain, so it is built on first use."""

    func: object
    view: reader.FunctionView
    tokens: list[int]  # token of each op binding, in order
    origins: frozenset[str]
    bookkeeping: set[int]  # var handles of memory/shape bookkeeping bindings
    _index: _Index | None = None

    def index(self, tracker: "Tracker") -> _Index:
        if self._index is None:
            by_args, tok_var, by_inputs = {}, {}, {}
            d = _full(self.view, self.func, tracker.read)
            for position, handle in enumerate(d.vars):
                tok = tracker._atom_tok.get(handle)
                if tok is None:
                    continue
                record = reader.call_record(d, position)
                if record is not None:
                    callee, _, atoms = record
                    tok_var[tok] = (handle, callee)
                    args = tracker._key(callee, atoms)[1]
                    by_args.setdefault(args, []).append(tok)
                    by_inputs.setdefault((callee, tracker.var_inputs(atoms)), []).append((tok, args))
            self._index = _Index(by_args, tok_var, by_inputs)
        return self._index


@define
class _Walk:
    """Scratch state of one function walk."""

    func: object
    d: reader.FunctionView
    old: _FunctionState | None
    read: object = reader.read  # the tracker's
    claimed: set[int] = field(factory=set)
    bookkeeping: set[int] = field(factory=set)
    changes: list[tuple[int, int, str, str | None]] = field(factory=list)  # (token, position, rule, callee)
    new: list[tuple[int, str]] = field(factory=list)  # (token, callee) with no rule
    # filled only when some binding is new, to tell whom it serves:
    rewritten: set[int] = field(factory=set)
    uses: dict[int, list[int]] = field(factory=dict)
    args_of: dict[int, list[int]] = field(factory=dict)
    recipes: dict[int, tuple | None] = field(factory=dict)  # callee GlobalVar handle -> its recipe
    _present: set[int] | None = None
    _callee_of: dict[int, str] | None = None

    def callee_of(self) -> dict[int, str]:
        """var handle -> callee after the pass; built only when the args rule asks."""
        if self._callee_of is None:
            self._callee_of = {}
            d = _full(self.d, self.func, self.read)
            for position, handle in enumerate(d.vars):
                callee = reader.callee_of(d, position)
                if callee is not None:
                    self._callee_of[handle] = callee
        return self._callee_of

    def present(self) -> set[int]:
        """Handles of the vars bound after the pass; built only when a rule asks."""
        if self._present is None:
            self._present = set(self.d.vars)
        return self._present


class Tracker:
    """Follows origins from pass to pass; fed, pass by pass, the functions each one left."""

    def __init__(self, table: OriginTable, read=reader.read, rules=DEFAULT_RULES):
        self.read = read  # of each function a pass changed: ``reader.read``
        self.rules = tuple(rules)  # tried in order on each binding whose Var is new
        self.origins: dict[str, Origin] = dict(table.origins)
        self._input_views = dict(table.views)  # popped as used; the table stays as it was
        self.edges = table.edges
        self.tok_origins: list[tuple[str, ...]] = []
        # token -> the token whose value it carries (a layout change, a fused group's
        # output). Flat: only a new token is aliased, to a canonical one (``_alias``).
        self.canon_table: dict[int, int] = {}
        # the token of each var and constant, by handle: one table, so that most keys
        # are looked up at C speed (``_key``); handles of distinct live objects differ
        self._atom_tok: dict[int, int] = {}
        self._var_value: dict[int, int] = {}
        self._aliases: set[int] = set()  # vars bound to another value (an alias, a tuple, a field)
        self._param_tok: dict[tuple[str, str], int] = {}
        self.keys: dict[tuple, tuple[int, ...]] = {}
        self._unregistered: dict[int, tuple[reader.FunctionView, int, int]] = {}  # var handle -> (view, position, token)
        self._pins: list = []
        self.recipes: dict[int, tuple | None] = {}
        self._funcs: dict[str, _FunctionState] = {}
        self._pass_index = 0
        self.last_functions: dict[str, object] = {}
        self.events: list[PassEvent] = []
        self.changes: dict[int, tuple[Change, ...]] = {}  # token -> its changes, pass by pass
        self.eliminated: dict[str, str] = {}
        self._seed(table)

    # -- public ---------------------------------------------------------------

    def start(self, functions: dict[str, object]) -> None:
        """Walk the input's functions (``ir.function_map``) once, so their bindings'
        keys are known to every rule."""
        self._pin(functions)
        for name, func in ir.model_functions(functions).items():
            self._funcs[name] = self._process(functions, name, func, "input", None)
        self.last_functions = functions

    def observe(self, functions: dict[str, object], pass_name: str) -> None:
        """Account for one pass, given the functions of the module it produced."""
        self._pass_index += 1
        model, changed = changed_functions({name: state.func for name, state in self._funcs.items()}, functions)
        if not model:
            return  # a pass over a TIR-only sub-module
        self._pin(functions)
        for name in changed:
            self._funcs[name] = self._process(functions, name, model[name], pass_name, self._funcs.get(name))
        for name in [n for n in self._funcs if n not in model]:
            gone = self._funcs.pop(name)
            self._record_elimination(gone.origins, pass_name)
        self.last_functions = functions  # only once all of them are accounted for

    def origins_of_token(self, tok: int) -> tuple[str, ...]:
        return self.tok_origins[tok]

    def token_of(self, var_handle: int) -> int | None:
        return self._atom_tok.get(var_handle)

    def canonical(self, tok: int) -> int:
        return self._canon_of(tok)

    def argument_tokens(self, atoms: reader.Ints, canonical: bool = True) -> list[int | None]:
        """The token of each of a call record's own arguments (tuple fields left out),
        canonical unless asked otherwise; None for one that carries no token."""
        toks = [self._atom_tok.get(atoms[i + 1]) for i in range(0, len(atoms), 3) if atoms[i] < FIELD]
        return list(map(self.canon_table.get, toks, toks)) if canonical else toks

    # -- set-up ---------------------------------------------------------------

    def new_token(self, origins: Iterable[str]) -> int:
        self.tok_origins.append(tuple(sorted(set(origins))))  # tuples of str: not GC-tracked
        return len(self.tok_origins) - 1

    def _seed(self, table: OriginTable) -> None:
        self._pin(table.functions)
        tok_origins, atom_tok = self.tok_origins, self._atom_tok
        for handle, oid in table.by_var.items():
            atom_tok[handle] = len(tok_origins)
            tok_origins.append((oid,))

    def _pin(self, obj) -> None:
        """Keep IR objects alive. Handles key every table here, so the C++ objects
        behind them must outlive the tracking; pinning each pass's function map (every
        function the tracker reads is in one) does that without holding (and making
        the GC walk) a wrapper per binding."""
        self._pins.append(obj)

    # -- one function ---------------------------------------------------------

    def _process(self, functions, fname, func, pass_name, old) -> _FunctionState:
        d = self._input_views.pop(fname, None)  # origin assignment read the input's functions
        if d is None:
            d = self.read(func, old.func if old is not None else None)
            if d is None:  # the same bindings in a rebuilt function: no binding to account for
                return self._rebuilt(fname, func, pass_name, old)
        walk = _Walk(func=func, d=d, old=old, read=self.read)
        for handle, name in zip(d.params, d.param_names):
            self._param_token(fname, handle, name)
        atom_tok, var_value = self._atom_tok, self._var_value
        # A binding object the pass kept (the view leaves it out) changed in nothing:
        # its var's token is all there is to know. Bindings the pass rewrote cannot
        # change the tokens of vars bound before them, so these can be read first.
        toks = [atom_tok.get(var) for var in d.vars]
        if d.partial:
            walk.bookkeeping = {var for var, tok, at in zip(d.vars, toks, d.value_at)
                                if at < 0 and tok is None and var in old.bookkeeping}
        for position in d.changed:
            handle = d.vars[position]
            tok = atom_tok.get(handle)
            if tok is not None and var_value.get(handle) != d.values[position]:
                if handle in self._aliases and d.call_at[position] >= 0:
                    # a var that named another binding's value now calls something of its
                    # own (ConvertLayout's permute into the output var): not that value
                    del atom_tok[handle]
                    self._aliases.discard(handle)
                    tok = self._bind(functions, position, walk)
                elif tok in walk.claimed and ops.is_data_movement(reader.callee_of(d, position) or ""):
                    del atom_tok[handle]  # AlterOpImpl reused the var for a layout transform
                    tok = self._bind(functions, position, walk)
                else:
                    tok = self._rewritten_in_place(position, handle, tok, walk)
            elif tok is None:
                tok = self._bind(functions, position, walk)
            toks[position] = tok
        tokens = [tok for tok in toks if tok is not None]
        self._finish_new(fname, pass_name, walk)
        if old is not None and tokens == old.tokens:
            origins = old.origins  # the common case: no op appeared or went away
        else:
            origins = frozenset().union(*(self.tok_origins[t] for t in tokens))
        state = _FunctionState(func=func, view=d, tokens=tokens, origins=origins, bookkeeping=walk.bookkeeping)
        self._record_event(fname, pass_name, walk, old, state)
        return state

    def _rebuilt(self, fname, func, pass_name, old: _FunctionState) -> _FunctionState:
        state = _FunctionState(func=func, view=old.view, tokens=old.tokens, origins=old.origins,
                               bookkeeping=old.bookkeeping, index=old._index)
        self._record_event(fname, pass_name, _Walk(func=func, d=old.view, old=old), old, state)
        return state

    def _rewritten_in_place(self, position, handle, tok, walk) -> int:
        """Rule 1, identity: the Var survived with a new value (LegalizeOps, FuseTIR).
        The new value's key is registered lazily (``_flush``): most are superseded by
        the next in-place rewrite before any binding looks keys up."""
        self._var_value[handle] = walk.d.values[position]
        if self._pass_index == 0:  # the input's own op bindings: only their keys are news
            self._unregistered[handle] = (walk.d, position, tok)
            return tok
        callee = reader.callee_of(walk.d, position)
        if callee is not None and ops.is_bookkeeping(callee):
            return tok  # an output buffer re-planned by the memory passes: not a change of the op
        if callee is not None:
            self._unregistered[handle] = (walk.d, position, tok)
        walk.changes.append((tok, position, IDENTITY, callee))
        return tok

    def _param_token(self, fname, handle, name) -> None:
        if handle in self._atom_tok:
            return
        key = (fname, name)
        if key not in self._param_tok:
            self._param_tok[key] = self.new_token(())
        self._atom_tok[handle] = self._param_tok[key]

    def _bind(self, functions, position, walk: _Walk) -> int | None:
        """A binding whose Var is new to us: the first of ``self.rules`` that names a
        token, else a new token."""
        d = walk.d
        handle = d.vars[position]
        record = reader.call_record(d, position)
        if record is None:
            self._var_value[handle] = d.values[position]
            tok = self._structural(reader.value(d, position))
            if tok is not None:
                self._atom_tok[handle] = tok
                self._aliases.add(handle)
            return tok
        callee, gv, atoms = record
        if ops.is_bookkeeping(callee):
            walk.bookkeeping.add(handle)
            return None
        self._var_value[handle] = d.values[position]
        self._flush()
        key = self._key(callee, atoms)
        binding = Binding(position, callee, gv, atoms, key[1])
        tok, rule = None, NEW
        for candidate in self.rules:
            tok = candidate.find(self, functions, binding, walk)
            if tok is not None:
                rule = candidate.name
                break
        if tok is None:
            tok = self.new_token(())
            walk.new.append((tok, callee))
            if ops.is_data_movement(callee) and key[1]:
                self.alias(tok, key[1][0])  # a layout change keeps the value's identity
        walk.changes.append((tok, position, rule, callee))
        walk.claimed.add(tok)
        self._atom_tok[handle] = tok
        self._add_key(key, tok)
        self._claim_outputs(atoms, tok, walk)
        return tok

    def _add_key(self, key, tok) -> None:
        bucket = self.keys.get(key, ())
        if tok not in bucket:
            self.keys[key] = bucket + (tok,)  # a tuple of ints: the GC need not track it

    def _flush(self) -> None:
        """Register the keys of values that identity carried, before any look-up. They
        are read again by position from their function's view."""
        if not self._unregistered:
            return
        for d, position, tok in self._unregistered.values():
            callee, _, atoms = reader.call_record(d, position)
            self._add_key(self._key(callee, atoms), tok)
        self._unregistered = {}

    def _link_uses(self, walk) -> None:
        """Producer/consumer links of the bindings this pass rewrote; only needed to
        tell whom an inserted op serves."""
        for tok, position, _, _ in walk.changes:
            walk.rewritten.add(tok)
            record = reader.call_record(walk.d, position)
            args = reader.arguments(record[2]) if record is not None else [reader.value(walk.d, position)[:2]]
            walk.args_of[tok] = [t for t in (self.raw(kind, handle) for kind, handle in args) if t is not None]
            for t in walk.args_of[tok]:
                walk.uses.setdefault(t, []).append(tok)

    def _structural(self, value) -> int | None:
        """Aliases, tuples and projections carry the origins of what they hold."""
        kind = value[0]
        if kind == ITEM:
            tup = self.raw(*value[2][:2])
            return None if tup is None else self.item_token(tup, value[3])
        if kind == TUPLE:
            parts = [self.raw(*f[:2]) for f in value[2]]
            key = ("tuple", tuple(self._canon_of(p) for p in parts if p is not None))
            found = self.keys.get(key)
            if found:
                return found[0]
            tok = self.new_token(frozenset().union(*(self.tok_origins[p] for p in parts if p is not None)) if parts else ())
            self.keys[key] = (tok,)
            for i, part in enumerate(parts):  # (a, b)[0] is a
                if part is not None:
                    self.keys[("item", tok, i)] = (part,)
            return tok
        return self._atom_tok.get(value[1]) if kind == VAR else None  # an alias

    def item_token(self, tup: int, index: int) -> int:
        """The token of one field of a tuple value: one per (tuple, index), so the
        three outputs of a split are three values to the rules, each carrying the
        origins of what made the tuple."""
        key = ("item", self._canon_of(tup), index)
        found = self.keys.get(key)
        if found:
            return found[0]
        tok = self.new_token(self.tok_origins[tup])
        self.keys[key] = (tok,)
        return tok

    def _claim_outputs(self, atoms, tok, walk) -> None:
        """Destination-passing calls write into their trailing allocations: those vars
        now hold this call's value."""
        if not walk.bookkeeping:
            return
        for kind, handle in reader.arguments(atoms):
            if kind == VAR and handle in walk.bookkeeping:
                self._atom_tok[handle] = tok

    # -- keys and rules -------------------------------------------------------

    def raw(self, kind, handle) -> int | None:
        if kind == VAR:
            return self._atom_tok.get(handle)
        if kind == CONST:
            return self._const_token(handle)
        return None

    def _const_token(self, handle: int) -> int:
        tok = self._atom_tok.get(handle)
        if tok is None:
            tok = self._atom_tok[handle] = self.new_token(())
        return tok

    def _canon_of(self, tok: int) -> int:
        return self.canon_table.get(tok, tok)

    def alias(self, new_tok: int, tok: int) -> None:
        self.canon_table[new_tok] = self.canon_table.get(tok, tok)

    def resolve(self, kind, handle) -> int | None:
        """An argument's canonical token (a constant seen for the first time gets one)."""
        if kind == VAR:
            tok = self._atom_tok.get(handle)
        elif kind == CONST:
            tok = self._const_token(handle)
        else:
            return None
        return None if tok is None else self._canon_of(tok)

    def _key(self, callee, atoms) -> tuple:
        """(callee, canonical tokens of the vars and constants among its arguments and
        their tuples' fields): what a value computes, whatever its var."""
        canon, toks = self.canon_table, tuple(map(self._atom_tok.get, atoms[1::3]))  # hot: at C speed
        if None not in toks:
            return (callee, tuple(map(canon.get, toks, toks)))
        resolved = []
        for i, tok in zip(range(0, len(atoms), 3), toks):
            if tok is None:  # a constant seen first, a tuple, another atom
                tok = self.resolve(atoms[i] % FIELD, atoms[i + 1])
            if tok is not None:
                resolved.append(canon.get(tok, tok))
        return (callee, tuple(resolved))

    def match(self, key, walk) -> int | None:
        found = self.keys.get(key)
        if not found:
            return None
        for tok in found:
            if tok not in walk.claimed:
                return tok
        return None  # never hand one value's origins to two bindings

    def var_inputs(self, atoms) -> tuple:
        """Canonical tokens of a call's var arguments (tuple fields included), constants left out."""
        toks = (self._atom_tok.get(atoms[i + 1]) for i in range(0, len(atoms), 3) if atoms[i] % FIELD == VAR)
        return tuple(self._canon_of(t) for t in toks if t is not None)

    # -- what no rule explains ------------------------------------------------

    def _finish_new(self, fname, pass_name, walk: _Walk) -> None:
        if not walk.new:
            return
        self._link_uses(walk)
        self._parts_of_lowered_ops(walk)
        pending = {tok: callee for tok, callee in walk.new}
        for tok, callee in walk.new:
            serves = self._serves(tok, pending, walk, set())
            kind = INSERTED if ops.is_data_movement(callee) else UNRESOLVED
            layer = self.origins[serves[0]].layer if serves else f"{fname}.{ops.short_op(callee)}"
            oid = self._fresh_id(f"{kind}:{pass_name}:{ops.short_op(callee)}@{serves[0] if serves else fname}")
            self.origins[oid] = Origin(
                id=oid, layer=layer, op=callee, function=fname, index=-1,
                kind=kind, pass_name=pass_name, serves=tuple(serves),
            )
            self.tok_origins[tok] = (oid,)

    def _parts_of_lowered_ops(self, walk: _Walk) -> None:
        """A new PrimFunc call whose only consumer is an op this pass lowered in place
        (or another such part) is a part of that op: a legalization that emits several
        PrimFuncs for one op (``LegalizeOps(customize_legalize_map=...)``)."""
        lowered = {tok for tok, _, rule, callee in walk.changes
                   if rule == IDENTITY and callee is not None and ops.is_prim_func(callee)}
        parts: dict[int, int] = {}  # part token -> the lowered op's token
        for tok, callee in reversed(walk.new):  # consumers come after their producers
            consumers = set(walk.uses.get(tok, ()))
            if not ops.is_prim_func(callee) or ops.is_data_movement(callee) or len(consumers) != 1:
                continue
            (consumer,) = consumers
            whole = consumer if consumer in lowered else parts.get(consumer)
            if whole is not None:
                parts[tok] = whole
                self.tok_origins[tok] = self.tok_origins[whole]
        if parts:
            walk.new = [(tok, callee) for tok, callee in walk.new if tok not in parts]
            walk.changes = [(tok, at, PART if tok in parts else rule, callee)
                            for tok, at, rule, callee in walk.changes]

    def _serves(self, tok, pending, walk, seen) -> list[str]:
        """The model ops an inserted binding exists for: the neighbours this pass
        rewrote (consumers first), else its consumers, else its producers."""
        seen.add(tok)
        sides = (walk.uses.get(tok, []), walk.args_of.get(tok, []))
        for only_rewritten in (True, False):
            for side in sides:
                out: list[str] = []
                for other in side:
                    if other in seen or (only_rewritten and other not in walk.rewritten and other not in pending):
                        continue
                    if other in pending:
                        out.extend(self._serves(other, pending, walk, set(seen)))
                    else:
                        out.extend(o for o in sorted(self.tok_origins[other]) if self.origins[o].kind == OP)
                if out:
                    return list(dict.fromkeys(out))
        return []

    def _fresh_id(self, base: str) -> str:
        oid, n = base, 0
        while oid in self.origins:
            n += 1
            oid = f"{base}#{n}"
        return oid

    # -- events ---------------------------------------------------------------

    def _record_event(self, fname, pass_name, walk: _Walk, old, state) -> None:
        if self._pass_index == 0:
            return  # the input itself, not a pass
        new_ids = [next(iter(self.tok_origins[t])) for t, _ in walk.new]
        eliminated, merged = [], []
        if old is None or state.tokens != old.tokens:
            eliminated = sorted(old.origins - state.origins) if old is not None else []
            self._record_elimination(eliminated, pass_name)
            old_tokens = set(old.tokens) if old is not None else set()
            for tok in state.tokens:
                if tok not in old_tokens and len(self.tok_origins[tok]) > 1:
                    merged.append(tuple(sorted(self.tok_origins[tok])))
        event = PassEvent(
            index=self._pass_index, pass_name=pass_name, function=fname,
            rules=tuple(sorted(Counter(change[2] for change in walk.changes).items())),
            inserted=tuple(o for o in new_ids if self.origins[o].kind == INSERTED),
            unresolved=tuple(o for o in new_ids if self.origins[o].kind == UNRESOLVED),
            eliminated=tuple(eliminated), merged=tuple(merged),
        )
        self.events.append(event)
        history, made = self.changes, {}
        for tok, _, rule, callee in walk.changes:
            if callee is not None:
                change = made.get((callee, rule))  # immutable: one record serves every token alike
                if change is None:
                    change = made[(callee, rule)] = Change(self._pass_index, pass_name, fname, callee, rule)
                history[tok] = history.get(tok, ()) + (change,)

    def _record_elimination(self, origin_ids, pass_name) -> None:
        for oid in origin_ids:
            self.eliminated.setdefault(oid, pass_name)


def changed_functions(before: dict, functions: dict) -> tuple[dict, list[str]]:
    """The model functions a pass left (``ir.model_functions``; none after a pass over a
    TIR-only sub-module) and the names of those it changed, given the model functions
    as the pass before left them."""
    model = ir.model_functions(functions)
    return model, [name for name, func in model.items() if name not in before or not before[name].same_as(func)]


def _full(d: reader.FunctionView, func, read) -> reader.FunctionView:
    """A view with every binding, for the look-ups that need the kept ones too."""
    return read(func) if d.partial else d
