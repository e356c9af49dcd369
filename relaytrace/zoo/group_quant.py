"""Group quantization written the way MLC-LLM's ``q4f16_1`` writes it for TVM: each
weight row as 4-bit values packed eight to a ``uint32``, with one ``float16`` scale per
group of 32 values (0.5625 bytes a weight), dequantized by a TE kernel
(``op.tensor_expr_op``, named ``dequantize``) before the matmul or the take that uses it.

It exists so that relaytrace is tried on a quantized LLM as MLC-LLM compiles one: a
dequantize kernel feeding each Linear, the shape a dequantize-matmul fusion rewrites.
The code is our own; the layout (value ``j`` of a row in bits ``4 * (j % 8)`` of word
``j // 8``, stored as ``q + 7``, read back as ``(q - 7) * scale``) is q4f16_1's.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

BITS, PER_WORD, GROUP = 4, 8, 32
"""Bits a value, values a uint32 word, values a scale."""

QUANTIZATIONS = ("q4f16_1",)


def _dequantize(weight: te.Tensor, scale: te.Tensor, columns: int) -> te.Tensor:
    """The float16 matrix (rows, ``columns``) that packed ``weight`` and ``scale`` hold."""
    rows = weight.shape[0]

    def value(i, j):
        word = weight[i, j // PER_WORD]
        bits = tirx.bitwise_and(
            tirx.shift_right(word, (j % PER_WORD * BITS).astype("uint32")), tirx.const(15, "uint32")
        )
        return (bits.astype("float16") - tirx.const(7, "float16")) * scale[i, j // GROUP]

    return te.compute((rows, columns), value, name="dequantize")


class _Packed:
    """The two parameters of a group-quantized ``rows`` x ``columns`` weight."""

    def __init__(self, rows, columns: int):
        if columns % GROUP:
            raise ValueError(f"a group-quantized weight needs columns divisible by {GROUP}, not {columns}")
        self.columns = columns
        self.q_weight = nn.Parameter((rows, columns // PER_WORD), dtype="uint32")
        self.q_scale = nn.Parameter((rows, columns // GROUP), dtype="float16")

    def dequantized(self) -> nn.Tensor:
        """The weight in float16, computed by the ``dequantize`` kernel."""
        columns = self.columns
        return op.tensor_expr_op(
            lambda w, s: _dequantize(w, s, columns), name_hint="dequantize", args=[self.q_weight, self.q_scale]
        )


class GroupQuantizeLinear(_Packed, nn.Module):
    """A bias-free ``Linear(in_features, out_features)`` whose weight is group-quantized:
    ``x @ dequantize(q_weight, q_scale).T``."""

    def __init__(self, in_features: int, out_features):
        _Packed.__init__(self, out_features, in_features)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """``x`` (..., in_features) times the weight: (..., out_features), float16."""
        return op.matmul(x, op.permute_dims(self.dequantized()))


class GroupQuantizeEmbedding(_Packed, nn.Module):
    """An ``Embedding(num, dim)`` whose table is group-quantized; ``lm_head_forward``
    uses it as a tied output head, as MLC-LLM's quantized embeddings do."""

    def __init__(self, num, dim: int):
        _Packed.__init__(self, num, dim)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """The rows of the table that the int32 ids ``x`` name: ``x.shape + (dim,)``."""
        return op.take(self.dequantized(), x, axis=0)

    def lm_head_forward(self, x: nn.Tensor) -> nn.Tensor:
        """``x`` (..., dim) times the table's transpose: logits (..., num)."""
        return op.matmul(x, op.permute_dims(self.dequantized()))
