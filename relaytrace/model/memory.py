"""What the compiled program holds in memory, as its memory plan says: pure records, no TVM.

After ``StaticPlanBlockMemory`` a Relax VM program allocates its activations as
*blocks* (``alloc_storage``: one size, reused by several tensors in turn) and places
each tensor in one (``alloc_tensor``); ``KillAfterLastUse`` frees each value after its
last use. ``tracking.memory`` reads that program for each entry into a ``MemoryPlan``:
the kernel calls in run order (its *steps*), each block with its size as a formula over
the symbolic dims and the steps it is live at, each tensor placed in it with the call
site that writes it and its last use, and the weights (constants, and the parameters
after an entry's ``num_input``) with the call sites that read them. The sizes are
bound to concrete dims (``analysis.memory``) when a report is made, since a build with a
symbolic sequence length runs at many.
"""

from __future__ import annotations

from attrs import define, field

from .work import Poly

Shape = tuple  # ints, and symbolic dims by name or expression text (``model.work``'s reader)


@define(frozen=True)
class Held:
    """A tensor placed in a block: its ``shape`` and ``dtype``, the call site that
    writes it (``site``: a ``SiteKey`` label; "" when no kernel does, e.g. one only a
    VM builtin fills), and the steps ``first`` (written) to ``last`` (last read, or the
    last step for a value the entry returns); ``last < first`` when no kernel call
    falls between its allocation and its end; ``argument``: which tensor argument of its
    writer it is (-1: none), where a run's address of it is read."""

    shape: Shape
    dtype: str
    site: str
    first: int
    last: int
    argument: int = -1


@define(frozen=True)
class Block:
    """One storage the VM allocates: ``name`` (its var in the IR), ``bytes`` (its size, a
    formula over the symbolic dims), live at steps ``start`` to ``end`` (both included:
    from the first kernel call after its allocation to the last call before every value
    in it is freed; ``end < start`` when no kernel call falls in between), ``returned``
    when the entry returns a value in it (it outlives the run), and the ``tensors`` placed
    in it in program order."""

    name: str
    bytes: Poly
    start: int
    end: int
    tensors: tuple[Held, ...] = ()
    returned: bool = False


@define(frozen=True)
class Weight:
    """A weight the entry reads: a constant of the module (``name`` ``const#I``) or a
    parameter after its ``num_input`` (by its name), of ``shape`` and ``dtype``, and the
    call sites that read it (``sites``: labels, in run order)."""

    name: str
    shape: Shape
    dtype: str
    sites: tuple[str, ...] = ()


@define(frozen=True)
class MemoryPlan:
    """One entry's memory as compiled: ``steps`` (the label of each kernel call site, in
    run order), ``blocks``, ``weights``, ``inputs`` (each input parameter's ``(name,
    shape, dtype)``: the caller's memory), ``unplanned`` (values made at run time outside
    the plan, e.g. by a VM builtin: ``(what, shape, dtype)``), and ``tvm`` (what
    ``relax.analysis.estimate_memory_usage`` says of the same program: ``(allocations,
    GB)`` as it prints them, None where it gives no figure, e.g. at symbolic sizes)."""

    entry: str
    steps: tuple[str, ...]
    blocks: tuple[Block, ...] = ()
    weights: tuple[Weight, ...] = ()
    inputs: tuple[tuple[str, Shape, str], ...] = ()
    unplanned: tuple[tuple[str, Shape, str], ...] = ()
    tvm: tuple[int, float] | None = None
    notes: tuple[str, ...] = field(factory=tuple)
