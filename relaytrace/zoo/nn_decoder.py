"""A small decoder written with TVM's own frontend, ``tvm.relax.frontend.nn``, as LLM
deployments write theirs: token embedding, RMSNorm, self-attention over a symbolic
sequence length, a SiLU-gated MLP, a language-model head; ``prefill`` (any sequence
length) and ``decode`` (one token) entries. No KV cache: each entry attends over the
tokens it is given, which is all a profile of its kernels needs."""

from __future__ import annotations

import math

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op


class Attention(nn.Module):
    """Multi-head self-attention with a fused, bias-free ``qkv_proj`` and ``o_proj``;
    no mask, no KV cache."""

    def __init__(self, hidden: int, heads: int):
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv_proj = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """Softmax attention of each head over the tokens of ``x`` (batch, seq, hidden),
        projected back to (batch, seq, hidden)."""
        batch, seq, hidden = x.shape
        qkv = op.reshape(self.qkv_proj(x), (batch, seq, 3, self.heads, self.head_dim))
        q, k, v = op.split(qkv, 3, axis=2)
        q, k, v = (
            op.permute_dims(op.reshape(t, (batch, seq, self.heads, self.head_dim)), [0, 2, 1, 3]) for t in (q, k, v)
        )
        scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * (1.0 / math.sqrt(self.head_dim))
        att = op.matmul(op.softmax(scores, axis=-1), v)
        return self.o_proj(op.reshape(op.permute_dims(att, [0, 2, 1, 3]), (batch, seq, hidden)))


class Mlp(nn.Module):
    """The SiLU-gated MLP: a fused, bias-free ``gate_up_proj`` to ``2 * inner`` and
    ``down_proj`` back to ``hidden``; ``linear(in, out)`` makes each projection (a
    bias-free float32 ``nn.Linear`` unless given)."""

    def __init__(self, hidden: int, inner: int, linear=None):
        linear = linear or (lambda i, o: nn.Linear(i, o, bias=False))
        self.gate_up_proj = linear(hidden, 2 * inner)
        self.down_proj = linear(inner, hidden)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """``down_proj(silu(gate) * up)`` of ``x``; the shape of ``x``."""
        gate, up = op.split(self.gate_up_proj(x), 2, axis=-1)
        return self.down_proj(op.silu(gate) * up)


class Layer(nn.Module):
    """One pre-norm decoder layer: ``input_norm`` and ``self_attn``, then
    ``post_attention_norm`` and ``mlp``, each added to its input."""

    def __init__(self, hidden: int, heads: int, inner: int):
        self.input_norm = nn.RMSNorm(hidden, axes=-1, bias=False)
        self.self_attn = Attention(hidden, heads)
        self.post_attention_norm = nn.RMSNorm(hidden, axes=-1, bias=False)
        self.mlp = Mlp(hidden, inner)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """``x`` plus the attention of its norm, plus the MLP of that sum's norm:
        (batch, seq, hidden)."""
        x = x + self.self_attn(self.input_norm(x))
        return x + self.mlp(self.post_attention_norm(x))


class Decoder(nn.Module):
    """The decoder: ``embed_tokens``, ``layers`` of ``Layer``, a final ``norm`` and
    ``lm_head``; ``prefill`` and ``decode`` are its entries."""

    def __init__(self, vocab: int = 256, hidden: int = 64, heads: int = 4, inner: int = 128, layers: int = 2):
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([Layer(hidden, heads, inner) for _ in range(layers)])
        self.norm = nn.RMSNorm(hidden, axes=-1, bias=False)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def _run(self, tokens: nn.Tensor) -> nn.Tensor:
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))

    def prefill(self, tokens: nn.Tensor) -> nn.Tensor:
        """Logits (batch, seq_len, vocab) of a (batch, seq_len) int32 token sequence."""
        return self._run(tokens)

    def decode(self, token: nn.Tensor) -> nn.Tensor:
        """Logits (batch, 1, vocab) of one token per sequence, (batch, 1), attending over it
        alone (no KV cache)."""
        return self._run(token)


def decoder(layers: int = 2):
    """(module, spec) of the decoder for ``frontends.nn.from_nn``."""
    spec = {
        "prefill": {"tokens": nn.spec.Tensor([1, "seq_len"], "int32")},
        "decode": {"token": nn.spec.Tensor([1, 1], "int32")},
    }
    return Decoder(layers=layers), spec
