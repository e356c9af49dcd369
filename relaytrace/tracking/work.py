"""Each kernel's work counted from its TIR, as formulas over its symbolic dims (needs TVM).

Why our own count and not ``tvm.s_tir.analysis.estimate_tir_flops``: TVM's estimate
counts a loop of symbolic extent once (a decoder at a symbolic sequence length comes
out as if it were one token long), and the comparisons and index arithmetic of
padding (``if_then_else(0 <= h - 1 < 56, ...)``) as FLOPs. This walk multiplies each
store's float operations by its loop nest's extents kept as formulas
(``model.work.Poly``), does not count index arithmetic (the indices of loads and
stores, conditions on ints), and counts transcendental calls apart.
``tests/test_work.py`` holds it to the analytic counts and to TVM's estimate where
that one is right.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import tvm
from tvm import tirx

from ..model.verification import Member
from ..model.work import BEFORE_SCHEDULE, SCHEDULED, KernelWork, Poly, normal
from . import ir

# by the name after TVM's namespace (``tirx.exp`` in TVM 0.27, ``tir.exp`` before)
_TRANSCENDENTAL = frozenset(
    {
        "exp",
        "exp2",
        "exp10",
        "log",
        "log2",
        "log10",
        "log1p",
        "sqrt",
        "rsqrt",
        "tanh",
        "sigmoid",
        "erf",
        "pow",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
    }
)
_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max)
_COMPARE = (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)


def kernel_works(
    passes: Sequence, kernels: Iterable[str], members: Mapping[str, Sequence[Member]] | None = None
) -> dict[str, KernelWork]:
    """PrimFunc name -> its ``KernelWork``, for the ``kernels`` that are PrimFuncs of the
    build, and for the member PrimFuncs of each fused kernel (``members``: kernel ->
    its ``Member``s) as they were before FuseTIR merged them (what splits a fused
    kernel's time among its ops). A kernel is counted on the PrimFunc as the last pass
    that fused (FuseTIR, or LegalizeOps without fusion) left it, before any schedule
    tiled it (a tile's padding would be counted, a GPU reduction split across threads
    counted twice); on the kernel as built when that one has other parameters (a
    layout a schedule rewrote)."""
    modules = [r.module for r in passes if r.functions and ir.model_functions(r.functions)]
    if not modules:
        return {}
    final = _prim_funcs(modules[-1])
    unscheduled, fused = _unscheduled_module(passes)
    base = _prim_funcs(unscheduled or modules[-1])
    out = {}
    for name in kernels:
        func = final.get(name)
        if func is None:
            continue
        early = base.get(name)
        if early is not None and _params(early) == _params(func):
            out[name] = count(early, BEFORE_SCHEDULE)
        else:
            out[name] = count(func, SCHEDULED)
    parts = _prim_funcs(fused) if fused is not None else {}
    for member in {m.prim_func for kernel in kernels for m in (members or {}).get(kernel, ())}:
        if member not in out and member in parts:
            out[member] = count(parts[member], BEFORE_SCHEDULE)
    return out


def _unscheduled_module(passes: Sequence):
    """(the module right after the last pass that left fused groups (FuseTIR's), or the
    first with a PrimFunc when nothing was fused; the last module with fused groups,
    whose PrimFuncs are the groups' members, or None)."""
    modules = [r for r in passes if r.functions]
    grouped = [i for i, r in enumerate(modules) if any(ir.is_primitive(f) for f in r.functions.values())]
    if grouped:
        last = modules[grouped[-1]].module
        return (modules[grouped[-1] + 1].module if grouped[-1] + 1 < len(modules) else None), last
    return next(
        (r.module for r in modules if any(isinstance(f, tirx.PrimFunc) for f in r.module.functions.values())), None
    ), None


def _prim_funcs(module) -> dict:
    return {gv.name_hint: f for gv, f in module.functions.items() if isinstance(f, tirx.PrimFunc)}


def _params(func) -> tuple:
    """The tensor parameters of a PrimFunc as ``(shape, dtype)``, dims as ints or as
    the expression text ``model.work`` reads."""
    out = []
    for param in func.params:
        shape = getattr(param, "shape", None)
        if shape is None:
            continue  # a scalar parameter (a symbolic dim passed as a value)
        out.append((tuple(dim_text(d) for d in shape), str(param.dtype)))
    return tuple(out)


def dim_text(expr):
    """A dim as an int, or as the expression text ``model.work`` reads (``"?"`` when it
    reads no such text)."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    try:
        return _text(expr)
    except _Unread:
        return "?"  # bind() leaves a dim it cannot read unbound


def count(func, source: str = BEFORE_SCHEDULE) -> KernelWork:
    """The ``KernelWork`` of one PrimFunc: each store's float operations (and
    transcendental calls) times the trip counts of the loops around it."""
    walk = _Walk()
    try:
        walk.stmt(func.body, ((1, ()),))
    except _Unread as exc:
        return KernelWork(_params(func), None, None, source, (f"not counted: {exc}",))
    dtype = max(walk.dtypes, key=walk.dtypes.__getitem__, default="float32")
    accumulate = max(walk.accumulate, key=walk.accumulate.__getitem__, default=None)
    return KernelWork(
        _params(func),
        normal((c, a) for a, c in walk.flops.items()),
        normal((c, a) for a, c in walk.trans.items()),
        source,
        tuple(dict.fromkeys(walk.notes)),
        dtype,
        accumulate,
    )


class _Unread(Exception):
    """What this count cannot read: an integer expression ``model.work`` could not
    read back, a call into a library whose work the TIR does not show."""


_LIBRARY_CALLS = frozenset(
    {
        "tvm_call_packed",
        "tvm_call_cpacked",
        "call_extern",
        "call_pure_extern",
        "tvm_call_packed_lowered",
        "tvm_call_cpacked_lowered",
        "tvm_call_trace_packed",
    }
)


class _Walk:
    def __init__(self):
        self.flops: dict[tuple, int] = defaultdict(int)
        self.trans: dict[tuple, int] = defaultdict(int)
        self.notes: list[str] = []
        self.dtypes: dict[str, int] = defaultdict(int)  # float dtype -> operations per loop body stored in it
        self.accumulate: dict[str, int] = defaultdict(int)  # float dtype -> reduction stores (a block's with an init)

    def stmt(self, s, trips: Poly) -> None:
        """Count statement ``s``, run ``trips`` times (a polynomial of the sizes)."""
        if isinstance(s, tirx.For):
            self._loop(s, trips)
        elif isinstance(s, tvm.s_tir.SBlockRealize):
            if not (isinstance(s.predicate, tirx.IntImm) and s.predicate.value == 1):
                self.notes.append("a predicated tile counted whole")
            self.stmt(s.block, trips)
        elif isinstance(s, tvm.s_tir.SBlock):
            self._block(s, trips)
        elif isinstance(s, tirx.SeqStmt):
            for child in s.seq:
                self.stmt(child, trips)
        elif isinstance(s, tirx.BufferStore):
            flops, trans = _ops(s.value)
            if flops and _is_float(s.value.ty):
                self.dtypes[str(s.value.ty)] += flops
            self._add(trips, flops, trans)
        elif isinstance(s, tirx.IfThenElse):
            self.notes.append("the larger branch of a condition counted")
            self._larger(s.then_case, s.else_case, trips)
        elif isinstance(s, tirx.Evaluate):
            self._add(trips, *_ops(s.value))
        elif isinstance(s, tirx.While):
            self.notes.append("a while loop is not counted")
        elif getattr(s, "body", None) is not None:  # attributes, lets, allocations, asserts
            self.stmt(s.body, trips)

    def _loop(self, s, trips: Poly) -> None:
        """A loop's body, run its extent times as often (a stepped loop's too, noted)."""
        self.stmt(s.body, _mul(trips, poly(s.extent)))
        if s.step is not None and not (isinstance(s.step, tirx.IntImm) and s.step.value == 1):
            self.notes.append("a loop with a step counted at its extent")

    def _block(self, s, trips: Poly) -> None:
        """A block's init and body; the float stores of a block with an init are
        reductions (``accumulate``)."""
        if s.init is not None:
            self.stmt(s.init, trips)
            for store in _stores(s.body):
                if _is_float(store.value.ty):
                    self.accumulate[str(store.value.ty)] += 1
        self.stmt(s.body, trips)

    def _larger(self, then_case, else_case, trips: Poly) -> None:
        """Each figure of the branch that does more of it (FLOPs and transcendentals
        apart), as both branches' formulas at every dim 1 compare."""
        branches = []
        for case in (then_case, else_case):
            walk = _Walk()
            if case is not None:
                walk.stmt(case, ((1, ()),))
            branches.append(walk)
            self.notes.extend(walk.notes)
            for dtype, n in walk.dtypes.items():
                self.dtypes[dtype] += n
            for dtype, n in walk.accumulate.items():
                self.accumulate[dtype] += n
        for figure in ("flops", "trans"):
            chosen = max(branches, key=lambda w: sum(getattr(w, figure).values()))
            target = getattr(self, figure)
            for atoms, coef in getattr(chosen, figure).items():
                for tcoef, tatoms in trips:
                    target[tuple(sorted(atoms + tatoms))] += coef * tcoef

    def _add(self, trips: Poly, flops: int, trans: int) -> None:
        for coef, atoms in trips:
            if flops:
                self.flops[atoms] += coef * flops
            if trans:
                self.trans[atoms] += coef * trans


def _stores(s) -> list:
    """The buffer stores directly in a block's body (through sequences and lets, not
    into nested blocks): what a block with an init accumulates into."""
    if isinstance(s, tirx.BufferStore):
        return [s]
    if isinstance(s, tirx.SeqStmt):
        return [x for child in s.seq for x in _stores(child)]
    if isinstance(s, (tvm.s_tir.SBlockRealize, tvm.s_tir.SBlock)):
        return []
    body = getattr(s, "body", None)
    return _stores(body) if body is not None else []


def _ops(e) -> tuple[int, int]:
    """(float operations, transcendental calls) of one expression, indices and
    integer arithmetic left out."""
    if isinstance(e, (tvm.ir.expr.TensorLoad, tirx.Var, tirx.IntImm, tirx.FloatImm)):
        return 0, 0
    if isinstance(e, _ARITH):
        f, t = _sum(_ops(e.a), _ops(e.b))
        return f + _is_float(e.ty), t
    if isinstance(e, _COMPARE):
        f, t = _sum(_ops(e.a), _ops(e.b))
        return f + _is_float(e.a.ty), t
    if isinstance(e, (tirx.And, tirx.Or)):
        return _sum(_ops(e.a), _ops(e.b))
    if isinstance(e, (tirx.Not, tirx.Cast)):
        return _ops(e.a if isinstance(e, tirx.Not) else e.value)
    if isinstance(e, tirx.Select):
        return _sum(_ops(e.condition), _larger(_ops(e.true_value), _ops(e.false_value)))
    if isinstance(e, tirx.Let):
        return _sum(_ops(e.value), _ops(e.body))
    if isinstance(e, tvm.ir.expr.Call):
        name = e.op.name.rsplit(".", 1)[-1] if isinstance(e.op, tvm.ir.Op) else ""
        if name in _LIBRARY_CALLS or not isinstance(e.op, tvm.ir.Op):
            called = e.args[0].value if name and e.args and isinstance(e.args[0], tvm.ir.expr.StringImm) else e.op
            raise _Unread(f"it calls {called} ({name or 'a function'}), whose work its TIR does not show")
        if name == "if_then_else":
            return _sum(_ops(e.args[0]), _larger(_ops(e.args[1]), _ops(e.args[2])))
        inner = (0, 0)
        for a in e.args:
            inner = _sum(inner, _ops(a))
        if name in _TRANSCENDENTAL:
            return inner[0], inner[1] + 1
        if name == "fma":
            return inner[0] + 2, inner[1]
        return inner
    return 0, 0


def _sum(a, b):
    return a[0] + b[0], a[1] + b[1]


def _larger(a, b):
    """Each figure of the branch that does more of it."""
    return max(a[0], b[0]), max(a[1], b[1])


def _is_float(dtype) -> int:
    return int(str(dtype).startswith(("float", "bfloat")))


def poly(e) -> Poly:
    """An integer PrimExpr (an extent, a size) as a polynomial: + - * of ints and dims
    kept apart, anything else one atom (its text, ``model.work``'s reader's form)."""
    if isinstance(e, tirx.IntImm):
        return ((int(e.value), ()),)
    if isinstance(e, tirx.Var):
        return ((1, (_name(e),)),)
    if isinstance(e, tirx.Add):
        return normal(poly(e.a) + poly(e.b))
    if isinstance(e, tirx.Sub):
        return normal(poly(e.a) + tuple((-c, a) for c, a in poly(e.b)))
    if isinstance(e, tirx.Mul):
        return _mul(poly(e.a), poly(e.b))
    if isinstance(e, tirx.Cast):
        return poly(e.value)
    return ((1, (_text(e),)),)


def _mul(a: Poly, b: Poly) -> Poly:
    return normal(tuple((ca * cb, tuple(sorted(xa + xb))) for ca, xa in a for cb, xb in b))


def _name(var) -> str:
    if not var.name.isidentifier():
        raise _Unread(f"a dim named {var.name!r} is not read")
    return var.name


_TEXT = {
    tirx.Add: "+",
    tirx.Sub: "-",
    tirx.Mul: "*",
    tirx.FloorDiv: "//",
    tirx.FloorMod: "%",
    tirx.Div: "//",
    tirx.Mod: "%",
}


def _text(e) -> str:
    """An integer expression as the text ``model.work`` reads (dims, ints, + - * // %,
    min, max); anything else raises ``_Unread``."""
    if isinstance(e, tirx.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.Var):
        return _name(e)
    if isinstance(e, tirx.Cast):
        return _text(e.value)
    op = _TEXT.get(type(e))
    if op is not None:
        return f"({_text(e.a)} {op} {_text(e.b)})"
    if isinstance(e, (tirx.Min, tirx.Max)):
        return f"{'min' if isinstance(e, tirx.Min) else 'max'}({_text(e.a)}, {_text(e.b)})"
    raise _Unread(f"an extent of {type(e).__name__} is not read")
