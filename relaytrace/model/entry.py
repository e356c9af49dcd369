"""An entry function as the VM runs it: each parameter with its kind, and the KV cache
a served LLM's entries share.

Why: an LLM's ``prefill`` takes ``(input_embed, paged_kv_cache, packed_params)`` — a
tensor, an object made by another entry, and a tuple of every weight. Recording only
tensors (and a tuple's first field) made inputs impossible to check and the KV cache
invisible; these records say what each entry takes, as compiled."""

from __future__ import annotations

from typing import NamedTuple

from attrs import define

from ..errors import UsageError
from .names import Name


class ParamKind(Name):
    """What an entry parameter holds."""

    TENSOR = "tensor"
    TUPLE = "tuple"  # of tensors (``param_mode: packed``): each a ``fields`` entry
    OBJECT = "object"  # a runtime object another entry makes (a KV cache)
    SHAPE = "shape"  # a shape tuple (``create_paged_kv_cache``'s sizes)
    PRIM = "prim"  # a scalar


class Tensor(NamedTuple):
    """A tensor an entry takes: its name (``NAME[i]`` for a tuple's i-th), shape (a
    symbolic dim as its name) and dtype."""

    name: str
    shape: tuple
    dtype: str


@define(frozen=True)
class Param:
    """One parameter of a compiled entry: its ``name``, ``kind``, and the tensors it
    passes (``tensors``: itself for a tensor, a tuple's fields in order, nested tuples
    flattened; none for an object, shape or scalar); ``dtype`` of a scalar; ``weight``:
    it is among the model's weights (after the function's ``num_input``, as
    ``tvm.relax.frontend.nn`` exports them), not a step's input."""

    name: str
    kind: ParamKind
    tensors: tuple[Tensor, ...] = ()
    dtype: str = ""
    weight: bool = False


@define(frozen=True)
class KVCache:
    """The KV cache a build's entries share: the ``entry`` that makes it
    (``create_paged_kv_cache``), the ``builtin`` it calls, and the ``kernels`` (PrimFunc
    names) handed to that builtin, flattened in argument order — the order the runtime's
    create call sees them in, which is how a profile names the ones it times."""

    entry: str
    builtin: str
    kernels: tuple[str, ...]
    q_heads: int = 0  # the attention's query heads, key/value heads and head size, as the
    kv_heads: int = 0  # create call was given them (0: not read)
    head_dim: int = 0


def runs_attention(builtin: str) -> bool:
    """Whether a VM builtin runs attention in a KV cache, calling the cache's kernels
    (``attention_with_fused_qkv`` and its kin: ``vm.builtin.attention_kv_cache_*``)."""
    return builtin.startswith("vm.builtin.attention_kv_cache_")


def cache_param(params: tuple[Param, ...]) -> Param | None:
    """The entry's object parameter (its KV cache), None for an entry without one."""
    return next((p for p in params if p.kind == ParamKind.OBJECT), None)


# The jobs of the kernels TVM's paged KV cache is created with, by their place among its
# kernel arguments (``vm.builtin.paged_attention_kv_cache_create`` in TVM 0.27, an
# attention of kind ``mha``, for llvm and GPU targets alike: transpose-append, its MLA
# form, ragged prefill, paged prefill, paged decode, their sliding-window forms, two of
# tree attention, the merge of attention states, RoPE, page copies, ...).
APPEND, RAGGED_PREFILL, PAGED_PREFILL, PAGED_DECODE = "append", "ragged prefill", "paged prefill", "paged decode"
MERGE, ROPE = "merge", "rope"
_ROLES = {0: APPEND, 2: RAGGED_PREFILL, 3: PAGED_PREFILL, 4: PAGED_DECODE, 9: MERGE, 10: ROPE}


def kernel_role(cache: KVCache, kernel: str) -> str | None:
    """The job of ``kernel`` in ``cache`` (``APPEND``, ``RAGGED_PREFILL``, ...), None for
    one relaytrace has no formula for."""
    if cache.builtin != "vm.builtin.paged_attention_kv_cache_create" or kernel not in cache.kernels:
        return None
    return _ROLES.get(cache.kernels.index(kernel))


def signature(params: tuple[Param, ...]) -> tuple[tuple[str, tuple, str], ...]:
    """``(name, shape, dtype)`` of every tensor the parameters pass, a tuple's field by
    field (``packed_params[3]``): what ``model.shapes.bind`` checks inputs against."""
    return tuple((t.name, t.shape, t.dtype) for p in params for t in p.tensors)


def grouped(params: tuple[Param, ...], flat: list) -> list:
    """``flat`` (one value per tensor of ``signature(params)``) as the entry takes them:
    a tensor's value alone, a tuple's values as one list."""
    out, i = [], 0
    for p in params:
        n = len(p.tensors)
        out.append(flat[i] if p.kind == ParamKind.TENSOR else list(flat[i : i + n]))
        i += n
    return out


class DimRole(Name):
    """What a symbolic dim of a served entry counts, which says what sizes it."""

    TOKENS = "tokens"  # the step's tokens: (1, seq_len, hidden) of a prefill
    SEQUENCES = "sequences"  # the batch's sequences: (batch_size, 1, hidden) of a batch decode
    MODEL = "model"  # a size only the weights have (MLC-LLM's symbolic vocab_size): the model's own
    UNKNOWN = "unknown"  # an input's dim relaytrace cannot tell: the user binds it


@define(frozen=True)
class StepShape:
    """The symbolic dims of an entry by what they count (``roles``: name -> ``DimRole``),
    and whether its token dim counts every sequence's tokens packed in one row
    (``packed``: MLC-LLM's ``batch_prefill`` takes ``(1, seq_len, hidden)`` for all of
    its sequences)."""

    roles: dict[str, DimRole]
    packed: bool = False

    def of(self, role: DimRole) -> tuple[str, ...]:
        """The dims of ``role``, in the order the entry's tensors name them."""
        return tuple(d for d, r in self.roles.items() if r == role)


def _inputs(params: tuple[Param, ...]) -> list[Tensor]:
    """The step's input tensors: every tensor parameter but the weights (a tuple of
    tensors is ``param_mode: packed``'s weights)."""
    return [t for p in params if p.kind == ParamKind.TENSOR and not p.weight for t in p.tensors]


def step_shape(params: tuple[Param, ...]) -> StepShape:
    """What each symbolic dim of an entry counts, read from where it stands: in an input of
    rank 3 or more, ``(batch, tokens, hidden)``, the second-to-last dim counts tokens and
    the first sequences; in one of rank 2, ``(tokens, hidden)``, the first counts tokens;
    a dim of a 1-D integer input counts tokens (``input_ids``), or, beside a token dim,
    sequences (``logit_positions``: one per sequence); a dim only weights have is the
    model's; any other input dim is unknown."""
    roles: dict[str, DimRole] = {}
    packed = False
    inputs = _inputs(params)
    for t in inputs:
        shape = t.shape
        if len(shape) >= 3:
            if isinstance(shape[-2], str):
                roles.setdefault(shape[-2], DimRole.TOKENS)
                packed = packed or shape[0] == 1
            if isinstance(shape[0], str):
                roles.setdefault(shape[0], DimRole.SEQUENCES)
        elif len(shape) == 2 and isinstance(shape[0], str):
            roles.setdefault(shape[0], DimRole.TOKENS)
    for t in inputs:
        if len(t.shape) == 1 and isinstance(t.shape[0], str) and "int" in t.dtype:
            tokens = DimRole.TOKENS in roles.values()
            roles.setdefault(t.shape[0], DimRole.SEQUENCES if tokens else DimRole.TOKENS)
    for t in inputs:
        for d in t.shape:
            if isinstance(d, str):
                roles.setdefault(d, DimRole.UNKNOWN)
    for p in params:
        for t in p.tensors:
            for d in t.shape:
                if isinstance(d, str):
                    roles.setdefault(d, DimRole.MODEL)
    return StepShape(roles, packed and DimRole.SEQUENCES in roles.values())


def step_dims(
    entry: str,
    params: tuple[Param, ...],
    tokens: int,
    sequences: int,
    model_sizes: dict[str, int],
    declared: dict[str, int],
) -> tuple[dict[str, int], list]:
    """(dim -> value, [[dim, value, where it came from], ...] for each dim a step's size
    does not give) of every symbolic dim of ``entry``'s tensors (``step_shape``): a
    token dim the step's tokens (every sequence's, when they are packed in one row), a
    sequences dim ``sequences``, any other the value ``model_sizes`` gives it (the
    model's own, ``declared``, or the user's ``--bind``); a dim with no value is a
    one-line ``UsageError`` naming it and the option that gives it."""
    shape = step_shape(params)
    dims: dict[str, int] = {}
    bound: list = []
    for dim, role in shape.roles.items():
        if role == DimRole.TOKENS:
            dims[dim] = tokens * sequences if shape.packed else tokens
        elif role == DimRole.SEQUENCES:
            dims[dim] = sequences
        elif dim in model_sizes:
            dims[dim] = model_sizes[dim]
            given = declared.get(dim) != model_sizes[dim]
            bound.append([dim, model_sizes[dim], "--bind" if given else f"the model's {dim}"])
        else:
            what = "only the weights have it" if role == DimRole.MODEL else "relaytrace cannot tell what it counts"
            raise UsageError(
                f"{entry}'s dim {dim!r} has no value ({what}, and the model gives none): "
                f"give it with --bind {dim}=VALUE"
            )
    return dims, bound


def served_steps(params: dict[str, tuple[Param, ...]]) -> tuple[str, str] | None:
    """(prefill, decode): the entries that serve one sequence its prompt and then each
    next token through a KV cache (one of any length, one of a static length, neither a
    batch's; ``prefill`` and ``decode`` themselves first), or None when a build has not
    both. What ``profile`` runs, one after the other, when no entry is named."""
    one = [n for n, p in params.items() if cache_param(p) is not None and not batched(p)]
    fills = [n for n in one if of_any_length(params[n])]
    steps = [n for n in one if not of_any_length(params[n])]
    if not fills or not steps:
        return None
    return ("prefill" if "prefill" in fills else fills[0]), ("decode" if "decode" in steps else steps[0])


def step_tokens(params: tuple[Param, ...], tokens: int) -> int:
    """The tokens a served step runs for each sequence: ``tokens`` for an entry with a
    symbolic token dim, else its first input's second-to-last dim ((batch, tokens,
    hidden), as MLC-LLM's entries take embeddings), 1 without one."""
    if of_any_length(params):
        return tokens
    first = next((t for t in _inputs(params)), None)
    return int(first.shape[-2]) if first is not None and len(first.shape) >= 2 else 1


def of_any_length(params: tuple[Param, ...]) -> bool:
    """Whether a served entry takes any number of tokens (a prefill, a verify), not one
    token per sequence (a decode): it has a symbolic token dim (``step_shape``)."""
    return bool(step_shape(params).of(DimRole.TOKENS))


def batched(params: tuple[Param, ...]) -> bool:
    """Whether a served entry runs a batch of sequences at once (MLC-LLM's
    ``batch_decode``, ``batch_prefill``): it has a symbolic sequences dim."""
    return bool(step_shape(params).of(DimRole.SEQUENCES))


def default_context(params: tuple[Param, ...]) -> int:
    """The tokens already in the KV cache before a served step by default: none for a
    prefill (its time is the time to the first token), 32 for a decode."""
    return 0 if of_any_length(params) else 32
