"""Ground truth for verification, read from a traced build's record (needs TVM).

``kernel_members`` says what each kernel is made of: the fused group FuseOps made
(FuseTIR keeps its name) and its member PrimFuncs, or one PrimFunc; and which op
each PrimFunc computes, shown by the IR itself (see ``model.verification``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..model.build_facts import Offload
from ..model.ops import (
    is_bookkeeping,
    is_data_movement,
    is_external_call,
    is_prim_value_computation,
    is_shape_computation,
)
from ..model.verification import Member
from . import facts, ir, reader
from .recorder import FUSE_TIR

if TYPE_CHECKING:
    from .recorder import PassRecord


def kernel_members(input_functions: dict, passes: Sequence[PassRecord], read) -> dict[str, tuple[Member, ...]]:
    """kernel name -> its members, from the functions of the input and of each recorded
    pass; ``read(func, old)`` reads a function's view (bindings ``old`` has too left
    out; None when it has them all). The module a pass returned is asked for the
    ``operator_name`` attribute of PrimFuncs no binding explains: the op an
    implementation (AlterOpImpl's) declares. Modules are read after the Relax passes: a Python
    pass that changed a module object in place later could hide a PrimFunc, and its
    sites are then unverified, not wrong."""
    prim_ops: dict[str, set[str]] = {}
    computes = _Computes(read, prim_ops)
    computes.record(input_functions, input_=True)
    groups, members_at, fused_at = fusion_groups(passes)
    for record in passes[:fused_at]:  # once fused, ops are found through the groups, and main need not be read
        computes.record(record.functions)
    for prim, op in _named_ops(passes, members_at).items():
        prim_ops.setdefault(prim, set()).add(op)
    kernels = _Kernels(computes, {**computes.groups, **groups})  # every group a recorded pass made
    out: dict[str, tuple[Member, ...]] = {}
    for name in groups:
        out[name] = kernels.made_of(name)
    for prim in (*prim_ops, *computes.made_from):
        out.setdefault(prim, kernels.made_of(prim))
    for name, func in _offloaded(passes).items():
        out[name] = tuple(Member(pattern, (op,)) for pattern, op in _offloaded_ops(func, read))
    for callee in _external_calls(input_functions, read):  # the input calls it by name: it computes itself
        out.setdefault(callee, (Member(callee, (callee,)),))
    return out


class _Kernels:
    """What each kernel or PrimFunc is made of (``made_of``), from what the model
    functions showed (``_Computes``) and the groups fusion made (``bodies``: name -> its
    function). A class, not a closure that calls itself: such a closure is a reference
    cycle, and every view the build's reads hold would wait for Python's cyclic
    collector instead of being freed when the follow ends."""

    def __init__(self, computes: _Computes, bodies: dict[str, Any]):
        self.computes = computes  # its ``read`` reads the groups' bodies too
        self.bodies = bodies

    def member(self, prim: str) -> Member:
        """``prim`` as a member: the ops it computes, whether it computes a part of one,
        and what it shares (``facts``)."""
        computes, ops = self.computes, self.computes.prim_ops.get(prim, ())
        shared = (
            (facts.LOWERED_PART,) * (prim in computes.parts)
            + (facts.LAYOUT_REUSE,) * (prim in computes.reused)
            + (facts.FOLDED_NORM,) * (facts.NORM in ops and "relax.add" in ops)
        )
        return Member(prim, tuple(sorted(ops)), prim in computes.parts, shared)

    def made_of(self, name: str, seen: frozenset[str] = frozenset()) -> tuple[Member, ...]:
        """What PrimFunc or group ``name`` is made of, down to the PrimFuncs ops were
        lowered to: a group's members, each as made of (a kernel fused again with
        another, MLC's dequantize and matmul, is its own members'); a Relax op left in
        a group, itself; a PrimFunc made in place of a group's call (``call_te``), the
        group's ops under its own name; else the PrimFunc, computing what the evidence says."""
        seen = seen | {name}
        if name in self.bodies:
            found: list[Member] = []
            for _, c in group_calls(self.computes.read(self.bodies[name])):
                if not c.global_var:
                    found.append(Member(c.callee, (c.callee,)))
                else:
                    found += self.made_of(c.callee, seen) if c.callee not in seen else (self.member(c.callee),)
            return tuple(found)
        made_from = self.computes.made_from
        if name in made_from and made_from[name] not in seen:
            return tuple(attrs.evolve(m, prim_func=name) for m in self.made_of(made_from[name], seen))
        return (self.member(name),)


def _offloaded(passes: Sequence[PassRecord]) -> dict[str, object]:
    """Each name an offloaded group goes by (``_offload_names``) -> its function, from
    every recorded pass."""
    found: dict[str, object] = {}
    for record in passes:
        for name, func in record.functions.items():
            if ir.is_offloaded(func):
                found.update(dict.fromkeys(_offload_names(name, func), func))
    return found


def _named_ops(passes: Sequence[PassRecord], members_at) -> dict[str, str]:
    """PrimFunc -> the op its name or declaration says it computes: the ``operator_name``
    of PrimFuncs the module ``members_at`` declares (``_declared_ops``), and the shape
    functions VMShapeLower made and the prim values ComputePrimValue made (explicit
    tables) in the last module with a Relax function, each computing what its name says."""
    named = _declared_ops(members_at) if members_at is not None else {}
    last = next((r.module for r in reversed(passes) if ir.model_functions(r.functions)), None)
    if last is not None:
        named.update(
            {
                name: name
                for name in ir.prim_func_map(last)
                if is_shape_computation(name) or is_prim_value_computation(name)
            }
        )
    return named


def group_calls(d: reader.FunctionView) -> list[tuple[int, reader.CallView]]:
    """(position, call) of each member of a fused group (view ``d``), in binding order:
    its calls but the bookkeeping. The one reading of a group's members: the kernel's
    members (``kernel_members``) and its blocks' (``tracking.code``) line up by it."""
    calls = ((p, d.call(p)) for p in range(len(d.vars)))
    return [(p, c) for p, c in calls if c is not None and not is_bookkeeping(c.callee)]


def fusion_groups(passes: Sequence[PassRecord]) -> tuple[dict[str, Any], Any, int]:
    """What fusion made, for ``kernel_members`` and the code (``tracking.code``): each
    fused group that became a kernel (name -> its function, as the last pass that had it
    left it), the module whose PrimFuncs the groups are made of (FuseOps' output; the
    last module with Relax functions when nothing was fused) and the index of the first
    record with such a group (``len(passes)``: none). A group becomes a kernel when a
    FuseTIR turns it into a PrimFunc of its name; one whose calls a pass rewrote into
    something else first (MLC-LLM's ``FuseTransposeMatmul`` groups a pattern, then
    emits each call as a new PrimFunc) is no kernel. A recording without FuseTIR takes
    every group."""
    fused = [set(r.prim_funcs) for r in passes if r.pass_name == FUSE_TIR and r.prim_funcs is not None]
    kernels = set().union(*fused) if fused else None
    groups: dict[str, Any] = {}
    members_at = None
    first = len(passes)
    for i, record in enumerate(passes):
        fused_before = bool(groups)
        for name, func in record.functions.items():
            if ir.is_primitive(func) and (kernels is None or name in kernels):
                groups[name] = func
        if groups and not fused_before:
            first = i
        if ir.model_functions(record.functions) and not fused_before:
            members_at = record.module
    return groups, members_at, first


def offloads(passes: Sequence[PassRecord], read) -> dict[str, Offload]:
    """Each group handed to an external codegen (``ir.is_offloaded``), by its name and
    its symbol (the name ``RunCodegen``'s external call takes): the codegen, the
    patterns of its composite functions and its signature, read from the recorded IR."""
    out: dict[str, Offload] = {}
    for record in passes:
        for name, func in record.functions.items():
            if ir.is_offloaded(func):
                patterns = tuple(dict.fromkeys(pattern for pattern, _ in _offloaded_ops(func, read)))
                params = tuple(t for ty in (*(p.ty for p in func.params), func.ret_ty) for t in ir.tensor_types(ty))
                out.update(dict.fromkeys(_offload_names(name, func), Offload(ir.codegen_of(func), patterns, params)))
    return dict(sorted(out.items()))


def _offload_names(name: str, func) -> tuple[str, ...]:
    """An offloaded group's name and its ``global_symbol`` (its external call's name)."""
    symbol = str(func.attrs["global_symbol"]) if "global_symbol" in func.attrs else name
    return tuple(dict.fromkeys((name, symbol)))


def _offloaded_ops(func, read, pattern: str = "") -> list[tuple[str, str]]:
    """``(pattern, op)`` of every op an offloaded group computes, in order: the ops of
    each composite function it calls, under that function's pattern (``Composite``);
    an op outside any, under the codegen's name."""
    d = read(func)
    out: list[tuple[str, str]] = []
    for position in range(len(d.vars)):
        made = d.call(position)
        if made is None or is_bookkeeping(made.callee):
            continue
        inner = d.local_function(position)
        if inner is not None:
            out += _offloaded_ops(inner, read, ir.pattern_of(inner) or pattern)
        else:
            out.append((pattern or ir.codegen_of(func), made.callee))
    return out


def _external_calls(functions: dict, read) -> set[str]:
    """The external functions (``ops.is_external_call``) the input's model functions
    call: ``R.call_dps_packed("my.double", ...)``."""
    found: set[str] = set()
    for func in ir.model_functions(functions).values():
        d = read(func)
        calls = (d.call(position) for position in range(len(d.vars)))
        found.update(c.callee for c in calls if c is not None and not c.global_var and is_external_call(c.callee))
    return found


def tuned_kernels(passes: Sequence[PassRecord], pass_name: str = "MetaScheduleApplyDatabase") -> tuple[str, ...]:
    """The PrimFuncs a database pass replaced with a tuned schedule: those whose object
    differs between the module before the pass and the module after it."""
    tuned: set[str] = set()
    for before, after in zip(passes, passes[1:]):
        if after.pass_name == pass_name:
            old = {gv.name_hint: f for gv, f in before.module.functions.items() if not isinstance(f, ir.relax.Function)}
            tuned.update(
                gv.name_hint
                for gv, f in after.module.functions.items()
                if gv.name_hint in old and not old[gv.name_hint].same_as(f)
            )
    return tuple(sorted(tuned))


def shape_consumers(passes: Sequence[PassRecord], read=reader.read) -> dict[str, tuple[str, ...]]:
    """shape function -> the kernels whose output allocations are sized from the shape
    heap slots it writes, read from the last recorded module with Relax functions: the
    slots a ``shape_func`` PrimFunc stores (its TIR), the slots each
    ``vm.builtin.make_shape`` loads (kind 1 pairs of its arguments), and the
    allocations and kernel calls those shapes reach. Independent of the tracker's
    rules, which see only that a kernel's allocation reads the heap after the shape
    function; ``read`` reads a function's view (the build's shared reads: the reader
    states what the IR holds, nothing more)."""
    module = next((r.module for r in reversed(passes) if ir.model_functions(r.functions)), None)
    if module is None:
        return {}
    prims = {gv.name_hint: f for gv, f in module.functions.items() if not isinstance(f, ir.relax.Function)}
    if not any(is_shape_computation(name) for name in prims):
        return {}  # static shapes: no binding to read
    consumers: dict[str, set[str]] = {}
    slots: dict[str, set[int]] = {}  # shape function -> the heap slots it stores (its TIR, read once)
    for func in ir.model_functions(ir.function_map(module)).values():
        writer: dict[int, str] = {}  # heap slot -> the shape function that wrote it last
        reaches: dict[int, set[str]] = {}  # var handle -> the shape functions whose slots it carries
        d = read(func)
        for position, var in enumerate(d.vars):
            name = d.callee(position)
            if name is None:
                continue
            if is_shape_computation(name) and name in prims:
                consumers.setdefault(name, set())
                if name not in slots:
                    slots[name] = _stored_slots(prims[name].body)
                writer.update(dict.fromkeys(slots[name], name))
                continue
            if not writer:
                continue  # before the first shape function, nothing carries its slots
            if name == "vm.builtin.make_shape":
                ints = d.integer_arguments(position)[2:]
                found = {writer[v] for k, v in zip(ints[0::2], ints[1::2]) if k == 1 and v in writer}
            else:
                found = set().union(
                    *(reaches.get(a.handle, set()) for a in d.call(position).arguments() if a.kind == reader.VAR)
                )
            if not found:
                continue
            if name in prims:  # a kernel writing into such an allocation
                for shape_func in found:
                    consumers[shape_func].add(name)
            else:  # alloc_storage, alloc_tensor, ...: what they make carries those shapes on
                reaches[var] = found
    return {name: tuple(sorted(kernels)) for name, kernels in sorted(consumers.items())}


def _stored_slots(stmt) -> set[int]:
    """The constant indices a shape function's body stores into its heap buffer."""
    from tvm import tirx

    if isinstance(stmt, tirx.BufferStore):
        return {int(i) for i in stmt.indices if isinstance(i, tirx.IntImm)}
    out: set[int] = set()
    for attr in ("seq", "body", "then_case", "else_case"):
        child = getattr(stmt, attr, None)
        if child is not None:
            for part in list(child) if attr == "seq" else [child]:
                out |= _stored_slots(part)
    return out


def _declared_ops(mod) -> dict[str, str]:
    """PrimFunc name -> the op its ``operator_name`` attribute declares."""
    out: dict[str, str] = {}
    for gv, func in mod.functions.items():
        attrs = getattr(func, "attrs", None)
        if not isinstance(func, ir.relax.Function) and attrs is not None and "operator_name" in attrs:
            out[gv.name_hint] = str(attrs["operator_name"])
    return out


def _folds_a_norm(made, made_at: dict) -> bool:
    """``facts.folds_a_norm`` of one op call, its arguments read among the calls a pass
    wrote (``made_at``: var -> call)."""
    if made.callee != "relax.add":
        return False
    args = [a for a in made.arguments()]
    first = made_at.get(args[0].handle) if args and args[0].kind == reader.VAR else None
    if first is None or first.callee != facts.CONV:
        return False  # no conv under the add: whatever its arguments are made of (a chain of
        # thousands of adds would be walked back, each add, beyond the interpreter's recursion limit)
    weight = first.arguments()[1] if first is not None and len(first.arguments()) > 1 else None
    return facts.folds_a_norm(
        made.callee,
        first.callee if first is not None else None,
        weight is not None and weight.kind == reader.VAR and _from_constants(weight.handle, made_at),
        all(a.kind != reader.VAR or _from_constants(a.handle, made_at) for a in args[1:]),
    )


def _from_constants(var: int, made_at: dict, seen: frozenset = frozenset()) -> bool:
    """Whether ``var`` is bound (among ``made_at``) to a call whose var arguments all are:
    made of constants alone."""
    made = made_at.get(var)
    if made is None or var in seen:
        return False
    return all(_from_constants(a.handle, made_at, seen | {var}) for a in made.atoms if a.kind == reader.VAR)


class _Computes:
    """What each binding of the model functions computes, pass by pass: an op name,
    or the ops of the PrimFunc it calls. A Var that computed op X before a pass and
    calls PrimFunc P after it shows that P computes X (``prim_ops``). A Var that called
    a group (a pattern's composite function) before a pass and calls a PrimFunc no
    pass has shown computing anything after it shows that the PrimFunc computes what
    the group's body does (``made_from``: MLC-LLM's ``FuseTransposeMatmul`` emits
    ``NT_matmul`` with ``call_te`` in place of each call of its pattern's group)."""

    def __init__(self, read, prim_ops: dict[str, set[str]]):
        self.read = read
        self.prim_ops = prim_ops
        self.parts: set[str] = set()  # PrimFuncs that compute a part of an op another one finishes
        self.reused: set[str] = set()  # callees of vars reused for a layout transform (``facts.reused_for_layout``)
        self.groups: dict[str, Any] = {}  # the groups the model functions called -> their functions
        self.made_from: dict[str, str] = {}  # PrimFunc -> the group whose calls it was made in place of
        # name -> (function, var -> ops, var -> the group it calls)
        self.state: dict[str, tuple[Any, dict[int, tuple[str, ...]], dict[int, str]]] = {}

    def record(self, functions: dict, input_: bool = False) -> None:
        for name, func in ir.model_functions(functions).items():
            old_func, old, old_calls = self.state.get(name, (None, {}, {}))
            if old_func is not None and old_func.same_as(func):
                continue
            d = self.read(func, old_func)
            if d is None:  # rebuilt around the same bindings
                self.state[name] = (func, old, old_calls)
                continue
            now = {var: old[var] for var, value in zip(d.vars, d.values) if not value and var in old}
            calls = {var: old_calls[var] for var, value in zip(d.vars, d.values) if not value and var in old_calls}
            made_at = {d.vars[p]: d.call(p) for p in d.changed}
            for position in d.changed:
                made = d.call(position)
                if made is None or is_bookkeeping(made.callee):
                    continue
                callee, gv = made.callee, made.global_var
                var = d.vars[position]
                if not gv:  # an op; one a pass wrote in place of another still computes that one
                    if is_external_call(callee) and old.get(var):  # an op a pass dispatched to an external function
                        self.prim_ops.setdefault(callee, set()).update(old[var])
                    was = self._carried(old.get(var, ()), callee) if callee.startswith("relax.") else ()
                    was += (facts.NORM,) * _folds_a_norm(made, made_at)
                    now[var] = tuple(sorted({callee, *was})) if callee.startswith("relax.") else ()
                elif callee not in functions:  # a PrimFunc (not a fused group or a subfunction)
                    was = self._carried(old.get(var, ()), callee)
                    if was:
                        self.prim_ops.setdefault(callee, set()).update(was)
                    elif var in old_calls and not self.prim_ops.get(callee) and callee not in self.made_from:
                        self.made_from[callee] = old_calls[var]
                    elif input_:  # the input itself calls a PrimFunc (a frontend's emit_te): the op is its name
                        self.prim_ops.setdefault(callee, set()).add(callee)
                    now[var] = tuple(self.prim_ops.get(callee, ()))
                elif ir.is_primitive(functions[callee]):  # a group, called before fusion
                    self.groups[callee] = functions[callee]
                    calls[var] = callee
            self._parts(d, old, now, functions)
            self.state[name] = (func, now, calls)

    def _carried(self, was: tuple[str, ...], callee: str) -> tuple[str, ...]:
        """What a rebound Var computed that its new callee computes too: nothing when
        it was reused for a layout transform (``facts.reused_for_layout``)."""
        if was and facts.reused_for_layout(all(is_data_movement(op) for op in was), callee):
            self.reused.add(callee)
            return ()
        return was

    def _parts(self, d, old, now, functions) -> None:
        """A new PrimFunc call that is a part of an op X lowered in place
        (``facts.lowered_parts``: the Var that bound X now calls a PrimFunc computing
        X, or a part of an earlier pass's) computes a part of X."""
        consumers: dict[int, set[int]] = {}
        calls = {}
        for position in d.changed:
            made = d.call(position)
            if made is None:
                continue
            calls[d.vars[position]] = made
            for arg in made.arguments():
                if arg.kind == reader.VAR:
                    consumers.setdefault(arg.handle, set()).add(d.vars[position])

        def prim_func_call(var) -> bool:
            return var in calls and bool(calls[var].global_var) and calls[var].callee not in functions

        candidates = [
            var for var in calls if var not in old and prim_func_call(var) and not self.prim_ops.get(calls[var].callee)
        ]

        def wholes(var) -> bool:
            return prim_func_call(var) and bool(now.get(var)) and (var in old or calls[var].callee in self.parts)

        for var, whole in facts.lowered_parts(candidates, consumers, wholes).items():
            self.prim_ops.setdefault(calls[var].callee, set()).update(now[whole])
            self.parts.add(calls[var].callee)
            now[var] = now[whole]
