"""What a kernel computes, as counted from its TIR, and the same at the shapes it ran with.

A kernel's work is saved with the lineage as formulas over the symbolic dims of its
parameters (``KernelWork``), because a build with a symbolic sequence length runs at
many: the profile's argument shapes bind them (``work_at``). A formula is a
polynomial, a tuple of ``(coefficient, atoms)`` terms whose atoms are dim names or
small expressions of them (``(n + 1) // 2``, ``min(n, 8)``) read by the one reader
of dims (``shapes.evaluate_dim``), which evaluates those and nothing else. Pure data
and functions: no TVM.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import define

from .shapes import evaluate_dim

Term = tuple[int, tuple[str, ...]]  # coefficient, atoms multiplied
Poly = tuple[Term, ...]


def normal(terms) -> Poly:
    """Terms (``(coefficient, atoms)``, atoms sorted) summed into a polynomial's one form:
    like terms added, zero terms dropped, ordered by degree then atoms. Two equal
    polynomials have equal forms: the form the counter writes, the memory plan sums
    and a saved file is checked in."""
    sums: dict[tuple[str, ...], int] = {}
    for coef, atoms in terms:
        sums[atoms] = sums.get(atoms, 0) + coef
    return tuple(sorted(((c, a) for a, c in sums.items() if c), key=lambda t: (len(t[1]), t[1])))


_ITEMSIZE = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
}


BEFORE_SCHEDULE, SCHEDULED = "before scheduling", "as scheduled"
FROM_OPS = "from its ops"  # a library call's work: its ops' at their shapes (its code is not TVM's)
_MATMULS = ("relax.matmul", "relax.linear")
_ELEMENTWISE = frozenset(
    {  # one float operation per output element
        "relax.add",
        "relax.subtract",
        "relax.multiply",
        "relax.divide",
        "relax.maximum",
        "relax.minimum",
        "relax.nn.relu",
        "relax.negative",
        "relax.abs",
    }
)
LIMIT = 1e30  # a count beyond this (or a negative one) read from a file is not a count


@define(frozen=True)
class KernelWork:
    """One kernel's work as its TIR says, per call: ``flops`` (float arithmetic: add,
    multiply, divide, min/max, float compares, each 1), ``transcendentals`` (exp, log,
    sqrt, tanh, erf... calls, each 1, apart as XLA counts them), over its tensor
    ``params`` (each ``(shape, dtype)``, a dim an int or a symbolic dim's name or
    expression). ``source`` says which TIR was counted (``BEFORE_SCHEDULE``: the kernel
    as fusion left it, before any schedule; ``SCHEDULED``: as built, its tiles counted
    whole); ``notes`` what the count leaves out (a loop of unknown trip count) or why
    there is none (a call into a library); ``dtype``: the dtype most of its arithmetic
    is done in (a float16 conv accumulating in float32 computes in float32), whose peak
    bounds it; ``accumulate``: the dtype its reductions accumulate in (the stores of a
    block with an init: a conv's, a matmul's, a mean's sum), None when it reduces
    nothing or was counted before this was read."""

    params: tuple[tuple[tuple, str], ...]
    flops: Poly | None  # None: not counted (``notes`` say why)
    transcendentals: Poly | None = ()
    source: str = BEFORE_SCHEDULE
    notes: tuple[str, ...] = ()
    dtype: str = "float32"
    accumulate: str | None = None


@define(frozen=True)
class Work:
    """One call's work at the shapes it ran with: ``flops``, ``transcendentals``,
    ``bytes`` (every tensor argument read or written once: its size), or ``None`` for a
    figure that could not be counted (``why`` says)."""

    flops: float | None
    transcendentals: float | None
    bytes: float | None
    why: str = ""


_CONVS = frozenset({"relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d"})
_CONV_TRANSPOSES = frozenset({"relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose", "relax.nn.conv3d_transpose"})
DILATION = (
    "zeros from dilation: TVM dilates a transposed conv's input with zeros and runs a dense conv over it, "
    "multiplying the zeros"
)
PADDING = "padding: its TIR computes over padded or out-of-range elements the op does not ask for"
RECOMPUTED = "recomputation: its TIR computes more than the op asks (a value computed again, or padding)"
DEQUANTIZED = "dequantization: unpacking quantized weights, work the float model does not ask"


def useful_flops(op) -> Poly | None:
    """The FLOPs the model asks of one op (an ``Origin``) at the shapes the input gave it
    (a symbolic dim by its name), as ``torch.utils.flop_counter`` counts them, whatever
    TVM's kernels execute: a conv ``2 ×`` its output's elements ``× Cin/groups × K…``
    (its weight ``O, I/g, K…``), a transposed conv ``2·N·Hin·Win… × Cin·Cout/g·K…``
    (its weight ``I, O/g, K…``: the input's elements, not the zeros a stride puts
    between them), a matmul ``2·M·N·K``, an element-wise op (``_ELEMENTWISE``) one per
    output element, data movement none. None for an op of any other kind (no formula
    here) or without shapes. A dequantize asks none: unpacking quantized weights is
    work the float model does not ask (its executed FLOPs are shown as such,
    ``DEQUANTIZED``), so a quantized Linear asks ``2·M·N·K``, as the float one does."""
    from .ops import is_data_movement, is_dequantize

    ins = op.input_shapes
    out = op.output_shapes[0] if op.output_shapes else None
    if is_data_movement(op.op) or is_dequantize(op.op):
        return ()
    if out is None:
        return None
    if op.op in _MATMULS and ins and ins[0]:
        return (_product((2, *out, ins[0][-1])),)
    if op.op in _CONVS and len(ins) > 1 and ins[1]:
        return (_product((2, *out, *ins[1][1:])),)
    if op.op in _CONV_TRANSPOSES and len(ins) > 1 and len(ins[0]) > 2:
        return (_product((2, ins[0][0], *ins[0][2:], *ins[1])),)
    if op.op in _ELEMENTWISE:
        return (_product((1, *out)),)
    return None


def excess_why(op) -> str:
    """Why an op's kernel may execute more FLOPs than it asks (``useful_flops``):
    ``DILATION`` for a transposed conv, ``PADDING`` for a conv, ``DEQUANTIZED`` for a
    dequantize, ``RECOMPUTED`` else."""
    from .ops import is_dequantize

    if is_dequantize(op.op):
        return DEQUANTIZED
    return DILATION if op.op in _CONV_TRANSPOSES else PADDING if op.op in _CONVS else RECOMPUTED


def library_work(ops, params) -> KernelWork:
    """A library call's work, per call, from the model ops it runs (each an ``Origin``
    at the shapes the input gave it; a symbolic dim by its name): each op's
    ``useful_flops`` (a library runs what the op asks). An op of a kind with no formula
    there leaves the call's FLOPs not counted, and its ``notes`` name the op.
    ``params``: the call's ``(shape, dtype)`` arguments, as ``KernelWork.params``."""
    terms: list[Term] = []
    unknown = []
    for op in ops:
        flops = useful_flops(op)
        if flops is None:
            unknown.append(op.op)
        else:
            terms.extend(flops)
    dtype = next((o.output_dtypes[0] for o in ops if o.output_dtypes), "float32")
    if unknown:
        return KernelWork(
            params,
            None,
            None,
            FROM_OPS,
            (
                f"a library call: its FLOPs are counted from its ops, and relaytrace has no count for "
                f"{', '.join(sorted(set(unknown)))}",
            ),
            dtype,
        )
    return KernelWork(
        params,
        normal(terms),
        (),
        FROM_OPS,
        (
            "a library call: counted from its ops at their shapes "
            "(2·M·N·K a matmul, 2·out·Cin·K² a conv, one per "
            "element an element-wise op)",
        ),
        dtype,
    )


def _product(factors) -> Term:
    """One term: the int factors multiplied, the symbolic ones as atoms (sorted)."""
    coef, atoms = 1, []
    for f in factors:
        if type(f) is int:
            coef *= f
        else:
            atoms.append(str(f))
    return coef, tuple(sorted(atoms))


def itemsize(dtype: str) -> int | None:
    """Bytes per element of a TVM dtype (``float16`` 2; vector dtypes by their lanes),
    None for one unknown."""
    base, _, lanes = dtype.partition("x")
    size = _ITEMSIZE.get(base)
    return None if size is None else size * (int(lanes) if lanes.isdigit() else 1)


def tensor_bytes(shapes, dtypes) -> float | None:
    """The bytes of tensors of these concrete shapes and dtypes, None if a dtype is
    unknown, a dim is not a size, the two lists differ in length or the total is beyond
    ``LIMIT`` (a file's shapes are checked here, not trusted)."""
    if len(shapes) != len(dtypes):
        return None
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        size = itemsize(dtype) if isinstance(dtype, str) else None
        if size is None or not _sizes(shape):
            return None
        for d in shape:
            size *= d
        total += size
    return float(total) if total <= LIMIT else None


def concrete(dims, env: Mapping[str, int]) -> tuple[int, ...] | None:
    """A shape of ints, dim names and expressions of them (``n + 1``) with ``env``'s
    values, None when one is not bound or not read (``shapes.evaluate_dim``)."""
    out = []
    for d in dims:
        value = d if type(d) is int else evaluate_dim(str(d), env)
        if value is None:
            return None
        out.append(value)
    return tuple(out)


def _sizes(shape) -> bool:
    return isinstance(shape, tuple) and all(type(d) is int and d >= 0 for d in shape)


def bind(work: KernelWork, shapes) -> dict[str, int] | None:
    """The value of each symbolic dim named in ``work``'s params, read from the concrete
    ``shapes`` of the call's tensor arguments (in order); None when the arguments do
    not match the params (another count, another rank, a static dim of another size)."""
    if len(shapes) != len(work.params):
        return None
    env: dict[str, int] = {}
    for (dims, _), shape in zip(work.params, shapes):
        if not _sizes(shape) or len(dims) != len(shape):
            return None
        for dim, size in zip(dims, shape):
            if isinstance(dim, int):
                if dim != size:
                    return None
            elif _is_name(dim):
                if env.setdefault(dim, size) != size:
                    return None
    return env


def work_at(work: KernelWork | None, shapes, dtypes) -> Work:
    """``work`` at one call's concrete argument ``shapes`` and ``dtypes``: FLOPs from its
    formulas bound to those shapes, bytes from the arguments themselves. Without a
    ``work`` (a lineage saved before work was counted, a builtin) only the bytes; with
    a shape that is not all sizes (an estimate's argument the inputs do not size)
    nothing, and why."""
    moved = tensor_bytes(shapes, dtypes) if shapes else None
    if not shapes and work is not None and not work.params and work.flops is not None:
        moved = 0.0  # a kernel of scalars alone (compute_symbolic_expr): no tensor to size or move
    elif not shapes:
        return Work(None, None, None, "no argument shapes were recorded for it")
    unsized = next((shape for shape in shapes if any(type(d) is not int for d in shape)), None)
    if unsized is not None:
        return Work(
            None,
            None,
            None,
            f"an argument of shape {list(unsized)} is sized only at run time (not by "
            "the inputs' sizes): left out of the bound",
        )
    if work is None:
        return Work(None, None, moved, "the build did not count this kernel's work")
    if work.flops is None or work.transcendentals is None:
        return Work(None, None, moved, "; ".join(work.notes) or "not counted")
    env = bind(work, shapes)
    if env is None:
        return Work(None, None, moved, "its arguments do not match the kernel's parameters")
    try:
        flops, trans = evaluate(work.flops, env), evaluate(work.transcendentals, env)
    except NotEvaluable as exc:
        return Work(None, None, moved, f"its formula does not evaluate at these shapes ({exc.args[0]})")
    if not (0 <= flops <= LIMIT and 0 <= trans <= LIMIT):
        return Work(None, None, moved, "its formula gives no count at these shapes (negative or beyond 1e30)")
    return Work(flops, trans, moved)


class NotEvaluable(Exception):
    """A formula or size that has no value at the dims given: a dim missing, an atom no
    expression ``shapes.evaluate_dim`` reads, or a value beyond range. Its own class, so
    that "cannot be evaluated" is never a ``KeyError`` a bug raised."""


def evaluate(poly: Poly, env: Mapping[str, int]) -> float:
    """A formula's value with each dim name as ``env`` gives it (``NotEvaluable`` names a
    dim missing, or an atom that is no expression ``shapes.evaluate_dim`` reads, or a
    value beyond a float)."""
    total = 0
    for coef, atoms in poly:
        if abs(coef) > LIMIT:
            raise NotEvaluable("a coefficient beyond 1e30")
        value = coef
        for atom in atoms:
            if _is_name(atom):
                if atom not in env:
                    raise NotEvaluable(atom)
                value *= env[atom]
                continue
            found = evaluate_dim(atom, env)
            if found is None:
                raise NotEvaluable(atom)
            value *= found
        total += value
    try:
        return float(total)
    except OverflowError:
        raise NotEvaluable("a value beyond a float") from None


def _is_name(atom: str) -> bool:
    return atom.isidentifier()


def cache_work(cache, kernel: str, tokens: int, context: int, itemsize: int = 4, sequences: int = 1) -> Work:
    """One call of a KV-cache kernel (``model.entry.kernel_role``) in a step of
    ``tokens`` new tokens after ``context`` cached ones in each of ``sequences``
    sequences (a batch's call serves them all). Attention over
    ``pairs`` (query, key) pairs: ``4 · q_heads · head_dim · pairs`` FLOPs (QKᵀ and PV,
    a multiply and an add each), ``q_heads · pairs`` exps; the ragged prefill's pairs are
    causal among the new tokens (n(n+1)/2), the paged prefill's each new token with each
    cached one (n·c), the decode's its token with the context and itself (c+1). RoPE
    (TVM's ``llama_rope_with_position_map``, applied: the cache's ``rope_mode`` normal)
    rotates each new token's query and key heads: per element its frequency (2
    divides, a power), its cosine and sine, ``x·cos + rot(x)·sin`` with half of
    ``rot(x)`` negated: 6 FLOPs and 3 transcendental calls; its values are copied. The
    merge of a prefill's two attention states, per new token and query head: 9 FLOPs
    and 3 transcendental calls (a max, two exp2, a log2, the scales) and 3 per element
    of the head (two multiplies, an add). Bytes: each tensor the kernel takes, read or
    written once (as ``work_at`` counts a kernel's): the queries, the keys and values
    attended and the output for an attention; the new keys and values, read and
    written into the pages, for the append; the fused QKV, its positions (int32) and
    the Q, K and V it writes for RoPE; both states (values and their float32
    log-sum-exps) for the merge. A batch's figures are its sequences' added up."""
    from .entry import APPEND, MERGE, PAGED_DECODE, PAGED_PREFILL, RAGGED_PREFILL, ROPE, kernel_role

    role = kernel_role(cache, kernel)
    h, hkv, d = cache.q_heads, cache.kv_heads, cache.head_dim
    if role is None or not (h and hkv and d):
        return Work(None, None, None, "a KV-cache kernel relaytrace has no formula for")
    if role == APPEND:
        return Work(0, 0, sequences * 2 * 2 * tokens * hkv * d * itemsize)
    if role == ROPE:
        rotated = sequences * tokens * (h + hkv) * d
        return Work(6 * rotated, 3 * rotated, sequences * tokens * (2 * (h + 2 * hkv) * d * itemsize + 4))
    if role == MERGE:
        heads = sequences * tokens * h
        return Work(heads * (3 * d + 9), 3 * heads, 2 * heads * (d * itemsize + 4))
    pairs, keys = {
        RAGGED_PREFILL: (tokens * (tokens + 1) // 2, tokens),
        PAGED_PREFILL: (tokens * context, context),
        PAGED_DECODE: (context + 1, context + 1),
    }[role]
    return Work(
        sequences * 4 * h * d * pairs,
        sequences * h * pairs,
        sequences * (2 * tokens * h * d + 2 * keys * hkv * d) * itemsize,
    )
