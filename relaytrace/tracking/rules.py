"""The tracking rules: which earlier value a binding after a pass is.

Identity comes first and needs no search: a Var object that survived a pass keeps its
token, unless one of ``IDENTITY_EXCEPTIONS`` says the var now binds a new value. A
binding whose Var is new (or whose identity was broken) is offered to each rule of
``DEFAULT_RULES`` in order (a shape function to none: its only argument, the VM's
shape heap, tells no two apart); the first that finds it wins, and a binding no rule
explains is new (inserted or unresolved, ``newops``). Names are never evidence:
generated names such as ``lv20`` recur.

A rule is a small object with a ``name`` (what ``PassEvent.rules`` and each ``Change``
record) and ``find(binding, walk) -> Found | None``; an identity exception has a
``name`` and ``breaks(walk, position, var, token) -> bool``. Both read the walk of the
function at hand (``tracker.Walk``: the tokens, value keys, the function as the pass
before left it, fused bodies as recipes) and change nothing in the tracker's state
but its memos (a constant's token, a tuple field's token, a fused body's recipe: each
made once, at the first look-up); the tracker applies what a rule found. A rule never
names a token ``walk.claimed`` holds (one value's origins go to one binding).
``[rule.name for rule in DEFAULT_RULES]`` lists them; tests/test_rules.py shows each
firing where it should and not where it should not.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from ..model import ops
from . import facts, ir, reader
from .reader import CONST, ITEM, TUPLE, VAR

_UNKNOWN = object()  # a replayed var whose value no step could follow


class Binding(NamedTuple):
    """A call binding whose Var is new to the tracker, as the rules see it."""

    call: reader.CallView
    key: tuple  # its value key (``keys.ValueKeys.key``): (callee, canonical argument tokens)


class Found(NamedTuple):
    """What a rule found a binding to be: an earlier value (``token``), or a new value
    made of earlier ones (``made_of``: a replayed fused call; the tracker claims them),
    whose fields are earlier values (``fields``: (index, token)) or which carries the
    value of one (``carries``)."""

    token: int | None = None
    made_of: tuple[int, ...] = ()
    fields: tuple[tuple[int, int], ...] = ()
    carries: int | None = None


class Ref(NamedTuple):
    """An argument of a recipe step: a var of the fused body (a parameter or a step's
    var), or a constant, by its token."""

    var: int | None
    token: int | None


class Step(NamedTuple):
    """One binding of a fused body: its var, its callee (None for an alias or a
    projection), its arguments, the field a projection takes (else None)."""

    var: int
    callee: str | None
    refs: tuple[Ref, ...]
    item: int | None


class Recipe(NamedTuple):
    """A fused function's body as plain data (``_recipe``): every call site of a
    shared group is replayed from it without touching TVM."""

    params: tuple[int, ...]  # parameter var handles
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]  # var handles of the result
    tuple_output: bool  # the result is a tuple of them


class TrackingRule(Protocol):
    """How a binding a pass rewrote is traced to the value it came from. ``RULES``
    lists them in the order they are asked; the first to answer wins. A rule reads the
    binding (``Binding``: its position, key and call) and the read-only ``walk``
    context (tokens, keys, the function's views, what this walk claimed) and returns
    what it found, or None. It never changes the tracker: the tracker applies the
    ``Found``. A new rule is a class here, one line in ``RULES`` and a test in
    ``tests/test_rules.py`` (docs/architecture.md)."""

    name: str  # said in histories and in ``tracking_breakdown``

    def find(self, binding: Binding, walk) -> Found | None:
        """The token(s) this binding's value carries on, or None: not this rule's case."""
        ...


class IdentityException(Protocol):
    """When a var that kept its name must not keep its token (identity is the first
    answer: a var a pass left in place holds the same value). ``IDENTITY_EXCEPTIONS``
    lists them; each says why in its docstring."""

    name: str

    def breaks(self, walk, position: int, var: int, token: int) -> bool:
        """True when the binding at ``position`` (var handle ``var``, which held
        ``token`` before the pass) no longer holds that value."""
        ...


# -- identity's exceptions ------------------------------------------------------


class AliasNowCalls:
    """A var that named another binding's value now calls something of its own
    (ConvertLayout's permute into the output var)."""

    name = "alias-calls"

    def breaks(self, walk, position, var, token):
        """True when ``var``, bound to another value, now binds a call."""
        return var in walk.aliases and walk.d.is_call(position)


class FoldedToConstant:
    """A var whose op a pass folded into a constant (LegalizeOps folds a static
    ``arange``) now holds that constant, as a var bound to it later does."""

    name = "folded"

    def breaks(self, walk, position, var, token):
        """True when ``var``, not bound to another value, now binds a constant."""
        return var not in walk.aliases and not walk.d.is_call(position) and walk.d.value(position).kind == CONST


class ReusedForLayout:
    """A var whose token this walk gave away already now calls a layout transform:
    AlterOpImpl reused the var of an op for the transform after its new
    implementation (``facts.reused_for_layout``). That the token went to another
    binding is the evidence the old value lives on there, so whatever the var computed
    before, it is taken as not moving data."""

    name = "layout-reuse"

    def breaks(self, walk, position, var, token):
        """True when this walk gave ``token`` away already and ``var`` now calls a layout
        transform."""
        return token in walk.claimed and facts.reused_for_layout(False, walk.d.callee(position) or "")


IDENTITY_EXCEPTIONS: tuple[IdentityException, ...] = (AliasNowCalls(), FoldedToConstant(), ReusedForLayout())


# -- the rules --------------------------------------------------------------------


class ValueKey:
    """``(callee, argument tokens)`` equals a key seen before, with ``call_tir(F, args)``
    and the lowered ``F(args, out)`` alike; a layout change a pass inserted is
    transparent, so a convolution fed through a new ``permute_dims`` still matches. A
    call computed from no value of its function (constants alone, or nothing:
    ComputePrimValue's ``compute_symbolic_expr()`` for an ``R.prim_value(0.25)``) has
    one key in every function that makes it: it is never matched to a value another
    function holds (two entries each passing 0.25 each have their own)."""

    name = "value"

    def find(self, binding, walk):
        """The first unclaimed token of the binding's value key, not one another
        function holds when no argument is a value of this function; None when there
        is none."""
        claimed = walk.claimed
        if not any(a.kind == VAR and walk.tokens.of_handle.get(a.handle) is not None for a in binding.call.atoms):
            claimed = claimed | walk.elsewhere()
        tok = walk.keys.match(binding.key, claimed, walk.held)
        return None if tok is None else Found(tok)


class Replay:
    """A call of a fused (``Primitive``) or offloaded (``Codegen``) group, matched
    through its body with its parameters bound to this call site's arguments: every
    call site of a shared group finds its own ops. The body is read once per function (``_recipe``). Where
    a step's key fits several earlier values, the one the rest of the body agrees with
    wins (``_replay``)."""

    name = "replay"

    def find(self, binding, walk):
        """The tokens the fused body's steps match (``made_of``), with the fields or the
        carried value of the call's result; None for a call of no fused function, a
        parameter count that differs from the arguments', or no step matched."""
        call = binding.call
        recipe = walk.recipe(call)
        if recipe is None:
            return None
        args = call.arguments()
        if len(recipe.params) != len(args):
            return None
        tokens = walk.tokens
        env: dict[int, int | None] = {}  # None: an argument no key holds (as a key leaves it out)
        for param, tok, arg in zip(recipe.params, tokens.arguments(call), args):
            if tok is None:  # a constant seen first
                tok = tokens.resolve(arg.kind, arg.handle)
            if tok is not None or arg.kind not in (VAR, CONST):
                env[param] = tok
        matched = _replay(recipe.steps, env, walk)
        if not matched:
            return None
        if recipe.tuple_output:  # each field of the call's result is the value its step made
            fields = tuple((i, tok) for i, field in enumerate(recipe.outputs) if (tok := env.get(field)) is not None)
            return Found(made_of=tuple(matched), fields=fields)
        carries = env.get(recipe.outputs[0]) if recipe.outputs else None
        return Found(made_of=tuple(matched), carries=carries)


def _replay(
    steps: tuple[Step, ...], env: dict, walk, start: int = 0, taken: frozenset[int] = frozenset(), trial: bool = False
) -> list[int]:
    """Match a recipe's steps from ``start`` on by value key (``walk.keys``), their var
    arguments resolved through ``env`` (param and step var handles -> tokens; filled in
    place); return the tokens matched, none in ``walk.claimed`` or ``taken``, each once.

    A key may fit several values: equal values made twice, such as the ``arange`` of
    a symbolic length that a causal mask and the positions each compute from no
    tensor at all. Each is then tried with the steps after it (``trial``: those take
    the first fit), and the one with which most of them match wins, the first on a
    tie: taking the first blindly hands one chain's ``arange`` to another's group,
    whose later steps then match nothing and are lost."""
    keys, claimed = walk.keys, walk.claimed
    canon = keys.tokens.canon
    matched: list[int] = []
    for at in range(start, len(steps)):
        var, callee, refs, item = steps[at]
        resolved = []
        for ref in refs:
            tok = ref.token if ref.var is None else env.get(ref.var, _UNKNOWN)
            if tok is _UNKNOWN:
                break  # an input this replay could not follow: no key to trust
            if tok is not None:
                resolved.append(canon.get(tok, tok))
        else:
            if callee is None:  # an alias, or a projection of field ``item``
                if not resolved:
                    continue
                tok = resolved[0] if item is None else keys.item(resolved[0], item)
            else:
                fits = [
                    t
                    for t in keys.table.get((callee, tuple(resolved)), ())
                    if t not in claimed and t not in taken and t not in matched
                ]
                if not fits:
                    continue
                tok = (
                    fits[0] if len(fits) == 1 or trial else _best_fit(fits, steps, at, env, walk, taken.union(matched))
                )
                matched.append(tok)
            env[var] = tok
    return matched


def _best_fit(fits: list[int], steps, at: int, env: dict, walk, taken: frozenset[int]) -> int:
    """Of the values step ``at`` fits, the one with which most steps after it match
    (each of them taking its first fit); the first on a tie."""
    var = steps[at].var

    def agreement(candidate: int) -> int:
        return len(_replay(steps, {**env, var: candidate}, walk, at + 1, taken | {candidate}, trial=True))

    return max(fits, key=agreement)


class ImplementationSwap:
    """One PrimFunc for another on the same inputs (AlterOpImpl), the old binding gone
    or now a layout transform. Not one Relax op for another: a pass that writes
    sigmoid where relu was has made a new op."""

    name = "args"

    def find(self, binding, walk):
        """The one unclaimed earlier PrimFunc call on the same argument tokens whose var is
        gone or now a layout transform; None for a new function, a call of no PrimFunc,
        or no such call or several."""
        if walk.old is None:
            return None
        callee, args = binding.key
        if not ops.is_prim_func(callee):
            return None
        found = []
        index = walk.old_index()
        for tok in index.by_args.get(args, ()):
            if tok in walk.claimed:
                continue
            handle, old_callee = index.tok_var[tok]
            moved_only = ops.is_data_movement(callee) and not ops.is_data_movement(old_callee)
            if not ops.is_prim_func(old_callee) or moved_only:
                continue
            now = walk.callees_after().get(handle)
            if now is None or facts.reused_for_layout(ops.is_data_movement(old_callee), now):
                found.append(tok)
        return Found(found[0]) if len(found) == 1 else None


class SameInputs:
    """The same op on the same tensor inputs as a binding whose var the pass dropped,
    its constant arguments rewritten (ConvertLayout turns a slice's axis 1 into 3). Of
    several such bindings, the one whose constants agree most; none on a tie."""

    name = "inputs"

    def find(self, binding, walk):
        """The earlier binding of the same callee on the same var inputs whose var the pass
        dropped, the one with most argument tokens equal; None for a new function, for
        none, or on a tie."""
        if walk.old is None:
            return None
        callee, args = binding.key
        index = walk.old_index()
        present = walk.present()
        found = [
            (sum(a == b for a, b in zip(old_args, args)), tok)
            for tok, old_args in index.by_inputs.get((callee, walk.tokens.var_inputs(binding.call)), ())
            if tok not in walk.claimed and index.tok_var[tok][0] not in present
        ]
        if not found:
            return None
        best = max(score for score, _ in found)
        winners = [tok for score, tok in found if score == best]
        return Found(winners[0]) if len(winners) == 1 else None


class ConstantsRewritten:
    """A pass that folds an op into the one before it rewrites both: the op before keeps
    its data input and gets arguments computed from constants alone, and the folded
    op's place is taken by a new op on that result and more constants
    (``FoldBatchnormToConv2D``: ``bn(conv2d(x, W))[0]`` becomes ``conv2d(x, W * s) + b``;
    ``FoldConstant`` later folds ``W * s`` and ``b``). Leaving out the arguments made
    of constants alone: the dropped binding of the same callee on the same inputs (the
    conv; of several, the one whose constants the new arguments are made of: the conv
    of ``W``, not the one of ``W2`` on the same input), else the one dropped binding of
    another callee on them (the norm: its first field, the value the model read, when
    it made a tuple). None when no argument is made of constants alone
    (``SameInputs``' case), when every one is (a computation of constants, which
    FoldConstant folds: matched by nothing, it is inserted), for none, or on a tie."""

    name = "constants"

    def find(self, binding, walk):
        """The dropped binding this one computes again, its constants rewritten."""
        if walk.old is None:
            return None
        atoms = [a for a in binding.call.atoms if a.kind == VAR and walk.tokens.of_handle.get(a.handle) is not None]
        made = [walk.from_constants(a.handle) for a in atoms]
        if all(m is None for m in made) or all(m is not None for m in made):
            return None  # no argument made of constants, or nothing else: a constant's own computation
        inputs = tuple(walk.tokens.canonical(walk.tokens.of_handle[a.handle]) for a, m in zip(atoms, made) if m is None)
        used = frozenset().union(*(m for m in made if m is not None))
        index, present = walk.old_index(), walk.present()

        def dropped(tok):
            return tok not in walk.claimed and index.tok_var[tok][0] not in present

        same = [
            (len(used.intersection(args)), tok)
            for tok, args in index.by_inputs.get((binding.key[0], inputs), ())
            if dropped(tok)
        ]
        if same:
            best = max(score for score, _ in same)
            winners = [tok for score, tok in same if score == best]
            return Found(winners[0]) if len(winners) == 1 else None
        other = [
            tok
            for (callee, ins), found in index.by_inputs.items()
            if ins == inputs and callee != binding.key[0]
            for tok, _ in found
            if dropped(tok)
        ]
        if len(other) != 1:
            return None
        return Found(walk.keys.item(other[0], 0) if walk.keys.has_items(other[0]) else other[0])


DEFAULT_RULES: tuple[TrackingRule, ...] = (
    ValueKey(),
    Replay(),
    ImplementationSwap(),
    SameInputs(),
    ConstantsRewritten(),
)


def read_recipe(func, read, tokens) -> Recipe | None:
    """A group's body (``Recipe``), read with ``read``, its constants' tokens from
    ``tokens`` (a constant seen first gets one); None for a function that is not a
    group (``ir.is_group``). An offloaded group's composite functions are read in
    place of their calls (``_steps``): its ops are theirs."""
    if not ir.is_group(func):
        return None
    d = read(func)
    steps: list[Step] = []
    _steps(d, read, tokens, steps)
    out = d.output()
    fields = out.fields if out is not None and out.kind == TUPLE else [out] if out is not None else []
    outputs = tuple(f.handle for f in fields if f.kind == VAR)
    return Recipe(tuple(d.params), tuple(steps), outputs, out is not None and out.kind == TUPLE)


def _steps(d, read, tokens, steps: list[Step], depth: int = 0) -> None:
    """The steps of one body, appended to ``steps``; a call of a function the body
    calls in place (``reader.local_function``: a composite function, nested at most 8
    deep) as its parameters aliased to the arguments, its own steps, and the binding
    aliased to its result."""
    bound = {*d.params, *d.vars}
    for position, var in enumerate(d.vars):
        made = d.call(position)
        if made is not None:
            refs = [
                _ref(tokens, a.kind, a.handle, bound) for a in made.atoms if a.kind != TUPLE
            ]  # a tuple argument is read through its fields
            inner = d.local_function(position) if depth < 8 else None
            if inner is None:
                steps.append(Step(var, made.callee, tuple(r for r in refs if r is not None), None))
                continue
            body = read(inner)
            steps.extend(Step(param, None, (ref,), None) for param, ref in zip(body.params, refs) if ref is not None)
            _steps(body, read, tokens, steps, depth + 1)
            result = body.output()
            if result is not None and result.kind == VAR:
                steps.append(Step(var, None, (Ref(result.handle, None),), None))
            continue
        value = d.value(position)
        if value.kind == VAR:  # an alias
            steps.append(Step(var, None, (Ref(value.handle, None),), None))
        elif value.kind == ITEM and value.of.kind == VAR:  # a projection
            steps.append(Step(var, None, (Ref(value.of.handle, None),), value.item))


def _ref(tokens, kind, handle, bound: set[int]) -> Ref | None:
    """The ref of a var of the body (a parameter or a binding) or of a constant, else
    None. A var the body binds nowhere is a symbolic dim
    (TVM 0.27 passes ``past`` to a PrimFunc as a var of type int64, defined by the
    shapes of the parameters): it carries no value, and is left out as a value key
    leaves it out (it has no token there either)."""
    if kind == VAR:
        return Ref(handle, None) if handle in bound else None
    tok = tokens.raw(kind, handle)
    return None if tok is None else Ref(None, tok)
