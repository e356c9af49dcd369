"""A Llama written the way MLC-LLM writes its models for TVM: ``tvm.relax.frontend.nn``
with ``nn.llm``'s paged KV cache (``TIRPagedKVCache``), grouped-query attention whose
fused ``qkv_proj`` output goes to the cache's ``attention_with_fused_qkv`` (RoPE applied
inside the cache), a SiLU-gated MLP, and the entries MLC-LLM serves: ``embed``,
``prefill`` (the logits of the last token), ``decode`` and ``create_paged_kv_cache``;
with ``batch``, the engine's ``batch_prefill`` / ``batch_decode`` / ``batch_verify``
(B sequences at once, each at its own context) too.

It exists so that relaytrace is tried on an LLM as TVM deploys one, not only on models
written the way tests write them. The structure follows MLC-LLM's
``python/mlc_llm/model/llama/llama_model.py``; the code is our own and small (hidden 64,
4 query and 2 key/value heads by default) so that tests build it in seconds.
``mlc_style`` makes it as MLC-LLM exports its own: a symbolic ``vocab_size`` in the
weights, the head tied to the embeddings through ``embed_tokens.lm_head_forward``, the
batch entries, ``get_default_spec`` returning an ``nn.spec.ModuleSpec``, and optionally
``q4f16_1`` group quantization (``zoo.group_quant``).
"""

from __future__ import annotations

from typing import Literal

from tvm import te
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode, TIRPagedKVCache

from .group_quant import QUANTIZATIONS, GroupQuantizeEmbedding, GroupQuantizeLinear
from .nn_decoder import Mlp

ParamMode = Literal["packed", "plain"]


class TiedEmbedding(nn.Embedding):
    """``nn.Embedding`` with ``lm_head_forward``: the table used as the output head, as
    MLC-LLM ties a model's embeddings (a method, not ``forward``)."""

    def lm_head_forward(self, x: nn.Tensor) -> nn.Tensor:
        """``x`` (..., dim) times the table's transpose: logits (..., num)."""
        return op.matmul(x, op.permute_dims(self.weight))


class _Make:
    """How the model's parts are made: float32 layers, or float16 ones with
    group-quantized weights (``quantization="q4f16_1"``)."""

    def __init__(self, quantization: str | None):
        if quantization not in (None, *QUANTIZATIONS):
            raise ValueError(f"unknown quantization {quantization!r}: use one of {QUANTIZATIONS} or None")
        self.quantized = quantization is not None
        self.dtype = "float16" if self.quantized else "float32"

    def linear(self, in_features: int, out_features) -> nn.Module:
        """A bias-free projection ``in_features`` -> ``out_features``."""
        if self.quantized:
            return GroupQuantizeLinear(in_features, out_features)
        return nn.Linear(in_features, out_features, bias=False, dtype=self.dtype)

    def norm(self, hidden: int) -> nn.Module:
        """An RMSNorm over the last axis."""
        return nn.RMSNorm(hidden, -1, 1e-5, bias=False, dtype=self.dtype)

    def embedding(self, vocab, hidden: int, tied: bool) -> nn.Module:
        """The token table; with ``tied``, one that is the output head too."""
        if self.quantized:
            return GroupQuantizeEmbedding(vocab, hidden)
        return TiedEmbedding(vocab, hidden, dtype=self.dtype) if tied else nn.Embedding(vocab, hidden, self.dtype)


class LlamaAttention(nn.Module):
    """Grouped-query attention: ``qkv_proj`` to ``(q + 2 kv) * head_dim``, attention in the
    paged KV cache (which applies RoPE and appends k/v for ``layer_id``), ``o_proj``."""

    def __init__(self, hidden: int, q_heads: int, kv_heads: int, make: _Make):
        self.head_dim, self.q_heads, self.kv_heads = hidden // q_heads, q_heads, kv_heads
        self.qkv_proj = make.linear(hidden, (q_heads + 2 * kv_heads) * self.head_dim)
        self.o_proj = make.linear(q_heads * self.head_dim, hidden)

    def forward(self, x: nn.Tensor, cache: PagedKVCache, layer_id: int) -> nn.Tensor:
        """Attention of ``x`` (batch, seq, hidden) over the cache's sequences: same shape."""
        batch, seq, _ = x.shape
        qkv = op.reshape(self.qkv_proj(x), (batch, seq, self.q_heads + 2 * self.kv_heads, self.head_dim))
        out = cache.attention_with_fused_qkv(layer_id, qkv, self.q_heads, sm_scale=self.head_dim**-0.5)
        return self.o_proj(op.reshape(out, (batch, seq, self.q_heads * self.head_dim)))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: ``input_layernorm`` -> ``self_attn``, ``post_attention_layernorm`` ->
    ``mlp``, each added to its input."""

    def __init__(self, hidden: int, q_heads: int, kv_heads: int, inner: int, make: _Make):
        self.input_layernorm = make.norm(hidden)
        self.self_attn = LlamaAttention(hidden, q_heads, kv_heads, make)
        self.post_attention_layernorm = make.norm(hidden)
        self.mlp = Mlp(hidden, inner, make.linear)  # the SiLU-gated MLP, gate_up_proj and down_proj, as MLC-LLM's

    def forward(self, x: nn.Tensor, cache: PagedKVCache, layer_id: int) -> nn.Tensor:
        """The block's output: the shape of ``x``."""
        x = self.self_attn(self.input_layernorm(x), cache, layer_id) + x
        return self.mlp(self.post_attention_layernorm(x)) + x


class LlamaModel(nn.Module):
    """``embed_tokens``, the ``layers`` and the final ``norm``."""

    def __init__(self, vocab, hidden: int, q_heads: int, kv_heads: int, inner: int, layers: int, make, tied: bool):
        self.embed_tokens = make.embedding(vocab, hidden, tied)
        self.layers = nn.ModuleList([LlamaDecoderLayer(hidden, q_heads, kv_heads, inner, make) for _ in range(layers)])
        self.norm = make.norm(hidden)

    def forward(self, x: nn.Tensor, cache: PagedKVCache) -> nn.Tensor:
        """The hidden states after every layer and the final norm."""
        for layer_id, layer in enumerate(self.layers):
            x = layer(x, cache, layer_id)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    """The served model: ``model`` and ``lm_head`` (or, ``tie``d, the embeddings'
    ``lm_head_forward``), with MLC-LLM's entries. ``vocab`` may be a name
    (``"vocab_size"``): the weights then keep it symbolic, as MLC-LLM exports them, and
    ``vocab_size`` (this attribute) is its value."""

    def __init__(
        self,
        vocab: int | str = 256,
        hidden: int = 64,
        q_heads: int = 4,
        kv_heads: int = 2,
        inner: int = 128,
        layers: int = 2,
        target: str = "llvm",
        *,
        vocab_size: int = 256,
        tie: bool = False,
        quantization: str | None = None,
    ):
        make = _Make(quantization)
        self.model = LlamaModel(vocab, hidden, q_heads, kv_heads, inner, layers, make, tie)
        self.lm_head = None if tie else make.linear(hidden, vocab)
        self.hidden, self.vocab, self.layers, self.dtype = hidden, vocab, layers, make.dtype
        self.vocab_size = vocab if isinstance(vocab, int) else vocab_size
        self.q_heads, self.kv_heads, self.head_dim = q_heads, kv_heads, hidden // q_heads
        self.target = target

    def get_logits(self, hidden: nn.Tensor) -> nn.Tensor:
        """The float32 logits of ``hidden`` (..., hidden): (..., vocab)."""
        logits = self.model.embed_tokens.lm_head_forward(hidden) if self.lm_head is None else self.lm_head(hidden)
        return logits if logits.dtype == "float32" else logits.astype("float32")

    def embed(self, input_ids: nn.Tensor) -> nn.Tensor:
        """The embeddings (seq_len, hidden) of ``input_ids`` (seq_len,)."""
        return self.model.embed_tokens(input_ids)

    def prefill(self, input_embed: nn.Tensor, paged_kv_cache: PagedKVCache):
        """Logits (1, 1, vocab) of the last of ``input_embed``'s tokens, and the cache."""

        def last(x: te.Tensor):
            b, s, d = x.shape
            return te.compute((b, 1, d), lambda i, _, k: x[i, s - 1, k], name="index")

        hidden = op.tensor_expr_op(last, name_hint="index", args=[self.model(input_embed, paged_kv_cache)])
        return self.get_logits(hidden), paged_kv_cache

    def decode(self, input_embed: nn.Tensor, paged_kv_cache: PagedKVCache):
        """Logits (1, 1, vocab) of one token, and the cache."""
        return self.get_logits(self.model(input_embed, paged_kv_cache)), paged_kv_cache

    def batch_prefill(self, input_embeds: nn.Tensor, logit_positions: nn.Tensor, paged_kv_cache: PagedKVCache):
        """Logits (1, batch_size, vocab) at ``logit_positions`` (each sequence's last token
        in the packed ``input_embeds``, (1, seq_len, hidden)), and the cache."""
        hidden = op.take(self.model(input_embeds, paged_kv_cache), logit_positions, axis=1)
        return self.get_logits(hidden), paged_kv_cache

    def batch_decode(self, input_embeds: nn.Tensor, paged_kv_cache: PagedKVCache):
        """Logits (batch_size, 1, vocab): one token of each of the batch's sequences."""
        return self.get_logits(self.model(input_embeds, paged_kv_cache)), paged_kv_cache

    def batch_verify(self, input_embeds: nn.Tensor, paged_kv_cache: PagedKVCache):
        """Logits (1, seq_len, vocab) of every draft token of the batch's sequences."""
        return self.get_logits(self.model(input_embeds, paged_kv_cache)), paged_kv_cache

    def create_paged_kv_cache(
        self, max_batch_size, max_total_seq_len, prefill_chunk_size, page_size, support_sliding_window
    ) -> PagedKVCache:
        """The paged KV cache with TIR kernels for this model's target."""
        from tvm import relax
        from tvm.target import Target

        return TIRPagedKVCache(
            attn_kind="mha",
            max_batch_size=max_batch_size,
            max_total_seq_len=max_total_seq_len,
            prefill_chunk_size=prefill_chunk_size,
            page_size=page_size,
            support_sliding_window=support_sliding_window,
            layer_partition=relax.ShapeExpr([0, self.layers]),
            num_hidden_layers=self.layers,
            num_attention_heads=self.q_heads,
            num_key_value_heads=self.kv_heads,
            qk_head_dim=self.head_dim,
            v_head_dim=self.head_dim,
            mla_original_qk_head_dim=0,
            mla_original_v_head_dim=0,
            rope_mode=RopeMode.NORMAL,
            rope_scale=1,
            rope_theta=10000,
            rope_scaling={},
            rope_ext_factors=relax.prim_value(0),
            rotary_dim=self.head_dim,
            enable_disaggregation=False,
            dtype=self.dtype,
            target=Target(self.target),
        )

    def get_default_spec(self, param_mode: ParamMode = "packed", batch: bool = True) -> nn.spec.ModuleSpec:
        """The export spec as MLC-LLM's models give it: an ``nn.spec.ModuleSpec`` of every
        entry (the batch ones with ``batch``), parameters ``param_mode``."""
        return nn.spec.ModuleSpec.from_raw(_spec(self.hidden, self.dtype, param_mode, batch), self)


def _spec(hidden: int, dtype: str, param_mode: ParamMode, batch: bool) -> dict:
    """The raw export spec of ``LlamaForCausalLM``'s entries."""
    mode = {"param_mode": param_mode, "effect_mode": "none"}
    cache = nn.spec.Object(object_type=PagedKVCache)
    spec = {
        "embed": {"input_ids": nn.spec.Tensor(["seq_len"], "int32"), "$": mode},
        "prefill": {
            "input_embed": nn.spec.Tensor([1, "seq_len", hidden], dtype),
            "paged_kv_cache": cache,
            "$": mode,
        },
        "decode": {"input_embed": nn.spec.Tensor([1, 1, hidden], dtype), "paged_kv_cache": cache, "$": mode},
    }
    if batch:
        spec["batch_prefill"] = {
            "input_embeds": nn.spec.Tensor([1, "seq_len", hidden], dtype),
            "logit_positions": nn.spec.Tensor(["batch_size"], "int32"),
            "paged_kv_cache": cache,
            "$": mode,
        }
        spec["batch_decode"] = {
            "input_embeds": nn.spec.Tensor(["batch_size", 1, hidden], dtype),
            "paged_kv_cache": cache,
            "$": mode,
        }
        spec["batch_verify"] = {
            "input_embeds": nn.spec.Tensor([1, "seq_len", hidden], dtype),
            "paged_kv_cache": cache,
            "$": mode,
        }
    spec["create_paged_kv_cache"] = {
        "max_batch_size": int,
        "max_total_seq_len": int,
        "prefill_chunk_size": int,
        "page_size": int,
        "support_sliding_window": int,
        "$": {"param_mode": "none", "effect_mode": "none"},
    }
    return spec


def llama(layers: int = 2, param_mode: ParamMode = "packed", target: str = "llvm", hidden: int = 64):
    """(module, spec) of the MLC-style Llama for ``frontends.nn.from_nn`` or the CLI's
    ``FILE.py:factory``: ``embed``, ``prefill``, ``decode`` and ``create_paged_kv_cache``,
    parameters ``param_mode`` (MLC-LLM packs them into one tuple)."""
    model = LlamaForCausalLM(layers=layers, hidden=hidden, target=target)
    return model, _spec(hidden, model.dtype, param_mode, batch=False)


def mlc_style(
    layers: int = 2,
    quantization: str | None = None,
    target: str = "llvm",
    hidden: int = 64,
    vocab_size: int = 256,
    param_mode: ParamMode = "packed",
):
    """(module, ``nn.spec.ModuleSpec``) of the Llama as MLC-LLM exports its own models:
    ``vocab_size`` symbolic in the weights (the module's ``vocab_size`` attribute its
    value), the head tied to the embeddings (``embed_tokens.lm_head_forward``), the batch
    entries besides ``prefill`` / ``decode``, and ``quantization`` (None or ``"q4f16_1"``)."""
    model = LlamaForCausalLM(
        "vocab_size", hidden, layers=layers, target=target, vocab_size=vocab_size, tie=True, quantization=quantization
    )
    return model, model.get_default_spec(param_mode)
