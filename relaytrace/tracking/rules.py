"""The tracking rules that search: which earlier value a binding with a new Var is.

Identity comes first and needs no search: a Var object that survived a pass keeps its
token (``Tracker._process``, with its two exceptions: a var that named another value
and now calls something of its own, a var AlterOpImpl reused for a layout transform).
A binding whose Var is new is offered to each rule of ``DEFAULT_RULES`` in order; the
first that names a token wins, and a binding no rule explains is new (inserted or
unresolved). Names are never evidence: generated names such as ``lv20`` recur.

A rule is a small object with a ``name`` (what ``PassEvent.rules`` and each ``Change``
record) and ``find(tracker, functions, binding, walk) -> token | None``. It may read
the tracker's ``tokens`` and ``keys`` and the function as the pass before left it
(``walk.old``), and
must never hand a token ``walk.claimed`` holds (one value's origins go to one binding).
``[rule.name for rule in DEFAULT_RULES]`` lists them; tests/test_rules.py shows each
firing where it should and not where it should not.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from . import reader
from . import ir
from .reader import CONST, FIELD, ITEM, TUPLE, VAR
from ..model import ops

_UNKNOWN = object()  # a replayed var whose value no step could follow


class Binding(NamedTuple):
    """A call binding whose Var is new to the tracker, as the rules see it."""

    call: reader.CallView
    key: tuple  # its value key (``keys.ValueKeys.key``): (callee, canonical argument tokens)


class Rule(Protocol):
    name: str

    def find(self, tracker, functions: dict, binding: Binding, walk) -> int | None: ...


class ValueKey:
    """``(callee, argument tokens)`` equals a key seen before, with ``call_tir(F, args)``
    and the lowered ``F(args, out)`` alike; a layout change a pass inserted is
    transparent, so a convolution fed through a new ``permute_dims`` still matches. A
    shape function's only argument is the VM's shape heap, which carries no token: its
    key tells no two shape functions apart, so it matches nothing."""

    name = "value"

    def find(self, tracker, functions, binding, walk):
        if ops.is_shape_computation(binding.call.callee):
            return None
        return tracker.keys.match(binding.key, walk.claimed)


class Replay:
    """A call of a fused (``Primitive``) function, matched through its body with its
    parameters bound to this call site's arguments: every call site of a shared fused
    kernel finds its own ops. The body is read once per function (``_recipe``). Where
    a step's key fits several earlier values, the one the rest of the body agrees with
    wins (``_replay``)."""

    name = "replay"

    def find(self, tracker, functions, binding, walk):
        call = binding.call
        if not call.global_var:
            return None
        recipe = walk.recipes.get(call.global_var, False)
        if recipe is False:
            func = functions.get(call.callee)
            recipe = walk.recipes[call.global_var] = _recipe(tracker, func) if func is not None else None
        if recipe is None:
            return None
        params, steps, outputs, tuple_output = recipe
        args = call.arguments()
        if len(params) != len(args):
            return None
        tokens, keys = tracker.tokens, tracker.keys
        env: dict[int, int | None] = {}  # None: an argument no key holds (as a key leaves it out)
        for param, tok, (kind, handle) in zip(params, tokens.arguments(call), args):
            if tok is None:  # a constant seen first
                tok = tokens.resolve(kind, handle)
            if tok is not None or kind not in (VAR, CONST):
                env[param] = tok
        matched = _replay(steps, env, keys, walk.claimed)
        if not matched:
            return None
        walk.claimed.update(matched)
        result = tokens.new(tokens.union(matched))
        if tuple_output:  # each field of the call's result is the value its step made
            for i, field in enumerate(outputs):
                if env.get(field) is not None:
                    keys.set_item(result, i, env[field])
        elif outputs and env.get(outputs[0]) is not None:
            tokens.alias(result, env[outputs[0]])
        return result


def _replay(steps, env: dict, keys, claimed: set[int], start: int = 0, taken: frozenset[int] = frozenset(),
            trial: bool = False) -> list[int]:
    """Match a recipe's steps from ``start`` on by value key, their var arguments
    resolved through ``env`` (param and step var handles -> tokens; filled in place);
    return the tokens matched, none in ``claimed`` or ``taken``, each once.

    A key may fit several values: equal values made twice, such as the ``arange`` of
    a symbolic length that a causal mask and the positions each compute from no
    tensor at all. Each is then tried with the steps after it (``trial``: those take
    the first fit), and the one with which most of them match wins, the first on a
    tie: taking the first blindly hands one chain's ``arange`` to another's group,
    whose later steps then match nothing and are lost."""
    canon = keys.tokens.canon
    matched: list[int] = []
    for at in range(start, len(steps)):
        var, callee, refs, index = steps[at]
        resolved = []
        for ref, const in refs:
            tok = const if const is not None else env.get(ref, _UNKNOWN)
            if tok is _UNKNOWN:
                break  # an input this replay could not follow: no key to trust
            if tok is not None:
                resolved.append(canon.get(tok, tok))
        else:
            if callee is None:  # an alias, or a projection of field ``index``
                if not resolved:
                    continue
                tok = resolved[0] if index is None else keys.item(resolved[0], index)
            else:
                fits = [t for t in keys.table.get((callee, tuple(resolved)), ())
                        if t not in claimed and t not in taken and t not in matched]
                if not fits:
                    continue
                tok = fits[0] if len(fits) == 1 or trial else \
                    _best_fit(fits, steps, at, env, keys, claimed, taken.union(matched))
                matched.append(tok)
            env[var] = tok
    return matched


def _best_fit(fits: list[int], steps, at: int, env: dict, keys, claimed: set[int], taken: frozenset[int]) -> int:
    """Of the values step ``at`` fits, the one with which most steps after it match
    (each of them taking its first fit); the first on a tie."""
    var = steps[at][0]

    def agreement(candidate: int) -> int:
        return len(_replay(steps, {**env, var: candidate}, keys, claimed, at + 1, taken | {candidate}, trial=True))

    return max(fits, key=agreement)


class ImplementationSwap:
    """One PrimFunc for another on the same inputs (AlterOpImpl), the old binding gone
    or now a layout transform. Not one Relax op for another: a pass that writes
    sigmoid where relu was has made a new op."""

    name = "args"

    def find(self, tracker, functions, binding, walk):
        if walk.old is None:
            return None
        callee, args = binding.key
        if not ops.is_prim_func(callee):
            return None
        found = []
        index = walk.old.index(tracker)
        for tok in index.by_args.get(args, ()):
            if tok in walk.claimed:
                continue
            handle, old_callee = index.tok_var[tok]
            if not ops.is_prim_func(old_callee) or ops.is_data_movement(callee) and not ops.is_data_movement(old_callee):
                continue
            now = walk.callee_of().get(handle)
            if now is None or (ops.is_data_movement(now) and not ops.is_data_movement(old_callee)):
                found.append(tok)
        return found[0] if len(found) == 1 else None


class SameInputs:
    """The same op on the same tensor inputs as a binding whose var the pass dropped,
    its constant arguments rewritten (ConvertLayout turns a slice's axis 1 into 3). Of
    several such bindings, the one whose constants agree most; none on a tie."""

    name = "inputs"

    def find(self, tracker, functions, binding, walk):
        if walk.old is None:
            return None
        callee, args = binding.key
        index = walk.old.index(tracker)
        present = walk.present()
        found = [(sum(a == b for a, b in zip(old_args, args)), tok)
                 for tok, old_args in index.by_inputs.get((callee, tracker.tokens.var_inputs(binding.call)), ())
                 if tok not in walk.claimed and index.tok_var[tok][0] not in present]
        if not found:
            return None
        best = max(score for score, _ in found)
        winners = [tok for score, tok in found if score == best]
        return winners[0] if len(winners) == 1 else None


DEFAULT_RULES: tuple[Rule, ...] = (ValueKey(), Replay(), ImplementationSwap(), SameInputs())


def _recipe(tracker, func) -> tuple | None:
    """A fused function's body read once, as plain data: (param handles, steps of
    (var handle, callee or None for aliases and projections, arguments as (var
    handle, constant token), field index of a projection or None), the var
    handles of the result, whether the result is a tuple of them); None for a
    function that is not a fused group. Every call site of a shared group is
    replayed from it without touching TVM."""
    handle = func.__chandle__()
    if handle not in tracker.recipes:
        if not ir.is_primitive(func):
            tracker.recipes[handle] = None
            return None
        d = tracker.read(func)
        bound = {*d.params, *d.vars}
        steps = []
        for position, var in enumerate(d.vars):
            made = reader.call(d, position)
            if made is not None:
                atoms = made.atoms
                refs = [_ref(tracker, atoms[i] % FIELD, atoms[i + 1], bound) for i in range(0, len(atoms), 3)
                        if atoms[i] != TUPLE]  # a tuple argument is read through its fields
                steps.append((var, made.callee, tuple(r for r in refs if r is not None), None))
                continue
            value = reader.value(d, position)
            if value[0] == VAR:  # an alias
                steps.append((var, None, ((value[1], None),), None))
            elif value[0] == ITEM and value[2][0] == VAR:  # a projection
                steps.append((var, None, ((value[2][1], None),), value[3]))
        out = reader.output(d)
        fields = out[2] if out is not None and out[0] == TUPLE else [out] if out is not None else []
        outputs = tuple(f[1] for f in fields if f[0] == VAR)
        tracker.recipes[handle] = (tuple(d.params), tuple(steps), outputs, out is not None and out[0] == TUPLE)
    return tracker.recipes[handle]


def _ref(tracker, kind, handle, bound: set[int]) -> tuple[int | None, int | None] | None:
    """(var handle, None) for a var of the body (a parameter or a binding), (None,
    token) for a constant, else None. A var the body binds nowhere is a symbolic dim
    (TVM 0.27 passes ``past`` to a PrimFunc as a var of type int64, defined by the
    shapes of the parameters): it carries no value, and is left out as a value key
    leaves it out (it has no token there either)."""
    if kind == VAR:
        return (handle, None) if handle in bound else None
    tok = tracker.tokens.raw(kind, handle)
    return None if tok is None else (None, tok)
