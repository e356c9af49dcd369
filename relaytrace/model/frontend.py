"""The frontend's own program, as evidence for the layers the lineage names.

A frontend names each op's layer by a mapping (which node's translation emitted the
binding). That mapping cannot vouch for itself: an op billed to the eval ``Dropout``
its value next passed through looks as plausible to it as any. So each frontend also
records the program it translated (``Program``: its nodes, what each is and whether
the importer made a value for it), and ``check_program`` holds the origins against it
with evidence the mapping did not produce:

- every node that computes has at least one origin;
- no origin is billed to a node that computes nothing (it only passed a value on);
- an origin's Relax op is one its node's op can produce (``PRODUCES``: an ``add``
  cannot come from a ``dropout``, a ``take`` from a ``pow``).

For ``tvm.relax.frontend.nn`` there is no program apart from the Relax it emits: its
layer is the module whose ``forward`` emitted the op, and only TVM's own module
classes (``PRODUCES["nn"]``) say which ops they emit; a user's module class is not
checked. Pure: no TVM, no torch.
"""

from __future__ import annotations

import functools
import re

from attrs import define, field

from .names import Name
from .ops import is_prim_func, short_op
from .origin import OP


class Frontend(Name):
    """The frontend that translated a model: what ``Origin.node`` and ``SourceNode.node``
    name (a torch.export node, an ONNX node) and which reference ``compare`` runs."""

    TORCH = "torch"
    ONNX = "onnx"
    NN = "nn"


TORCH, ONNX, NN = Frontend.TORCH, Frontend.ONNX, Frontend.NN


def onnx_node_id(name: str, index: int) -> str:
    """The id of the ``index``-th node of an ONNX graph, named ``name``, as Model
    Explorer's ONNX adapter gives it (``<node_I>`` for a node without a name)."""
    return name or f"<node_{index}>"


@define(frozen=True)
class SourceNode:
    """One node of the frontend's program. ``node`` and ``op`` are in the vocabulary of
    ``Origin.node`` and ``Origin.source_op`` (for torch: the node of the program before
    decompositions, the aten op of the translated one; for ONNX: the node's name, as
    Model Explorer's ONNX adapter ids it (``<node_I>`` for the I-th node when unnamed),
    and the op type). ``computes``: the importer made a new value for it; a node that only
    passes one of its inputs on (eval Dropout, ``.to`` the same dtype, Identity) or
    whose value folded to a constant does not, and no op may be billed to it."""

    node: str
    op: str
    layer: str
    computes: bool


@define(frozen=True)
class Program:
    """What a frontend translated: which frontend (``TORCH``, ``ONNX``, ``NN``), its
    nodes in translation order (none for ``NN``), and ``sizes``: the value the model
    itself gives a symbolic dim of its weights (an ``NN`` module's attribute of that name,
    as MLC-LLM's models keep ``vocab_size``), which a served step sizes the weights by."""

    frontend: Frontend
    nodes: tuple[SourceNode, ...] = ()
    sizes: dict[str, int] = field(factory=dict)


@define(frozen=True)
class ProgramCheck:
    """The origins held against their program: per origin, why it is wrong
    (``wrong``) or why it cannot be told (``unknown``); nodes that compute but have no
    origin (``missing``)."""

    wrong: dict[str, str]
    unknown: dict[str, str]
    missing: tuple[SourceNode, ...] = ()


def _table(entries: dict[str, str]) -> dict[str, frozenset[str]]:
    return {op: frozenset(ops.split()) for op, ops in entries.items()}


# The Relax ops (short names) each source op's translation may emit. A source op whose
# name is the Relax op's (``relu`` -> ``relu``, ONNX ``Relu`` -> ``relu``) needs no entry.
_ARITHMETIC = "astype broadcast_to"  # dtype promotion and broadcasting a translation may add
PRODUCES: dict[str, dict[str, frozenset[str]]] = {
    TORCH: _table(
        {
            "_native_batch_norm_legit_no_training": "batch_norm",
            "native_batch_norm": "batch_norm",
            "native_layer_norm": "layer_norm",
            "native_group_norm": "group_norm reshape",
            "rms_norm": "rms_norm",
            "_softmax": "softmax",
            "_log_softmax": "log_softmax",
            "_to_copy": "astype",
            "to": "astype",
            "type_as": "astype",
            "add": f"add {_ARITHMETIC}",
            "sub": f"subtract {_ARITHMETIC}",
            "rsub": f"subtract {_ARITHMETIC}",
            "mul": f"multiply {_ARITHMETIC}",
            "div": f"divide floor_divide {_ARITHMETIC}",
            "pow": f"power {_ARITHMETIC}",
            "neg": "negative",
            "abs": "abs",
            "exp": "exp",
            "log": "log",
            "sqrt": "sqrt",
            "rsqrt": "rsqrt",
            "reciprocal": "divide",
            "erf": "erf",
            "tanh": "tanh",
            "sigmoid": "sigmoid",
            "silu": "silu",
            "gelu": "gelu gelu_tanh",
            "relu": "relu",
            "hardtanh": "clip",
            "clamp": "clip maximum minimum",
            "leaky_relu": "leakyrelu",
            "hardswish": "hardswish",
            "hardsigmoid": "hardsigmoid",
            "elu": "elu",
            "addmm": "matmul add multiply",
            "mm": "matmul",
            "bmm": "matmul",
            "matmul": "matmul",
            "linear": "matmul add permute_dims",
            "baddbmm": "matmul add multiply",
            "convolution": "conv1d conv2d conv3d conv1d_transpose conv2d_transpose add reshape",
            "embedding": "take astype reshape",
            "index_select": "take",
            "gather": "gather_elements",
            "index": "take index_tensor",
            "max_pool2d_with_indices": "max_pool2d zeros_like",
            "max_pool2d": "max_pool2d",
            "avg_pool2d": "avg_pool2d",
            "adaptive_avg_pool2d": "adaptive_avg_pool2d",
            "_adaptive_avg_pool2d": "adaptive_avg_pool2d",
            "mean": "mean",
            "sum": "sum",
            "amax": "max",
            "max": "max",
            "amin": "min",
            "min": "min",
            "var": "variance",
            "cumsum": "cumsum",
            "argmax": "argmax",
            "topk": "topk",
            "any": "astype max",
            "all": "astype min",
            "cat": "concat",
            "split_with_sizes": "split",
            "split": "split",
            "chunk": "split",
            "view": "reshape",
            "_unsafe_view": "reshape",
            "reshape": "reshape",
            "permute": "permute_dims",
            "transpose": "permute_dims",
            "t": "permute_dims",
            "unsqueeze": "expand_dims",
            "squeeze": "squeeze",
            "expand": "broadcast_to",
            "slice": "strided_slice",
            "select": "take strided_slice squeeze",
            "flatten": "reshape",
            "repeat": "tile",
            "flip": "flip",
            "full": "full",
            "full_like": "full_like",
            "zeros": "zeros full",
            "ones": "ones full",
            "zeros_like": "zeros_like",
            "ones_like": "ones_like",
            "arange": "arange",
            "scalar_tensor": "full",
            "where": "where",
            "masked_fill": "where full_like",
            "triu": "triu",
            "tril": "tril",
            "eq": "equal",
            "ne": "not_equal",
            "lt": "less",
            "le": "less_equal",
            "gt": "greater",
            "ge": "greater_equal",
            "logical_not": "logical_not",
            "bitwise_and": "bitwise_and logical_and",
            "scaled_dot_product_attention": "matmul multiply softmax add permute_dims",
            "_scaled_dot_product_flash_attention_for_cpu": "matmul multiply softmax add permute_dims",
            "pad": "pad",
            "constant_pad_nd": "pad",
            # they pass a value on in an eval-mode export: no op comes from them
            "dropout": "",
            "clone": "",
            "contiguous": "",
            "alias": "",
            "detach": "",
            "_assert_tensor_metadata": "",
        }
    ),
    ONNX: _table(
        {
            "Gemm": "matmul add multiply permute_dims",
            "MatMul": "matmul",
            "Conv": "conv1d conv2d conv3d add reshape",
            "ConvTranspose": "conv1d_transpose conv2d_transpose add reshape",
            "BatchNormalization": "batch_norm",
            "LayerNormalization": "layer_norm",
            "GlobalAveragePool": "mean",
            "AveragePool": "avg_pool2d",
            "MaxPool": "max_pool2d",
            "ReduceMean": "mean",
            "ReduceSum": "sum",
            "ReduceMax": "max",
            "Gather": "take add less where shape_to_tensor",
            "GatherElements": "gather_elements add less where take shape_to_tensor",
            "Cast": "astype",
            "Sub": "subtract",
            "Mul": "multiply",
            "Div": "divide",
            "Pow": "power",
            "Neg": "negative",
            "Transpose": "permute_dims",
            "Unsqueeze": "expand_dims",
            "Flatten": "reshape",
            "Expand": "broadcast_to",
            "Slice": "strided_slice",
            "Trilu": "triu tril",
            "Clip": "clip maximum minimum isnan where",
            "Concat": "concat",
            "Split": "split",
            "Reshape": "reshape",
            "Squeeze": "squeeze",
            "Softmax": "softmax",
            "Where": "where",
            "Equal": "equal",
            "Range": "arange",
            "ConstantOfShape": "full",
            "Identity": "",
            "Dropout": "",
        }
    ),
    NN: _table(
        {
            "Linear": "matmul add permute_dims astype",
            "Embedding": "take reshape astype",
            "RMSNorm": "rms_norm",
            "LayerNorm": "layer_norm",
            "GroupNorm": "group_norm",
            "Conv1D": "conv1d add reshape",
            "Conv2D": "conv2d add reshape",
            "ConvTranspose1D": "conv1d_transpose add reshape",
        }
    ),
}


@functools.lru_cache(maxsize=4096)
def _plain(name: str) -> str:
    """``LayerNormalization`` -> ``layer_normalization``, ``_softmax`` -> ``softmax``,
    ``maximum3`` -> ``maximum``: names compared across vocabularies (memoised: an
    LLM's thousands of ops have a few dozen names)."""
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.strip("_")).lower()
    return re.sub(r"\d+$", "", name)


def can_produce(frontend: str, source_op: str, op: str) -> bool | None:
    """Whether ``source_op``'s translation can emit the Relax op ``op`` (``relax.add``
    or a PrimFunc a converter emitted, ``maximum3``); None when nothing says (a source
    op the table lacks, named otherwise than the op)."""
    name = _plain(short_op(op)) if is_prim_func(op) else short_op(op)
    allowed = PRODUCES.get(frontend, {}).get(source_op)
    if allowed is not None and name in allowed:
        return True
    if _plain(source_op) == _plain(name):
        return True
    return None if allowed is None else False


def check_program(origins, program: Program | None) -> ProgramCheck:
    """Each op origin (``origins``: id -> Origin) against ``program``: wrong when its
    node computes nothing or cannot produce its op, unknown when the table cannot tell
    (torch and ONNX; a user's nn module class is not checked); and every computing
    node without an origin. No program: nothing to check (plain Relax)."""
    if program is None:
        return ProgramCheck({}, {})
    computes = {(n.node, n.op): n.computes for n in program.nodes}
    wrong, unknown = {}, {}
    claimed = set()
    for oid, origin in origins.items():
        if origin.kind != OP or not origin.source_op:
            continue
        key = (origin.node, origin.source_op)
        claimed.add(key)
        at = f"{oid} ({origin.short_op}) is billed to {origin.layer}"
        if computes.get(key) is False:
            wrong[oid] = f"{at}, whose node {origin.node or '?'} ({origin.source_op}) computes nothing"
            continue
        verdict = can_produce(program.frontend, origin.source_op, origin.op)
        if verdict is False:
            wrong[oid] = (
                f"{at}, but its node {origin.node or '?'} ({origin.source_op}) cannot produce {origin.short_op}"
            )
        elif verdict is None and program.frontend != NN:
            unknown[oid] = f"{oid}: which ops a {origin.source_op} node produces is not known to relaytrace"
    missing = tuple(dict.fromkeys(n for n in program.nodes if n.computes and (n.node, n.op) not in claimed))
    return ProgramCheck(wrong, unknown, missing)


def missing_reason(node: SourceNode) -> str:
    """Why a computing source node with no op billed to it is a verification problem."""
    return f"node {node.node or '?'} ({node.op}) of layer {node.layer} computes, but no op is billed to it"
