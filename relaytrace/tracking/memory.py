"""Each entry's memory plan, read from the program ``KillAfterLastUse`` left (needs TVM).

That program is the last one in which every allocation is still an op with its size
(``R.memory.alloc_storage(R.shape([256 * seq_len]), ...)``, sizes in bytes over the
symbolic dims) and every end of a value's life is a ``kill_tensor``/``kill_storage``;
after it ``VMShapeLower`` moves symbolic sizes into the shape heap. A value lives in a
block from its allocation to its last use: the block is freed when every value in it
(its tensors, and the views of them a reshape or a tuple makes) has been used or
killed for the last time, or never, when the entry returns one. Kernel calls are
numbered per kernel in run order, Relax subfunction calls followed into, as the
lineage numbers its call sites (``CallSite.call``), so each step is a site's label.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

import tvm
import tvm_ffi
from tvm import relax, tirx

from ..model.memory import Block, Held, MemoryPlan, Weight
from ..model.sitekey import Calls
from . import ir
from .work import dim_text, poly

PLANNED_BY = "KillAfterLastUse"  # the pass whose program is read
_VIEWS = frozenset({"relax.reshape", "relax.memory.view", "relax.memory.ensure_zero_offset"})
_KILLS = frozenset({"relax.memory.kill_tensor", "relax.memory.kill_storage", "relax.vm.kill_object"})
_END = 1 << 62  # the position of the entry's return


def memory_plans(passes: Sequence, entries: Sequence[str]) -> dict[str, MemoryPlan]:
    """Entry name -> its ``MemoryPlan``, read from the module the last ``PLANNED_BY`` pass
    of the recorded ``passes`` left; empty when the build ran no such pass (a pipeline
    without the VM's memory passes). Raises what reading the IR raises (``follow``
    says it in the lineage's ``degraded`` and goes on)."""
    record = planned_by(passes)
    if record is None:
        return {}
    module = record.module
    plans = {}
    for entry in entries:
        func = ir.lookup(module, entry)
        if isinstance(func, relax.Function):
            walk = _Walk(module)
            walk.entry(func)
            plans[entry] = walk.plan(entry, _tvm_estimate(func))
    return plans


def planned_by(passes: Sequence):
    """The record of the last ``PLANNED_BY`` pass of ``passes`` (the plans are read from its
    module), or None when the build ran none."""
    return next((r for r in reversed(passes) if r.pass_name == PLANNED_BY), None)


class _Block:
    __slots__ = ("name", "size", "alloc", "last", "tensors", "returned")

    def __init__(self, name: str, size, alloc: int):
        self.name, self.size, self.alloc, self.last = name, size, alloc, alloc
        self.tensors: list[_Tensor] = []
        self.returned = False


class _Tensor:
    __slots__ = ("shape", "dtype", "alloc", "site", "argument", "uses")

    def __init__(self, shape, dtype: str, alloc: int):
        self.shape, self.dtype, self.alloc = shape, dtype, alloc
        self.site, self.argument = "", -1
        self.uses: list[int] = []  # positions of the kernel calls that take it (or a view of it)


class _Walk:
    """One walk of an entry in program order (subfunctions followed into): each binding a
    position, each kernel call a step; what each var refers to (blocks, tensors)."""

    def __init__(self, module):
        self.module = module
        self.pos = 0
        self.steps: list[tuple[int, str]] = []  # (position, site label)
        self.calls = Calls()  # numbered per entry: made anew in ``entry``
        self.blocks: list[_Block] = []
        self.refs: dict[int, tuple[tuple[_Block, ...], tuple[_Tensor, ...]]] = {}  # var handle -> what it holds
        self.keep: list = []  # the vars whose handles key ``refs``
        self.weights: dict[int, list] = {}  # handle -> [name, shape, dtype, sites]
        self.weight_fields: dict[int, list[int]] = {}  # handle of a tuple of weights -> its fields' keys
        self.field_keys: list[int] = []  # the keys of tuple fields in ``weights``, each its own
        self.constants = 0
        self.inputs: list[tuple[str, tuple, str]] = []
        self.unplanned: list[tuple[str, tuple, str]] = []
        self.entry_name = ""
        self.names: dict[str, int] = {}
        self.notes: list[str] = []

    def entry(self, func) -> None:
        self.entry_name = func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else ""
        self.calls = Calls(self.entry_name)
        bounds = func.attrs.get("tir_var_upper_bound") if func.attrs is not None else None
        if bounds:
            listed = ", ".join(f"{k}<={int(v)}" for k, v in sorted((str(k), v) for k, v in bounds.items()))
            self.notes.append(
                f"TVM planned the blocks at the upper bound of each dim it knows one of ({listed}): "
                "the blocks it sized so keep those sizes whatever the run's"
            )
        inputs = int(func.attrs["num_input"]) if func.attrs is not None and "num_input" in func.attrs else None
        for i, param in enumerate(ir.items(func.params)):
            if inputs is None or i < inputs:
                self.inputs += [(param.name, shape, dtype) for shape, dtype in _tensors(param)]
            else:
                self._keep(param)
                self._weight(param.__chandle__(), param.name, ir.expr_type(param))
        returned = self.body(func)
        for block in returned[0]:
            block.last, block.returned = _END, True
        for tensor in returned[1]:
            tensor.uses.append(_END)

    def _weight(self, handle: int, name: str, ty) -> None:
        """A weight parameter of type ``ty``, a tuple's fields each a weight of its own
        (``packed_params[3]``: MLC-LLM packs every weight into one tuple parameter)."""
        if isinstance(ty, relax.TupleType):
            fields = self.weight_fields[handle] = []
            for index, field in enumerate(ty.fields):
                fields.append(-len(self.field_keys) - 1)  # a key no var handle takes
                self.field_keys.append(fields[-1])
                self._weight(fields[-1], f"{name}[{index}]", field)
            return
        for shape, dtype in _tensors_of_type(ty):
            self.weights[handle] = [name, shape, dtype, []]

    def body(self, func):
        """Walk a function's bindings; what its result refers to."""
        for binding in ir.bindings(func):
            self.pos += 1
            self.binding(binding.var, binding.value)
        return self.touch(ir.function_output(func), self.pos)

    def binding(self, var, value) -> None:
        what = ir.kind(value)
        if what != "call":
            if what == "item" and value.tuple_value.__chandle__() in self.weight_fields:  # a field of a weight
                self._keep(var)
                field = self.weight_fields[value.tuple_value.__chandle__()][value.index]
                for table in (self.weights, self.weight_fields):
                    if field in table:
                        table[var.__chandle__()] = table[field]
            self._hold(var, self.touch(value, self.pos))
            return
        category, name = ir.callee_category(value.op)
        args = ir.items(value.args)
        if name == "relax.memory.alloc_storage":
            block = _Block(self._name(var.name), poly(ir.items(args[0].values)[0]), self.pos)
            self.blocks.append(block)
            self._hold(var, ((block,), ()))
        elif name == "relax.memory.alloc_tensor":
            blocks, _ = self.touch(args[0], self.pos)
            shape = tuple(dim_text(d) for d in ir.items(args[2].values))
            tensor = _Tensor(shape, str(args[3].value), self.pos)
            for block in blocks:
                block.tensors.append(tensor)
            self._hold(var, (blocks, (tensor,)))
        elif name in _KILLS:
            self.touch(args[0], self.pos)
        elif category == "global" and isinstance(ir.lookup(self.module, value.op), tirx.PrimFunc):
            self.kernel(name, args)
        elif category == "global" and isinstance(ir.lookup(self.module, value.op), relax.Function):
            self.subfunction(var, ir.lookup(self.module, value.op), args)
        else:
            held = self.touch(value.args, self.pos)
            if name not in _VIEWS and not held[0]:
                self.unplanned += [(name, shape, dtype) for shape, dtype in _tensors(var)]
            self._hold(var, held)

    def kernel(self, name: str, args) -> None:
        label = self.calls.key(name).label
        self.steps.append((self.pos, label))
        tensor_args = 0
        for arg in args:
            kind = ir.kind(arg)
            if kind == "const":
                self._keep(arg)
                found = self.weights.get(arg.__chandle__())
                if found is None:
                    shape, dtype = _tensors(arg)[0]
                    found = self.weights[arg.__chandle__()] = [f"const#{self.constants}", shape, dtype, []]
                    self.constants += 1
                found[3].append(label)
            elif kind == "var" and arg.__chandle__() in self.weights:
                self.weights[arg.__chandle__()][3].append(label)
            _, tensors = self.touch(arg, self.pos)
            for tensor in tensors:
                if not tensor.site:
                    tensor.site, tensor.argument = label, tensor_args  # its first kernel after its allocation writes it
                tensor.uses.append(self.pos)
            tensor_args += isinstance(ir.expr_type(arg), relax.TensorType)

    def subfunction(self, var, func, args) -> None:
        for param, arg in zip(ir.items(func.params), args):
            self._hold(param, self.touch(arg, self.pos))
        self._hold(var, self.body(func))

    def touch(self, expr, pos: int):
        """What ``expr`` refers to (blocks, tensors), each block marked used at ``pos``."""
        blocks: dict[int, _Block] = {}
        tensors: dict[int, _Tensor] = {}
        for atom in _atoms(expr):
            found = self.refs.get(atom.__chandle__())
            if found is not None:
                blocks.update((id(b), b) for b in found[0])
                tensors.update((id(t), t) for t in found[1])
        for block in blocks.values():
            block.last = max(block.last, pos)
        return tuple(blocks.values()), tuple(tensors.values())

    def _hold(self, var, held) -> None:
        if held[0] or held[1]:
            self._keep(var)
            self.refs[var.__chandle__()] = held

    def _name(self, name: str) -> str:
        """A block's name, unique in the entry as TVM prints them (``storage``, ``storage_1``)."""
        count = self.names.get(name, 0)
        self.names[name] = count + 1
        return name if not count else f"{name}_{count}"

    def _keep(self, obj) -> None:
        self.keep.append(obj)

    def plan(self, entry: str, tvm_figure) -> MemoryPlan:
        positions = [p for p, _ in self.steps]
        blocks = tuple(
            Block(
                b.name,
                b.size,
                _first_after(positions, b.alloc),
                _last_before(positions, b.last),
                tuple(
                    Held(
                        t.shape,
                        t.dtype,
                        t.site,
                        _first_after(positions, t.alloc),
                        _last_before(positions, max(t.uses, default=t.alloc)),
                        t.argument,
                    )
                    for t in b.tensors
                ),
                b.returned,
            )
            for b in self.blocks
        )
        distinct = {id(w): w for w in self.weights.values()}.values()  # a field is keyed by the vars taking it too
        weights = tuple(Weight(name, shape, dtype, tuple(sites)) for name, shape, dtype, sites in distinct)
        return MemoryPlan(
            entry,
            tuple(label for _, label in self.steps),
            blocks,
            weights,
            tuple(self.inputs),
            tuple(self.unplanned),
            tvm_figure,
            tuple(self.notes),
        )


def _atoms(expr) -> list:
    """The vars an expression (a var, a tuple, a projection, a list of args) refers to."""
    if expr is None:
        return []
    if isinstance(expr, (list, tuple)):
        return [a for e in expr for a in _atoms(e)]
    if isinstance(expr, tvm_ffi.Array):
        return _atoms(ir.items(expr))
    kind = ir.kind(expr)
    if kind == "var":
        return [expr]
    if kind == "tuple":
        return _atoms(ir.items(expr.fields))
    if kind == "item":
        return _atoms(expr.tuple_value)
    return []


def _tensors(expr) -> list[tuple[tuple, str]]:
    """(shape, dtype) of each tensor an expression's type holds, dims as ``dim_text``."""
    return _tensors_of_type(ir.expr_type(expr))


def _tensors_of_type(ty) -> list[tuple[tuple, str]]:
    """(shape, dtype) of each tensor of a type, a tuple's fields in order."""
    if isinstance(ty, relax.TensorType) and ty.shape is not None and hasattr(ty.shape, "values"):
        return [(tuple(dim_text(d) for d in ir.items(ty.shape.values)), str(ty.dtype))]
    if isinstance(ty, relax.TupleType):
        return [t for field in ty.fields for t in _tensors_of_type(field)]
    return []


def _first_after(positions: list[int], pos: int) -> int:
    """The index of the first step after position ``pos`` (len(steps) when none)."""
    return bisect_right(positions, pos)


def _last_before(positions: list[int], pos: int) -> int:
    """The index of the last step at or before position ``pos`` (-1 when none)."""
    return bisect_right(positions, pos) - 1


_ESTIMATE = re.compile(
    r"With memory planning, there are (\d+) constant-size memory allocation\(s\) "
    r"with total size ([0-9.e+-]+) GB"
)


def _tvm_estimate(func) -> tuple[int, float] | None:
    """``(allocations, GB)`` as ``relax.analysis.estimate_memory_usage`` prints them for
    one planned function, or None where it gives no figure (it raises on a symbolic
    size)."""
    try:
        text = tvm.relax.analysis.estimate_memory_usage(func)
    except Exception:  # TypeError on a symbolic size: TVM gives no figure then
        return None
    match = _ESTIMATE.search(text)
    return (int(match.group(1)), float(match.group(2))) if match else None
