"""The tracker: which binding after a pass carries which origins.

It walks each function a pass changed, binding by binding, and gives each binding a
token (``tokens.Tokens``). A binding whose Var object survived the pass keeps its token
(*identity*), unless one of ``rules.IDENTITY_EXCEPTIONS`` says the var binds a new
value now. A binding whose Var is new is offered to the rules of
``rules.DEFAULT_RULES`` in order (value key, replay, implementation swap, same inputs);
names are never evidence. What no rule explains is judged by ``newops`` (a part of an
op, inserted, unresolved), and every pass is logged (``passlog``).

Rules and exceptions read only the walk of the function at hand (``Walk``), and return
what they found (``rules.Found``); the tracker applies it.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import define, field

from ..model import ops
from ..model.journal import DEAD, FOLDED
from ..model.origin import Origin
from . import ir, newops, params, reader
from .keys import ValueKeys
from .newops import IDENTITY, NEW, Changes, Rewrite
from .origins import OriginTable
from .passlog import PassLog, PassStep
from .reader import CONST, ITEM, TUPLE, VAR
from .rules import DEFAULT_RULES, IDENTITY_EXCEPTIONS, Binding, Found, Recipe, read_recipe
from .tokens import Tokens


@define(frozen=True)
class _Index:
    """Look-ups into a function as the last pass left it, for the rules after identity."""

    by_args: dict[tuple, list[int]]  # argument tokens -> tokens
    tok_var: dict[int, tuple[int, str]]  # token -> (var handle, callee)
    by_inputs: dict[tuple, list[tuple[int, tuple]]]  # (callee, var argument tokens) -> (token, all argument tokens)


@define
class FunctionState:
    """A function as the last pass left it, as handles and tokens: no Python wrapper
    outlives the walk, so none piles up for the garbage collector. The index serves
    only the rare binding that identity does not explain, so it is built on first use."""

    func: object
    view: reader.FunctionView
    tokens: list[int]  # token of each op binding, in order
    origins: frozenset[str]
    bookkeeping: set[int]  # var handles of memory/shape bookkeeping bindings
    _index: _Index | None = None

    def index(self, tokens: Tokens, keys: ValueKeys, read) -> _Index:
        """The function's look-ups (``_Index``: by argument tokens, by token, by callee and
        var inputs), built with ``tokens``, ``keys`` and ``read`` on first use and kept."""
        if self._index is None:
            by_args: dict[tuple, list[int]] = {}
            tok_var: dict[int, tuple[int, str]] = {}
            by_inputs: dict[tuple, list[tuple[int, tuple]]] = {}
            d = _full(self.view, self.func, read)
            for position, handle in enumerate(d.vars):
                tok = tokens.of(handle)
                made = d.call(position) if tok is not None else None
                if made is not None and tok is not None:
                    tok_var[tok] = (handle, made.callee)
                    args = keys.key(made)[1]
                    by_args.setdefault(args, []).append(tok)
                    by_inputs.setdefault((made.callee, tokens.var_inputs(made)), []).append((tok, args))
            self._index = _Index(by_args, tok_var, by_inputs)
        return self._index


@define
class _Memos:
    """What a ``Walk`` builds on first use: the var handles bound after the pass
    (``present``), each var's callee after it (``callees``), each var's position
    (``position``), which vars are made of constants alone (``from_constants``), the
    tokens the other model functions hold (``elsewhere``) and those the function held
    before the pass (``held``). None: not built yet."""

    present: set[int] | None = None
    callees: dict[int, str] | None = None
    position: dict[int, int] | None = None
    from_constants: dict[int, frozenset | None] = field(factory=dict)
    elsewhere: frozenset[int] | None = None
    held: frozenset[int] | None = None


@define
class Walk:
    """One function walk, and what the rules may read of it: the function after the
    pass and its view, its state before the pass (``old``: None for a new function),
    the module's functions, the tracker's tokens and value keys, the vars bound to
    another value (``aliases``), the tokens this walk gave away (``claimed``), the
    other model functions' states (``others``: as the pass left those it has walked,
    as the pass before left the rest). Rules change none of it but memos; the look-ups
    they ask for are built on first use."""

    func: object
    d: reader.FunctionView
    old: FunctionState | None
    functions: dict = field(factory=dict)
    tokens: Tokens = field(factory=Tokens)
    keys: ValueKeys | None = None
    aliases: set[int] = field(factory=set)
    read: object = reader.read  # the tracker's
    recipes: dict[int, Recipe | None] = field(factory=dict)  # fused function handle -> its recipe (the tracker's)
    claimed: set[int] = field(factory=set)  # tokens given to a binding of this walk
    bookkeeping: set[int] = field(factory=set)
    others: dict[str, FunctionState] = field(factory=dict)
    rebound: dict[int, int] = field(factory=dict)  # var handle -> its token before an identity exception broke it
    changes: Changes = field(factory=list)
    new: list[tuple[int, str]] = field(factory=list)  # (token, callee) no rule explained
    memo: _Memos = field(factory=lambda: _Memos())  # the look-ups below, each built when first asked

    def elsewhere(self) -> frozenset[int]:
        """The tokens another model function holds (``others``): values of that
        function, which a value of this one computed from no value of its own (a call
        of constants alone, ComputePrimValue's ``compute_symbolic_expr()``) is not, however
        equal its key. Built on first use."""
        if self.memo.elsewhere is None:
            self.memo.elsewhere = frozenset().union(*(state.tokens for state in self.others.values()))
        return self.memo.elsewhere

    def held(self) -> frozenset[int]:
        """The tokens the function held before the pass (none for its first); built on
        first use."""
        if self.memo.held is None:
            self.memo.held = frozenset(self.old.tokens) if self.old is not None else frozenset()
        return self.memo.held

    def old_index(self) -> _Index:
        """Look-ups into the function as the pass before left it (``old`` must be set)."""
        assert self.old is not None and self.keys is not None
        return self.old.index(self.tokens, self.keys, self.read)

    def recipe(self, call: reader.CallView) -> Recipe | None:
        """The recipe of the fused function a call calls; None for any other call."""
        func = self.functions.get(call.callee) if call.global_var else None
        if func is None:
            return None
        handle = func.__chandle__()
        if handle not in self.recipes:
            self.recipes[handle] = read_recipe(func, self.read, self.tokens)
        return self.recipes[handle]

    def callees_after(self) -> dict[int, str]:
        """var handle -> callee after the pass; built only when a rule asks."""
        if self.memo.callees is None:
            d = _full(self.d, self.func, self.read)
            callees = ((handle, d.callee(position)) for position, handle in enumerate(d.vars))
            self.memo.callees = {handle: callee for handle, callee in callees if callee is not None}
        return self.memo.callees

    def from_constants(self, handle: int) -> frozenset | None:
        """The tokens of the constants the var ``handle`` is made of, when it is bound in
        this function to a call whose every var argument is such a var (a weight a pass
        rescales: ``W * s`` is made of ``W`` and the norm's constants); None when it is
        not made of constants alone. Memoised."""
        if handle in self.memo.from_constants:
            return self.memo.from_constants[handle]
        if self.memo.position is None:
            self.memo.position = {var: position for position, var in enumerate(self.d.vars)}
        position = self.memo.position.get(handle)
        made = self.d.call(position) if position is not None and self.d.values[position] else None
        found: frozenset | None = None
        if made is not None:
            parts = [self.from_constants(a.handle) for a in made.atoms if a.kind == VAR]
            known = [p for p in parts if p is not None]
            if len(known) == len(parts):
                found = frozenset(self.tokens.constant(a.handle) for a in made.atoms if a.kind == CONST).union(*known)
        self.memo.from_constants[handle] = found
        return found

    def present(self) -> set[int]:
        """Handles of the vars bound after the pass; built only when a rule asks."""
        if self.memo.present is None:
            self.memo.present = set(self.d.vars)
        return self.memo.present


class Tracker:
    """Follows origins from pass to pass; fed, pass by pass, the functions each one left."""

    def __init__(
        self, table: OriginTable, read=reader.read, rules=DEFAULT_RULES, identity_exceptions=IDENTITY_EXCEPTIONS
    ):
        self.read = read  # of each function a pass changed: ``reader.read``
        self.rules = tuple(rules)  # tried in order on each binding whose Var is new
        self.identity_exceptions = tuple(identity_exceptions)  # asked of each var that survived with a new value
        self.origins: dict[str, Origin] = dict(table.origins)
        self.edges = table.edges
        self.tokens = Tokens()
        self.keys = ValueKeys(self.tokens)
        self.log = PassLog()
        self.recipes: dict[int, Recipe | None] = {}  # fused function handle -> its recipe (``rules.Replay``)
        self.last_functions: dict[str, object] = {}
        self.input_functions: frozenset[str] = frozenset()  # the model functions of the input
        self._input_views = dict(table.views)  # popped as used; the table stays as it was
        self._var_value: dict[int, int] = {}  # var handle -> handle of the value it was last seen bound to
        self._aliases: set[int] = set()  # vars bound to another value (an alias, a tuple, a field)
        self._param_tok: dict[tuple[str, str], int] = {}
        self._pins: list = []
        self._funcs: dict[str, FunctionState] = {}
        self._pass_index = 0
        self._pin(table.functions)
        for handle, oid in table.by_var.items():
            self.tokens.of_handle[handle] = self.tokens.new((oid,))

    def start(self, functions: dict[str, object]) -> None:
        """Walk the input's functions (``ir.function_map``) once, so their bindings'
        keys are known to every rule."""
        self._pin(functions)
        self.input_functions = frozenset(ir.model_functions(functions))
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
        before = {name: state.func for name, state in self._funcs.items()}
        sources = params.transform_sources(before, changed)  # X_transform_params -> X
        for name in [*sources, *(n for n in changed if n not in sources)]:  # transform functions first
            old = before.get(sources.get(name, name))
            if old is not None:
                self._seed_bundled(model[name], old)
            if name not in sources and name in sources.values():
                self._seed_lifted(model[name], model[f"{name}{params.TRANSFORM_SUFFIX}"])
            self._funcs[name] = self._process(functions, name, model[name], pass_name, self._funcs.get(name))
        for name in [n for n in self._funcs if n not in model]:
            self.log.eliminate(self._funcs.pop(name).origins, pass_name)
        self.last_functions = functions  # only once all of them are accounted for

    def _seed_bundled(self, func, old_func) -> None:
        """A tuple parameter that took the place of ``old_func``'s weight parameters
        (``params.bundled_fields``) holds them: its token is their tuple's."""
        found = params.bundled_fields(func, old_func)
        if found is None or found[0].__chandle__() in self.tokens.of_handle:
            return
        toks = [self.tokens.of(p.__chandle__()) for p in found[1]]
        if None not in toks:
            self.tokens.of_handle[found[0].__chandle__()] = self.keys.tuple_of(toks)

    def _seed_lifted(self, func, transform) -> None:
        """Each weight parameter of ``func`` that a field of ``transform``'s result
        fills (``params.lifted_fields``) holds that field's value: its token. Called
        once ``transform`` is walked."""
        for param, output, index in params.lifted_fields(func, transform) or ():
            tok = self.tokens.of(output.__chandle__()) if output is not None else None
            if tok is not None and param.__chandle__() not in self.tokens.of_handle:
                self.tokens.of_handle[param.__chandle__()] = self.keys.item(tok, index) if index >= 0 else tok

    def _pin(self, obj) -> None:
        """Keep IR objects alive. Handles key every table here, so the C++ objects
        behind them must outlive the tracking; pinning each pass's function map (every
        function the tracker reads is in one) does that. (The views hold a wrapper per
        binding a pass wrote, for reading it on demand; tracking runs with the garbage
        collector paused, ``jsonio.gc_paused``.)"""
        self._pins.append(obj)

    # -- one function ---------------------------------------------------------

    def _process(self, functions, fname, func, pass_name, old) -> FunctionState:
        d = self._input_views.pop(fname, None)  # origin assignment read the input's functions
        if d is None:
            d = self.read(func, old.func if old is not None else None)
            if d is None:  # the same bindings in a rebuilt function: no binding to account for
                state = FunctionState(
                    func=func,
                    view=old.view,
                    tokens=old.tokens,
                    origins=old.origins,
                    bookkeeping=old.bookkeeping,
                    index=old._index,
                )
                self._log(fname, pass_name, Walk(func=func, d=old.view, old=old), old, state)
                return state
        walk = Walk(
            func=func,
            d=d,
            old=old,
            functions=functions,
            tokens=self.tokens,
            keys=self.keys,
            aliases=self._aliases,
            read=self.read,
            recipes=self.recipes,
            others={name: state for name, state in self._funcs.items() if name != fname},
        )
        for handle, name in zip(d.params, d.param_names):
            self._param_token(fname, handle, name)
        of_handle, var_value = self.tokens.of_handle, self._var_value
        # A binding object the pass kept (the view leaves it out) changed in nothing:
        # its var's token is all there is to know. Bindings the pass rewrote cannot
        # change the tokens of vars bound before them, so these can be read first.
        toks = [of_handle.get(var) for var in d.vars]
        if d.partial:
            walk.bookkeeping = {
                var
                for var, tok, value in zip(d.vars, toks, d.values)
                if not value and tok is None and var in old.bookkeeping
            }
        for position in d.changed:
            handle = d.vars[position]
            tok = of_handle.get(handle)
            if tok is not None and var_value.get(handle) != d.values[position]:
                if any(e.breaks(walk, position, handle, tok) for e in self.identity_exceptions):
                    walk.rebound[handle] = tok
                    del of_handle[handle]
                    self._aliases.discard(handle)
                    tok = self._bind(functions, position, walk)
                else:
                    tok = self._rewritten_in_place(position, handle, tok, walk)
            elif tok is None:
                tok = self._bind(functions, position, walk)
            toks[position] = tok
        tokens = [tok for tok in toks if tok is not None]
        minted = self._judge_new(fname, pass_name, walk)
        if old is not None and tokens == old.tokens:
            origins = old.origins  # the common case: no op appeared or went away
        else:
            origins = self.tokens.union(tokens)
        state = FunctionState(func=func, view=d, tokens=tokens, origins=origins, bookkeeping=walk.bookkeeping)
        self._log(fname, pass_name, walk, old, state, minted)
        return state

    def _rewritten_in_place(self, position, handle, tok, walk) -> int:
        """Identity: the Var survived with a new value (LegalizeOps, FuseTIR). The new
        value's key is registered lazily (``ValueKeys.defer``)."""
        self._var_value[handle] = walk.d.values[position]
        if self._pass_index == 0:  # the input's own op bindings: only their keys are news
            self.keys.defer(handle, walk.d, position, tok)
            return tok
        callee = walk.d.callee(position)
        if callee is not None and ops.is_bookkeeping(callee):
            return tok  # an output buffer re-planned by the memory passes: not a change of the op
        if callee is not None:
            self.keys.defer(handle, walk.d, position, tok)
            if walk.bookkeeping:
                self._fill_outputs(walk.d.call(position), tok, walk)
        walk.changes.append(Rewrite(tok, position, IDENTITY, callee))
        return tok

    def _param_token(self, fname, handle, name) -> None:
        if handle in self.tokens.of_handle:
            return
        key = (fname, name)
        if key not in self._param_tok:
            self._param_tok[key] = self.tokens.new(())
        self.tokens.of_handle[handle] = self._param_tok[key]

    def _bind(self, functions, position, walk: Walk) -> int | None:
        """A binding whose Var is new to us: the first of ``self.rules`` that names a
        token, else a new token."""
        var = walk.d.vars[position]
        callee = walk.d.callee(position)
        if callee is None:
            self._var_value[var] = walk.d.values[position]
            tok = self._structural(walk.d.value(position))
            if tok is not None:
                self.tokens.of_handle[var] = tok
                self._aliases.add(var)
            return tok
        if ops.is_bookkeeping(callee):
            walk.bookkeeping.add(var)
            return None
        made = walk.d.call(position)
        assert made is not None  # a binding with a callee is a call
        self._var_value[var] = walk.d.values[position]
        # a shape function's only argument is the VM's shape heap, which carries no
        # token: nothing tells two of them apart, so no rule may match one
        rules = () if ops.is_shape_computation(callee) else self.rules
        if rules:
            self.keys.flush()
        binding = Binding(made, self.keys.key(made))
        tok, rule = None, NEW
        for candidate in rules:
            found = candidate.find(binding, walk)
            if found is not None:
                tok, rule = self._apply(found, walk), candidate.name
                break
        if tok is None:
            tok = self.tokens.new(())
            # a callee whose ops are its own, at its own sites
            if not ir.is_subfunction(functions, callee, made.global_var):
                walk.new.append((tok, callee))
            if ops.is_data_movement(callee) and binding.key[1]:
                self.tokens.alias(tok, binding.key[1][0])  # a layout change keeps the value's identity
        walk.changes.append(Rewrite(tok, position, rule, callee))
        walk.claimed.add(tok)
        self.tokens.of_handle[var] = tok
        self.keys.add(binding.key, tok)
        if walk.bookkeeping:
            self._fill_outputs(made, tok, walk)
        return tok

    def _fill_outputs(self, made: reader.CallView, tok: int, walk: Walk) -> None:
        """A destination-passing call writes into its allocations: each allocation this
        walk saw bound (``walk.bookkeeping``) and no call wrote yet holds its value
        ``tok`` from here on (the first call given an allocation is its writer; a later
        one reads it). Asked of a call whose var is new and of one whose var survived the
        pass: VMShapeLower binds a symbolic entry's allocations anew (sized from the
        shape heap) under kernel calls that keep their vars."""
        of_handle = self.tokens.of_handle
        for arg in made.arguments():
            if arg.kind == VAR and arg.handle in walk.bookkeeping and arg.handle not in of_handle:
                of_handle[arg.handle] = tok

    def _apply(self, found: Found, walk: Walk) -> int:
        """The token a rule's finding gives the binding."""
        if found.token is not None:
            return found.token
        walk.claimed.update(found.made_of)
        tok = self.tokens.new(self.tokens.union(found.made_of))
        for index, field_tok in found.fields:
            self.keys.set_item(tok, index, field_tok)
        if found.carries is not None:
            self.tokens.alias(tok, found.carries)
        return tok

    def _structural(self, value: reader.Node) -> int | None:
        """Aliases, tuples and projections carry the origins of what they hold."""
        kind = value.kind
        if kind == ITEM and value.of is not None:
            tup = self.tokens.raw(value.of.kind, value.of.handle)
            return None if tup is None else self.keys.item(tup, value.item)
        if kind == TUPLE:
            return self.keys.tuple_of([self.tokens.raw(f.kind, f.handle) for f in value.fields])
        if kind == CONST:
            return self.tokens.constant(value.handle)
        return self.tokens.of(value.handle) if kind == VAR else None  # an alias

    def _judge_new(self, fname, pass_name, walk: Walk) -> list[Origin]:
        """Give the bindings no rule explained their origins (``newops.classify``)."""
        if not walk.new:
            return []
        verdict = newops.classify(walk, self.tokens, self.origins, fname, pass_name)
        for tok, whole in verdict.parts.items():
            self.tokens.origins[tok] = self.tokens.origins[whole]
        for tok, origin in verdict.minted.items():
            self.origins[origin.id] = origin
            self.tokens.origins[tok] = (origin.id,)
        if verdict.parts:
            walk.changes = [
                Rewrite(tok, at, newops.PART if tok in verdict.parts else rule, callee)
                for tok, at, rule, callee in walk.changes
            ]
        return list(verdict.minted.values())

    def _log(self, fname, pass_name, walk: Walk, old, state, minted=()) -> None:
        if self._pass_index == 0:
            return  # the input itself, not a pass
        eliminated, merged, explained = [], [], {}
        if old is None or state.tokens != old.tokens:
            eliminated = sorted(old.origins - state.origins) if old is not None else []
            old_tokens = set(old.tokens) if old is not None else set()
            merged = [
                self.tokens.origins[tok]
                for tok in state.tokens
                if tok not in old_tokens and len(self.tokens.origins[tok]) > 1
            ]
            if eliminated:
                explained = self._explained(old, state, set(eliminated), walk.rebound)
        step = PassStep(self._pass_index, pass_name, fname)
        self.log.record(step, walk.changes, minted, eliminated, merged, explained)

    def _explained(
        self, old: FunctionState, state: FunctionState, eliminated: set[str], rebound: dict[int, int]
    ) -> dict[str, str]:
        """The origins of ``eliminated`` whose every binding the pass removed the
        function before it (``old``) shows folded or dead (``eliminations``), and how;
        ``rebound``: the tokens the pass's vars held before an identity exception."""
        gone = set(old.tokens).difference(state.tokens)
        token_of = lambda var: rebound.get(var, self.tokens.of(var))  # noqa: E731
        how = eliminations(_full(old.view, old.func, self.read), token_of, gone, set(state.view.vars))
        verdicts: dict[str, set[str | None]] = {}
        for tok, verdict in how.items():
            for oid in self.tokens.origins[tok]:
                if oid in eliminated:
                    verdicts.setdefault(oid, set()).add(verdict)
        return {
            oid: sorted(v for v in found if v is not None)[0] for oid, found in verdicts.items() if None not in found
        }


def changed_functions(before: dict, functions: dict) -> tuple[dict, list[str]]:
    """The model functions a pass left (``ir.model_functions``; none after a pass over a
    TIR-only sub-module) and the names of those it changed, given the model functions
    as the pass before left them."""
    model = ir.model_functions(functions)
    return model, [name for name, func in model.items() if name not in before or not before[name].same_as(func)]


def eliminations(
    d: reader.FunctionView, token_of: Callable[[int], int | None], gone: set[int], kept: set[int]
) -> dict[int, str | None]:
    """How each token of ``gone`` bound in ``d`` (the whole function as the pass before
    left it; ``token_of``: a var handle's token there) could go: ``FOLDED`` when its
    binding is computed from constants alone (every var it reads is bound so too: no
    parameter, no symbolic dim), ``DEAD`` when neither the function's result nor a
    binding the pass kept (its var in ``kept``) nor a call writing into an allocation
    reads it, through other bindings; None when neither: the pass removed a value the
    function used, made of more than constants. A token bound at several places (an
    allocation holds its writer's) is judged at its calls: None when one of them is,
    else the first."""
    reads: list[tuple[int, ...]] = []
    constant: set[int] = set()
    allocations: set[int] = set()
    for position, var in enumerate(d.vars):
        made = d.call(position)
        if made is None:
            reads.append(_vars_in(d.value(position)))
        else:
            reads.append(tuple(a.handle for a in made.atoms if a.kind == VAR))
            if ops.is_bookkeeping(made.callee):
                allocations.add(var)
        if all(v in constant for v in reads[-1]):
            constant.add(var)
    out = d.output()
    live = set(_vars_in(out)) if out is not None else set()
    for position in reversed(range(len(d.vars))):
        if d.vars[position] in live or d.vars[position] in kept or not allocations.isdisjoint(reads[position]):
            live.update(reads[position])
    found: dict[int, str | None] = {}
    for var in d.vars:
        tok = token_of(var)
        if tok not in gone or var in allocations:
            continue
        verdict = FOLDED if var in constant else DEAD if var not in live else None
        found[tok] = verdict if tok not in found or verdict is None else found[tok]
    return found


def _vars_in(node: reader.Node) -> tuple[int, ...]:
    """The var handles a non-call value reads (an alias, a tuple's fields, a projection's tuple)."""
    if node.kind == VAR:
        return (node.handle,)
    if node.kind == TUPLE:
        return tuple(h for f in node.fields for h in _vars_in(f))
    return _vars_in(node.of) if node.kind == ITEM and node.of is not None else ()


def _full(d: reader.FunctionView, func, read) -> reader.FunctionView:
    """A view with every binding, for the look-ups that need the kept ones too."""
    return read(func) if d.partial else d
