"""The tracking rules: which binding after a pass carries which origins.

A *token* stands for one value of the program as the passes see it; it carries a set
of origin ids. Tokens outlive passes: a binding that a pass rewrites is given the
token of the binding it came from, found by one of five rules, tried in order:

1. identity: the Var object survived the pass;
2. value key: ``(callee, argument tokens)`` equals a key seen before, with
   ``call_tir(F, args)`` and the lowered ``F(args, out)`` alike;
3. replay: a call of a fused (``Primitive``) function is matched through its body,
   parameters bound to this call site's arguments;
4. name: a binding of the same name and callee that the pass no longer has;
5. args: the same inputs as an old binding that is gone or now moves data (an
   implementation swapped by AlterOpImpl).

A binding no rule explains is new: *inserted* when it only moves data (a layout
transform, a cast), otherwise *unresolved*; both get an origin of their own,
attributed to the layers they serve and marked with the pass.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, NamedTuple

from attrs import define, field

from . import ir
from .origins import INSERTED, OP, UNRESOLVED, Origin, OriginTable

IDENTITY, VALUE, REPLAY, NAME, ARGS, NEW = "identity", "value", "replay", "name", "args", "new"


@define(frozen=True)
class PassEvent:
    """What one pass did to one Relax function, in origins."""

    index: int
    pass_name: str
    function: str
    rules: tuple[tuple[str, int], ...]
    inserted: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    eliminated: tuple[str, ...] = ()
    merged: tuple[tuple[str, ...], ...] = ()


class Change(NamedTuple):
    """One step of an origin's history: after pass N its op was carried by ``callee``.

    A NamedTuple rather than an attrs class: a build records one per rewritten
    binding per pass, and a tuple of str and int is cheaper to make and is not
    tracked by the garbage collector."""

    index: int
    pass_name: str
    function: str
    callee: str
    rule: str


@define(frozen=True)
class _Index:
    """Look-ups into a function as the last pass left it, for the rules after identity."""

    by_name: dict[tuple[str, str], int]  # (var name, callee) -> token
    var_names: dict[str, int]
    by_args: dict[tuple, list[int]]  # argument tokens -> tokens
    tok_var: dict[int, tuple[int, str]]  # token -> (var handle, callee)


@define
class _FunctionState:
    """A function as the last pass left it, as handles and tokens: no Python wrapper
    outlives the walk, so none piles up for the garbage collector. The index serves
    only the rare binding that identity does not explain, so it is built on first use."""

    func: object
    tokens: list[int]  # token of each op binding, in order
    origins: frozenset[str]
    var_of: dict[int, int]  # binding handle -> var handle: a binding the next pass keeps is skipped
    bookkeeping: set[int]  # var handles of memory/shape bookkeeping bindings
    _index: _Index | None = None

    def index(self, tracker: "Tracker") -> _Index:
        if self._index is None:
            by_name, var_names, by_args, tok_var = {}, {}, {}, {}
            for binding in ir.bindings(self.func):
                var = binding.var
                tok = tracker._var_tok.get(var.__chandle__())
                if tok is None:
                    continue
                var_names[var.name] = tok
                call = tracker._call(binding.value)
                if call is not None:
                    by_name[(var.name, call[0])] = tok
                    tok_var[tok] = (var.__chandle__(), call[0])
                    by_args.setdefault(tracker._key(call[0], call[1])[1], []).append(tok)
            self._index = _Index(by_name, var_names, by_args, tok_var)
        return self._index


@define
class _Walk:
    """Scratch state of one function walk."""

    func: object
    old: _FunctionState | None
    claimed: set[int] = field(factory=set)
    bookkeeping: set[int] = field(factory=set)
    changes: list[tuple[int, object, str, str | None]] = field(factory=list)  # (token, value, rule, callee)
    new: list[tuple[int, str]] = field(factory=list)  # (token, callee) with no rule
    # filled only when some binding is new, to tell whom it serves:
    rewritten: set[int] = field(factory=set)
    uses: dict[int, list[int]] = field(factory=dict)
    args_of: dict[int, list[int]] = field(factory=dict)
    recipes: dict[int, tuple | None] = field(factory=dict)  # callee GlobalVar handle -> its recipe
    _callee_of: dict[int, str] | None = None

    def callee_of(self, tracker: "Tracker") -> dict[int, str]:
        """var handle -> callee after the pass; built only when the args rule asks."""
        if self._callee_of is None:
            self._callee_of = {}
            for binding in ir.bindings(self.func):
                call = tracker._call(binding.value)
                if call is not None:
                    self._callee_of[binding.var.__chandle__()] = call[0]
        return self._callee_of


class Tracker:
    """Follows origins from pass to pass; fed one module per pass by the instrument."""

    def __init__(self, table: OriginTable):
        self.origins: dict[str, Origin] = dict(table.origins)
        self.edges = table.edges
        self._tok_origins: list[tuple[str, ...]] = []
        self._canon: dict[int, int] = {}
        self._var_tok: dict[int, int] = {}
        self._var_value: dict[int, int] = {}
        self._const_tok: dict[int, int] = {}
        self._param_tok: dict[tuple[str, str], int] = {}
        self._keys: dict[tuple, tuple[int, ...]] = {}
        self._unregistered: dict[int, tuple[int, int, int]] = {}  # var handle -> (function handle, position, token)
        self._unregistered_in: dict[int, object] = {}  # function handle -> function
        self._pins: list = []
        self._recipes: dict[int, tuple | None] = {}
        self._funcs: dict[str, _FunctionState] = {}
        self._pass_index = 0
        self.last_mod = None
        self.events: list[PassEvent] = []
        self.changes: dict[int, tuple[Change, ...]] = {}  # token -> its changes, pass by pass
        self.eliminated: dict[str, str] = {}
        self._seed(table)

    # -- public ---------------------------------------------------------------

    def start(self, mod) -> None:
        """Walk the input module once, so its bindings' keys are known to every rule."""
        self._pin(mod)
        for name, func in ir.relax_functions(mod):
            self._funcs[name] = self._process(mod, name, func, "input", None)
        self.last_mod = mod

    def observe(self, mod, pass_name: str) -> None:
        """Account for one pass, given the module it produced."""
        self._pass_index += 1
        functions = dict(ir.relax_functions(mod))
        if not functions:
            return  # a pass over a TIR-only sub-module
        self._pin(mod)
        for name, func in functions.items():
            state = self._funcs.get(name)
            if state is not None and state.func.same_as(func):
                continue
            self._funcs[name] = self._process(mod, name, func, pass_name, state)
        for name in [n for n in self._funcs if n not in functions]:
            gone = self._funcs.pop(name)
            self._record_elimination(gone.origins, pass_name)
        self.last_mod = mod  # only once the whole module is accounted for

    def origins_of_token(self, tok: int) -> tuple[str, ...]:
        return self._tok_origins[tok]

    def token_of(self, var) -> int | None:
        return self._var_tok.get(var.__chandle__())

    def canonical(self, tok: int) -> int:
        return self._canon_of(tok)

    def resolve_arg(self, expr) -> int | None:
        return self._resolve(expr)

    # -- set-up ---------------------------------------------------------------

    def _new_token(self, origins: Iterable[str]) -> int:
        self._tok_origins.append(tuple(sorted(set(origins))))  # tuples of str: not GC-tracked
        return len(self._tok_origins) - 1

    def _seed(self, table: OriginTable) -> None:
        self._pin(table.module)
        for handle, oid in table.by_var.items():
            self._var_tok[handle] = self._new_token({oid})

    def _pin(self, obj) -> None:
        """Keep an IR object alive. Handles key every table here, so the C++ objects
        behind them must outlive the build; pinning whole functions and modules does
        that without holding (and making the GC walk) a wrapper per binding."""
        self._pins.append(obj)

    # -- one function ---------------------------------------------------------

    def _process(self, mod, fname, func, pass_name, old) -> _FunctionState:
        walk = _Walk(func=func, old=old)
        tokens: list[int] = []
        for param in ir.items(func.params):
            self._param_token(fname, param)
        var_tok, var_value = self._var_tok, self._var_value
        kept, kept_bookkeeping = (old.var_of, old.bookkeeping) if old is not None else ({}, set())
        var_of: dict[int, int] = {}
        for position, binding in enumerate(ir.bindings(func)):
            binding_handle = binding.__chandle__()
            handle = kept.get(binding_handle)
            if handle is not None:  # the pass kept this binding object: nothing in it changed
                var_of[binding_handle] = handle
                tok = var_tok.get(handle)
                if tok is not None:
                    tokens.append(tok)
                elif handle in kept_bookkeeping:
                    walk.bookkeeping.add(handle)
                continue
            var, value = binding.var, binding.value
            handle, value_handle = var.__chandle__(), value.__chandle__()
            var_of[binding_handle] = handle
            tok = var_tok.get(handle)
            if tok is not None and var_value.get(handle) != value_handle:
                if tok in walk.claimed and self._now_moves_data(value):
                    del var_tok[handle]  # AlterOpImpl reused the var for a layout transform
                    tok = self._bind(mod, binding, walk)
                else:
                    tok = self._rewritten_in_place(func, position, handle, value, tok, walk)
            elif tok is None:
                tok = self._bind(mod, binding, walk)
            if tok is not None:
                tokens.append(tok)
        self._finish_new(fname, pass_name, walk)
        self._pin(func)
        if old is not None and tokens == old.tokens:
            origins = old.origins  # the common case: no op appeared or went away
        else:
            origins = frozenset().union(*(self._tok_origins[t] for t in tokens))
        state = _FunctionState(func=func, tokens=tokens, origins=origins, var_of=var_of,
                               bookkeeping=walk.bookkeeping)
        self._record_event(fname, pass_name, walk, old, state)
        return state

    def _now_moves_data(self, value) -> bool:
        call = self._call(value)
        return call is not None and ir.is_data_movement(call[0])

    def _rewritten_in_place(self, func, position, handle, value, tok, walk) -> int:
        """Rule 1, identity: the Var survived with a new value (LegalizeOps, FuseTIR).
        The new value's key is registered lazily (``_flush``): most are superseded by
        the next in-place rewrite before any binding looks keys up."""
        self._var_value[handle] = value.__chandle__()
        if self._pass_index == 0:  # the input's own op bindings: only their keys are news
            self._unregister(func, position, handle, tok)
            return tok
        callee = ir.callee_name(value) if ir.is_call(value) else None
        if callee is not None and ir.is_bookkeeping(callee):
            return tok  # an output buffer re-planned by the memory passes: not a change of the op
        if callee is not None:
            self._unregister(func, position, handle, tok)
        walk.changes.append((tok, value, IDENTITY, callee))
        return tok

    def _unregister(self, func, position, handle, tok) -> None:
        self._unregistered[handle] = (func.__chandle__(), position, tok)
        self._unregistered_in[func.__chandle__()] = func

    def _call(self, value) -> tuple | None:
        """(callee, args, GlobalVar) of a call. Not cached: a cache would keep a Python
        wrapper per argument alive for the garbage collector to walk."""
        return ir.callee_and_args(value) if ir.is_call(value) else None

    def _param_token(self, fname, param) -> None:
        handle = param.__chandle__()
        if handle in self._var_tok:
            return
        key = (fname, param.name)
        if key not in self._param_tok:
            self._param_tok[key] = self._new_token(())
        self._var_tok[handle] = self._param_tok[key]

    def _bind(self, mod, binding, walk: _Walk) -> int | None:
        """A binding whose Var is new to us: rules 2 to 4, else a new token."""
        var, value = binding.var, binding.value
        handle = var.__chandle__()
        if not ir.is_call(value):
            self._var_value[handle] = value.__chandle__()
            tok = self._structural(value)
            if tok is not None:
                self._var_tok[handle] = tok
            return tok
        if ir.is_bookkeeping(ir.callee_name(value)):  # read the callee alone: allocations are many
            walk.bookkeeping.add(handle)
            return None
        self._var_value[handle] = value.__chandle__()
        callee, args, gv = ir.callee_and_args(value)
        self._flush()
        key = self._key(callee, args, walk)
        tok, rule = self._match(key, walk), VALUE
        if tok is None and gv is not None:
            tok, rule = self._replay(mod, gv, args, walk), REPLAY
        if tok is None and walk.old is not None:
            tok, rule = self._by_name(var.name, callee, walk), NAME
        if tok is None and walk.old is not None:
            tok, rule = self._by_args(callee, key[1], walk), ARGS
        if tok is None:
            tok, rule = self._new_token(()), NEW
            walk.new.append((tok, callee))
            if ir.is_data_movement(callee) and key[1]:
                self._canon[tok] = key[1][0]  # a layout change keeps the value's identity
        walk.changes.append((tok, value, rule, callee))
        walk.claimed.add(tok)
        self._var_tok[handle] = tok
        self._add_key(key, tok)
        self._claim_outputs(args, tok, walk)
        return tok

    def _add_key(self, key, tok) -> None:
        bucket = self._keys.get(key, ())
        if tok not in bucket:
            self._keys[key] = bucket + (tok,)  # a tuple of ints: the GC need not track it

    def _flush(self) -> None:
        """Register the keys of values that identity carried, before any look-up. They
        are found again by position in their (pinned) function, so that no Python
        wrapper is held from pass to pass."""
        if not self._unregistered:
            return
        by_func: dict[int, list[tuple[int, int]]] = {}
        for func_handle, position, tok in self._unregistered.values():
            by_func.setdefault(func_handle, []).append((position, tok))
        for func_handle, entries in by_func.items():
            binds = ir.bindings(self._unregistered_in[func_handle])
            for position, tok in entries:
                callee, args, _ = ir.callee_and_args(binds[position].value)
                self._add_key(self._key(callee, args), tok)
        self._unregistered, self._unregistered_in = {}, {}

    def _link_uses(self, walk) -> None:
        """Producer/consumer links of the bindings this pass rewrote; only needed to
        tell whom an inserted op serves."""
        for tok, value, _, _ in walk.changes:
            walk.rewritten.add(tok)
            call = self._call(value)
            args = call[1] if call is not None else [value]
            walk.args_of[tok] = [t for t in (self._raw(a) for a in args) if t is not None]
            for t in walk.args_of[tok]:
                walk.uses.setdefault(t, []).append(tok)

    def _structural(self, value) -> int | None:
        """Aliases, tuples and projections carry the origins of what they hold."""
        if ir.is_var(value):
            return self._var_tok.get(value.__chandle__())
        if ir.is_tuple_get_item(value):
            return self._raw(value.tuple_value)
        if ir.is_tuple(value):
            parts = [self._raw(f) for f in ir.items(value.fields)]
            key = ("tuple", tuple(self._canon_of(p) for p in parts if p is not None))
            found = self._keys.get(key)
            if found:
                return found[0]
            tok = self._new_token(frozenset().union(*(self._tok_origins[p] for p in parts if p is not None)) if parts else ())
            self._keys[key] = (tok,)
            return tok
        return None

    def _claim_outputs(self, args, tok, walk) -> None:
        """Destination-passing calls write into their trailing allocations: those vars
        now hold this call's value."""
        if not walk.bookkeeping:
            return
        for arg in args:
            if ir.is_var(arg) and arg.__chandle__() in walk.bookkeeping:
                self._var_tok[arg.__chandle__()] = tok

    # -- keys and rules -------------------------------------------------------

    def _raw(self, expr) -> int | None:
        kind = ir.kind(expr)
        if kind == "var":
            return self._var_tok.get(expr.__chandle__())
        if kind == "const":
            return self._const_token(expr.__chandle__())
        return None

    def _const_token(self, handle: int) -> int:
        tok = self._const_tok.get(handle)
        if tok is None:
            tok = self._const_tok[handle] = self._new_token(())
        return tok

    def _canon_of(self, tok: int) -> int:
        while tok in self._canon:
            tok = self._canon[tok]
        return tok

    def _resolve(self, expr, walk=None) -> int | None:
        """An argument's canonical token. Inside a walk, a var the pass re-created
        under its old name (and not yet bound) is found by that name."""
        kind = ir.kind(expr)
        if kind == "var":
            handle = expr.__chandle__()
            tok = self._var_tok.get(handle)
            if tok is None and walk is not None and walk.old is not None and handle not in walk.bookkeeping:
                tok = walk.old.index(self).var_names.get(expr.name)
        elif kind == "const":
            tok = self._const_token(expr.__chandle__())
        else:
            return None
        return None if tok is None else self._canon_of(tok)

    def _key(self, callee, args, walk=None) -> tuple:
        """(callee, canonical argument tokens): what a value computes, whatever its var."""
        resolved = []
        for arg in args:
            if ir.kind(arg) == "tuple":
                resolved.extend(self._resolve(part, walk) for part in ir.items(arg.fields))
            else:
                resolved.append(self._resolve(arg, walk))
        return (callee, tuple(t for t in resolved if t is not None))

    def _match(self, key, walk) -> int | None:
        found = self._keys.get(key)
        if not found:
            return None
        for tok in found:
            if tok not in walk.claimed:
                return tok
        return None  # never hand one value's origins to two bindings

    def _by_name(self, name, callee, walk) -> int | None:
        tok = walk.old.index(self).by_name.get((name, callee))
        return tok if tok is not None and tok not in walk.claimed else None

    def _by_args(self, callee, args, walk) -> int | None:
        """An op whose implementation was swapped (AlterOpImpl): same inputs, new callee,
        and the old binding is gone or now holds a layout transform."""
        found = []
        index = walk.old.index(self)
        for tok in index.by_args.get(args, ()):
            if tok in walk.claimed:
                continue
            handle, old_callee = index.tok_var[tok]
            if ir.is_data_movement(callee) and not ir.is_data_movement(old_callee):
                continue
            now = walk.callee_of(self).get(handle)
            if now is None or (ir.is_data_movement(now) and not ir.is_data_movement(old_callee)):
                found.append(tok)
        return found[0] if len(found) == 1 else None

    def _replay(self, mod, gv, args, walk) -> int | None:
        recipe = walk.recipes.get(gv.__chandle__(), False)
        if recipe is False:
            func = ir.lookup(mod, gv)
            recipe = walk.recipes[gv.__chandle__()] = self._recipe(func) if func is not None else None
        if recipe is None:
            return None
        params, steps, output = recipe
        if len(params) != len(args):
            return None
        env: dict[int, int] = {}
        for param, arg in zip(params, args):
            tok = self._resolve(arg, walk)
            if tok is not None:
                env[param] = tok
        matched: list[int] = []
        last = None
        canon = self._canon_of
        for var, callee, refs in steps:
            resolved = []
            for ref, const in refs:
                tok = const if const is not None else env.get(ref)
                if tok is not None:
                    resolved.append(canon(tok))
            if callee is None:  # an alias or a projection
                tok = resolved[0] if resolved else None
            else:
                tok = self._match((callee, tuple(resolved)), walk)
                if tok is None:
                    continue
                walk.claimed.add(tok)
                matched.append(tok)
            if tok is not None:
                env[var] = tok
                last = tok
        if not matched:
            return None
        result = self._new_token(frozenset().union(*(self._tok_origins[t] for t in matched)))
        out_tok = env.get(output, last) if output is not None else last
        if out_tok is not None:
            self._canon[result] = self._canon_of(out_tok)
        return result

    def _recipe(self, func) -> tuple | None:
        """A fused function's body read once, as plain data: (param handles, steps of
        (var handle, callee or None for aliases, arguments as (var handle, constant
        token)), output handle); None for a function that is not a fused group.
        Every call site of a shared group is replayed from it without touching TVM."""
        handle = func.__chandle__()
        if handle not in self._recipes:
            if not ir.is_primitive(func):
                self._recipes[handle] = None
                return None
            steps = []
            for binding in ir.bindings(func):
                value = binding.value
                if ir.is_call(value):
                    callee, inner_args, _ = ir.callee_and_args(value)
                    refs = [self._ref(f) for a in inner_args for f in (ir.items(a.fields) if ir.is_tuple(a) else [a])]
                    steps.append((binding.var.__chandle__(), callee, tuple(r for r in refs if r is not None)))
                elif ir.is_var(value) or ir.is_tuple_get_item(value):
                    inner = value if ir.is_var(value) else value.tuple_value
                    steps.append((binding.var.__chandle__(), None, ((inner.__chandle__(), None),)))
            out = ir.function_output(func)
            self._recipes[handle] = (tuple(p.__chandle__() for p in ir.items(func.params)), tuple(steps),
                                     out.__chandle__() if out is not None and ir.is_var(out) else None)
        return self._recipes[handle]

    def _ref(self, expr) -> tuple[int | None, int | None] | None:
        """(var handle, None) for a var, (None, token) for a constant, else None."""
        if ir.is_var(expr):
            return (expr.__chandle__(), None)
        tok = self._raw(expr)
        return None if tok is None else (None, tok)

    # -- what no rule explains ------------------------------------------------

    def _finish_new(self, fname, pass_name, walk: _Walk) -> None:
        if not walk.new:
            return
        self._link_uses(walk)
        pending = {tok: callee for tok, callee in walk.new}
        for tok, callee in walk.new:
            serves = self._serves(tok, pending, walk, set())
            kind = INSERTED if ir.is_data_movement(callee) else UNRESOLVED
            layer = self.origins[serves[0]].layer if serves else f"{fname}.{ir.short_op(callee)}"
            oid = self._fresh_id(f"{kind}:{pass_name}:{ir.short_op(callee)}@{serves[0] if serves else fname}")
            self.origins[oid] = Origin(
                id=oid, layer=layer, op=callee, function=fname, index=-1,
                kind=kind, pass_name=pass_name, serves=tuple(serves),
            )
            self._tok_origins[tok] = (oid,)

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
                        out.extend(o for o in sorted(self._tok_origins[other]) if self.origins[o].kind == OP)
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
        new_ids = [next(iter(self._tok_origins[t])) for t, _ in walk.new]
        eliminated, merged = [], []
        if old is None or state.tokens != old.tokens:
            eliminated = sorted(old.origins - state.origins) if old is not None else []
            self._record_elimination(eliminated, pass_name)
            old_tokens = set(old.tokens) if old is not None else set()
            for tok in state.tokens:
                if tok not in old_tokens and len(self._tok_origins[tok]) > 1:
                    merged.append(tuple(sorted(self._tok_origins[tok])))
        event = PassEvent(
            index=self._pass_index, pass_name=pass_name, function=fname,
            rules=tuple(sorted(Counter(change[2] for change in walk.changes).items())),
            inserted=tuple(o for o in new_ids if self.origins[o].kind == INSERTED),
            unresolved=tuple(o for o in new_ids if self.origins[o].kind == UNRESOLVED),
            eliminated=tuple(eliminated), merged=tuple(merged),
        )
        self.events.append(event)
        history = self.changes
        for tok, _, rule, callee in walk.changes:
            if callee is not None:
                history[tok] = history.get(tok, ()) + (Change(self._pass_index, pass_name, fname, callee, rule),)

    def _record_elimination(self, origin_ids, pass_name) -> None:
        for oid in origin_ids:
            self.eliminated.setdefault(oid, pass_name)
