"""A Llama written the way MLC-LLM writes its models for TVM: ``tvm.relax.frontend.nn``
with ``nn.llm``'s paged KV cache (``TIRPagedKVCache``), grouped-query attention whose
fused ``qkv_proj`` output goes to the cache's ``attention_with_fused_qkv`` (RoPE applied
inside the cache), a SiLU-gated MLP, and the entries MLC-LLM serves: ``embed``,
``prefill`` (the logits of the last token), ``decode`` and ``create_paged_kv_cache``.

It exists so that relaytrace is tried on an LLM as TVM deploys one, not only on models
written the way tests write them. The structure follows MLC-LLM's
``python/mlc_llm/model/llama/llama_model.py``; the code is our own and small (hidden 64,
4 query and 2 key/value heads by default) so that tests build it in seconds.
"""

from __future__ import annotations

from typing import Literal

from tvm import te
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode, TIRPagedKVCache

from .nn_decoder import Mlp

ParamMode = Literal["packed", "plain"]


class LlamaAttention(nn.Module):
    """Grouped-query attention: ``qkv_proj`` to ``(q + 2 kv) * head_dim``, attention in the
    paged KV cache (which applies RoPE and appends k/v for ``layer_id``), ``o_proj``."""

    def __init__(self, hidden: int, q_heads: int, kv_heads: int):
        self.head_dim, self.q_heads, self.kv_heads = hidden // q_heads, q_heads, kv_heads
        self.qkv_proj = nn.Linear(hidden, (q_heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.o_proj = nn.Linear(q_heads * self.head_dim, hidden, bias=False)

    def forward(self, x: nn.Tensor, cache: PagedKVCache, layer_id: int) -> nn.Tensor:
        """Attention of ``x`` (batch, seq, hidden) over the cache's sequence: same shape."""
        batch, seq, _ = x.shape
        qkv = op.reshape(self.qkv_proj(x), (batch, seq, self.q_heads + 2 * self.kv_heads, self.head_dim))
        out = cache.attention_with_fused_qkv(layer_id, qkv, self.q_heads, sm_scale=self.head_dim**-0.5)
        return self.o_proj(op.reshape(out, (batch, seq, self.q_heads * self.head_dim)))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: ``input_layernorm`` -> ``self_attn``, ``post_attention_layernorm`` ->
    ``mlp``, each added to its input."""

    def __init__(self, hidden: int, q_heads: int, kv_heads: int, inner: int):
        self.input_layernorm = nn.RMSNorm(hidden, -1, 1e-5, bias=False)
        self.self_attn = LlamaAttention(hidden, q_heads, kv_heads)
        self.post_attention_layernorm = nn.RMSNorm(hidden, -1, 1e-5, bias=False)
        self.mlp = Mlp(hidden, inner)  # the SiLU-gated MLP, gate_up_proj and down_proj, as MLC-LLM's

    def forward(self, x: nn.Tensor, cache: PagedKVCache, layer_id: int) -> nn.Tensor:
        """The block's output: the shape of ``x``."""
        x = self.self_attn(self.input_layernorm(x), cache, layer_id) + x
        return self.mlp(self.post_attention_layernorm(x)) + x


class LlamaModel(nn.Module):
    """``embed_tokens``, the ``layers`` and the final ``norm``."""

    def __init__(self, vocab: int, hidden: int, q_heads: int, kv_heads: int, inner: int, layers: int):
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([LlamaDecoderLayer(hidden, q_heads, kv_heads, inner) for _ in range(layers)])
        self.norm = nn.RMSNorm(hidden, -1, 1e-5, bias=False)

    def forward(self, x: nn.Tensor, cache: PagedKVCache) -> nn.Tensor:
        """The hidden states after every layer and the final norm."""
        for layer_id, layer in enumerate(self.layers):
            x = layer(x, cache, layer_id)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    """The served model: ``model`` and ``lm_head``, with MLC-LLM's entries."""

    def __init__(
        self,
        vocab: int = 256,
        hidden: int = 64,
        q_heads: int = 4,
        kv_heads: int = 2,
        inner: int = 128,
        layers: int = 2,
        target: str = "llvm",
    ):
        self.model = LlamaModel(vocab, hidden, q_heads, kv_heads, inner, layers)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.hidden, self.vocab, self.layers = hidden, vocab, layers
        self.q_heads, self.kv_heads, self.head_dim = q_heads, kv_heads, hidden // q_heads
        self.target = target

    def embed(self, input_ids: nn.Tensor) -> nn.Tensor:
        """The embeddings (seq_len, hidden) of ``input_ids`` (seq_len,)."""
        return self.model.embed_tokens(input_ids)

    def prefill(self, input_embed: nn.Tensor, paged_kv_cache: PagedKVCache):
        """Logits (1, 1, vocab) of the last of ``input_embed``'s tokens, and the cache."""

        def last(x: te.Tensor):
            b, s, d = x.shape
            return te.compute((b, 1, d), lambda i, _, k: x[i, s - 1, k], name="index")

        hidden = op.tensor_expr_op(last, name_hint="index", args=[self.model(input_embed, paged_kv_cache)])
        return self.lm_head(hidden), paged_kv_cache

    def decode(self, input_embed: nn.Tensor, paged_kv_cache: PagedKVCache):
        """Logits (1, 1, vocab) of one token, and the cache."""
        return self.lm_head(self.model(input_embed, paged_kv_cache)), paged_kv_cache

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
            dtype="float32",
            target=Target(self.target),
        )


def llama(layers: int = 2, param_mode: ParamMode = "packed", target: str = "llvm", hidden: int = 64):
    """(module, spec) of the MLC-style Llama for ``frontends.nn.from_nn`` or the CLI's
    ``FILE.py:factory``: ``embed``, ``prefill``, ``decode`` and ``create_paged_kv_cache``,
    parameters ``param_mode`` (MLC-LLM packs them into one tuple)."""
    model = LlamaForCausalLM(layers=layers, hidden=hidden, target=target)
    mode = {"param_mode": param_mode, "effect_mode": "none"}
    spec = {
        "embed": {"input_ids": nn.spec.Tensor(["seq_len"], "int32"), "$": mode},
        "prefill": {
            "input_embed": nn.spec.Tensor([1, "seq_len", hidden], "float32"),
            "paged_kv_cache": nn.spec.Object(object_type=PagedKVCache),
            "$": mode,
        },
        "decode": {
            "input_embed": nn.spec.Tensor([1, 1, hidden], "float32"),
            "paged_kv_cache": nn.spec.Object(object_type=PagedKVCache),
            "$": mode,
        },
        "create_paged_kv_cache": {
            "max_batch_size": int,
            "max_total_seq_len": int,
            "prefill_chunk_size": int,
            "page_size": int,
            "support_sliding_window": int,
            "$": {"param_mode": "none", "effect_mode": "none"},
        },
    }
    return model, spec
