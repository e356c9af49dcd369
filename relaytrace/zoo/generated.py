"""Seeded random torch models from the layers TVM users meet, for finding attribution bugs.

``generate(seed)`` returns ``(module, example)``; the same seed gives the same model
and weights. A model is an image stage (conv, depthwise, grouped and transposed
conv, batchnorm, channels-first LayerNorm written out, nn.LayerNorm after a permute,
GELU / SiLU / ReLU6 / sigmoid gating, residual adds, split + concat, pooling, a
module called twice), optionally followed by a token stage (flatten + transpose,
causal self-attention, an MLP), and a linear head or none (the feature map is the
output, as in dense prediction). Module names say what a layer
is (``b3_dwconv``), so a lineage reads against the model at a glance.

About a third of the seeds (``token_model(seed)``, drawn from a stream of their own, so
every other seed makes the image model it made before token models existed) make a
token model instead (``generate_tokens``): integer ``input_ids`` of shape (1, T), token
and learned position embeddings or rotary ones, 1-2 transformer blocks written the way
Hugging Face ``transformers`` writes them (eval-mode Dropout, RMSNorm's ``.to(float32)``,
``contiguous()``, additive masks from the dtype's min, grouped-query attention, gated
MLPs, residual adds in the block's forward), a final norm and an LM head, sometimes
tied to the embedding. ``TOKEN_KINDS`` lists what is drawn.

``tests/generated_check.check(seed)`` builds a model every way and checks its layers by
evidence of their own.
"""

from __future__ import annotations

import math
import random

from ..errors import require

IMAGE_BLOCKS = (
    "conv",
    "dwconv",
    "grouped",
    "deconv",
    "ln2d",
    "ln_permute",
    "gate",
    "residual",
    "split_cat",
    "pool",
    "twice",
)


# A token model draws one value of each of these per model, from the seed's RNG.
TOKEN_KINDS = {
    # LLaMA's rotary embedding; GPT-2's wte + wpe then dropout; BERT's, with a LayerNorm before the dropout
    "position": ("rope", "learned", "learned_norm"),
    "norm": ("layernorm", "rmsnorm"),
    "placement": ("pre", "post"),  # pre-norm decoder with a final norm; post-norm encoder (BERT)
    "mlp": ("gelu", "gelu_tanh", "gated_silu", "gated_gelu"),
    "mask": ("triu", "masked_fill", "where", "padding"),  # causal masks, or BERT's padding mask
    "attention": ("eager", "sdpa"),
    "kv": ("mha", "gqa"),
    "qkv": ("split", "fused"),
    "lm_head": ("tied", "untied"),
}


def token_model(seed: int) -> bool:
    """Whether generated model ``seed`` is a token model (a transformer on ``input_ids``),
    drawn from a stream of its own so that the image models keep the seeds they had."""
    return random.Random(f"token model:{seed}").random() < 0.35


def generate(seed: int):
    """(torch module in eval mode, example input) of generated model ``seed``: a token
    model (example ``input_ids`` of shape (1, T)) or an image model (an image)."""
    if token_model(seed):
        return generate_tokens(seed)
    require("torch", "torch")  # a missing torch said as such, before the import below
    import torch
    from torch import nn

    rng = random.Random(seed)
    torch.manual_seed(seed)

    class LayerNorm2d(nn.Module):
        """Channels-first LayerNorm written out, as ConvNeXt does."""

        def __init__(self, c):
            super().__init__()
            self.weight = nn.Parameter(1 + 0.1 * torch.randn(c))
            self.bias = nn.Parameter(0.1 * torch.randn(c))

        def forward(self, x):
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            return self.weight[:, None, None] * ((x - u) / torch.sqrt(s + 1e-6)) + self.bias[:, None, None]

    class PermuteNorm(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm = nn.LayerNorm(c)

        def forward(self, x):
            return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class Gate(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.proj = nn.Conv2d(c, c, 1)

        def forward(self, x):
            return x * torch.sigmoid(self.proj(x))

    class Residual(nn.Module):
        def __init__(self, c, act):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, padding=1)
            self.act = act

        def forward(self, x):
            return x + self.act(self.conv(x))

    class SplitCat(nn.Module):
        def __init__(self, c, act):
            super().__init__()
            self.first = c // 2
            self.conv = nn.Conv2d(c - self.first, c - self.first, 1)
            self.act = act

        def forward(self, x):
            a, b = x.split([self.first, x.shape[1] - self.first], dim=1)
            return torch.cat([self.act(a), self.conv(b)], dim=1)

    class Twice(nn.Module):
        """One module called twice: two call sites, one set of weights."""

        def __init__(self, c, act):
            super().__init__()
            self.shared = nn.Conv2d(c, c, 1)
            self.act = act

        def forward(self, x):
            return self.shared(self.act(self.shared(x)))

    class Attention(nn.Module):
        mask: torch.Tensor  # a buffer

        def __init__(self, d, heads, tokens):
            super().__init__()
            self.heads = heads
            self.norm = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.register_buffer("mask", torch.tril(torch.ones(tokens, tokens)).view(1, 1, tokens, tokens))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.norm(x)).split(d, dim=2)
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
            att = torch.softmax(att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            return x + self.proj(y)

    class Mlp(nn.Module):
        def __init__(self, d, act):
            super().__init__()
            self.fc1 = nn.Linear(d, 2 * d)
            self.act = act
            self.fc2 = nn.Linear(2 * d, d)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(x)))

    def activation():
        return rng.choice([nn.ReLU(), nn.GELU(), nn.SiLU(), nn.ReLU6(), nn.Sigmoid()])

    class Generated(nn.Module):
        def __init__(self):
            super().__init__()
            c, size = rng.choice([8, 16]), size_in
            self.stem = nn.Conv2d(3, c, 3, padding=1)
            self.blocks = nn.ModuleDict()
            for i in range(rng.randint(3, 7)):
                kind = rng.choice(IMAGE_BLOCKS)
                if kind == "pool" and size < 4 or kind == "deconv" and size > 16:
                    kind = "conv"
                layer: nn.Module
                if kind == "conv":
                    out = rng.choice([c, 2 * c])
                    layer = nn.Sequential(nn.Conv2d(c, out, 3, padding=1), nn.BatchNorm2d(out), activation())
                    c = out
                elif kind == "dwconv":
                    layer = nn.Conv2d(c, c, 3, padding=1, groups=c)
                elif kind == "grouped":
                    layer = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=2), activation())
                elif kind == "deconv":
                    layer = nn.ConvTranspose2d(c, c, 2, stride=2)
                    size *= 2
                elif kind == "ln2d":
                    layer = LayerNorm2d(c)
                elif kind == "ln_permute":
                    layer = PermuteNorm(c)
                elif kind == "gate":
                    layer = Gate(c)
                elif kind == "residual":
                    layer = Residual(c, activation())
                elif kind == "split_cat":
                    layer = SplitCat(c, activation())
                elif kind == "pool":
                    layer = rng.choice([nn.MaxPool2d(2), nn.AvgPool2d(2)])
                    size //= 2
                else:
                    layer = Twice(c, activation())
                self.blocks[f"b{i}_{kind}"] = layer
            self.tokens = None
            if rng.random() < 0.5:
                t = size * size
                stage: list[nn.Module] = [Attention(c, rng.choice([1, 2]), t)]
                if rng.random() < 0.5:
                    stage.append(Mlp(c, activation()))
                self.tokens = nn.Sequential(*stage)
            self.head = nn.Linear(c, 10)
            self.input_shape = (1, 3, size_in, size_in)
            self.dense = rng.random() < 0.25  # a dense prediction: the feature map is the output

        def forward(self, x):
            x = self.stem(x)
            for layer in self.blocks.values():
                x = layer(x)
            if self.tokens is not None:
                x = self.tokens(x.flatten(2).transpose(1, 2))
                return x if self.dense else self.head(x.mean(1))
            return x if self.dense else self.head(x.mean([2, 3]))

    size_in = rng.choice([8, 16])
    module = Generated()
    for m in module.modules():  # batchnorm statistics that make a difference
        if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None and m.running_var is not None:
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    example = torch.randn(*module.input_shape, generator=torch.Generator().manual_seed(seed))
    return module.eval(), example


def generate_tokens(seed: int, blocks: int | None = None, **override):
    """(torch module in eval mode, example ``input_ids``) of token model ``seed``: 1-2
    transformer blocks written as Hugging Face ``transformers`` writes them (eval-mode
    dropout, ``.to()`` that computes nothing, ``contiguous()``, masks from the dtype's
    min, rotary embeddings, grouped-query attention), a final norm and an LM head.
    ``override`` sets kinds (``mask="triu"``) and ``blocks`` the number of blocks, for
    narrowing a failure down; the rest is drawn as for the seed."""
    require("torch", "torch")  # a missing torch said as such, before the import below
    import torch
    from torch import nn

    F = nn.functional
    rng = random.Random(seed)
    torch.manual_seed(seed)
    kinds = {axis: rng.choice(values) for axis, values in TOKEN_KINDS.items()}
    if set(override) - set(TOKEN_KINDS) or any(v not in TOKEN_KINDS[k] for k, v in override.items()):
        raise ValueError(f"unknown kinds {override}; they are {TOKEN_KINDS}")
    kinds.update(override)
    d = rng.choice([32, 48, 64])
    heads = rng.choice([2, 4])
    kv_heads = heads // 2 if kinds["kv"] == "gqa" else heads
    head_dim = d // heads
    vocab = rng.choice([64, 96, 128])
    tokens = rng.choice([8, 12, 16])
    p = 0.1  # eval mode: every dropout computes nothing

    class RMSNorm(nn.Module):
        """LlamaRMSNorm: in float32, back to the input's dtype before the weight."""

        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    def norm(dim):
        if kinds["norm"] == "rmsnorm":
            return RMSNorm(dim)
        layer = nn.LayerNorm(dim)
        with torch.no_grad():
            layer.weight.add_(0.1 * torch.randn(dim))
            layer.bias.add_(0.1 * torch.randn(dim))
        return layer

    norm_name = "rmsnorm" if kinds["norm"] == "rmsnorm" else "layernorm"

    class RotaryEmbedding(nn.Module):
        """LlamaRotaryEmbedding: cos / sin of position ids times an inv_freq buffer."""

        inv_freq: torch.Tensor  # a buffer

        def __init__(self, dim, base=10000.0):
            super().__init__()
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, x, position_ids):
            inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            position_ids_expanded = position_ids[:, None, :].float()
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)

    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)

    def repeat_kv(hidden_states, n_rep):
        batch, num_key_value_heads, slen, dim = hidden_states.shape
        if n_rep == 1:
            return hidden_states
        hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, dim)
        return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, dim)

    class SelfAttention(nn.Module):
        bias: torch.Tensor  # a buffer (GPT-2's causal mask), where one is made

        def __init__(self):
            super().__init__()
            bias = kinds["position"] != "rope"  # LLaMA's projections have no bias
            if kinds["qkv"] == "fused":
                self.qkv_proj = nn.Linear(d, (heads + 2 * kv_heads) * head_dim, bias=bias)
            else:
                self.q_proj = nn.Linear(d, heads * head_dim, bias=bias)
                self.k_proj = nn.Linear(d, kv_heads * head_dim, bias=bias)
                self.v_proj = nn.Linear(d, kv_heads * head_dim, bias=bias)
            self.o_proj = nn.Linear(heads * head_dim, d, bias=bias)
            self.attn_dropout = nn.Dropout(p)
            self.scaling = head_dim**-0.5
            if kinds["mask"] == "where" and kinds["attention"] == "eager":  # GPT-2's causal buffer
                self.register_buffer(
                    "bias",
                    torch.tril(torch.ones(tokens, tokens, dtype=torch.bool)).view(1, 1, tokens, tokens),
                    persistent=False,
                )

        def forward(self, hidden_states, attention_mask, position_embeddings):
            b, t, _ = hidden_states.shape
            if kinds["qkv"] == "fused":
                q, k, v = self.qkv_proj(hidden_states).split(
                    [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=2
                )
            else:
                q, k, v = self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)
            q = q.view(b, t, -1, head_dim).transpose(1, 2)
            k = k.view(b, t, -1, head_dim).transpose(1, 2)
            v = v.view(b, t, -1, head_dim).transpose(1, 2)
            if position_embeddings is not None:
                q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
            k, v = repeat_kv(k, heads // kv_heads), repeat_kv(v, heads // kv_heads)
            if kinds["attention"] == "sdpa":
                out = F.scaled_dot_product_attention(
                    q.contiguous(),
                    k.contiguous(),
                    v.contiguous(),
                    attn_mask=attention_mask,
                    dropout_p=0.0,
                    scale=self.scaling,
                )
            else:
                weights = torch.matmul(q, k.transpose(2, 3)) * self.scaling
                if attention_mask is not None:
                    weights = weights + attention_mask
                else:  # GPT-2: where(causal buffer, weights, the dtype's min)
                    mask_value = torch.full([], torch.finfo(weights.dtype).min, dtype=weights.dtype)
                    weights = torch.where(self.bias[:, :, :t, :t], weights, mask_value)
                weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
                weights = self.attn_dropout(weights)
                out = torch.matmul(weights, v)
            out = out.transpose(1, 2).contiguous().reshape(b, t, -1)
            return self.o_proj(out)

    class Mlp(nn.Module):
        """GPT-2 / BERT: fc_out(act(fc_in(x)))."""

        def __init__(self, act):
            super().__init__()
            self.fc_in = nn.Linear(d, 2 * d)
            self.act = act
            self.fc_out = nn.Linear(2 * d, d)

        def forward(self, x):
            return self.fc_out(self.act(self.fc_in(x)))

    class GatedMlp(nn.Module):
        """LLaMA: down_proj(act(gate_proj(x)) * up_proj(x))."""

        def __init__(self, act):
            super().__init__()
            self.gate_proj = nn.Linear(d, 2 * d, bias=False)
            self.up_proj = nn.Linear(d, 2 * d, bias=False)
            self.down_proj = nn.Linear(2 * d, d, bias=False)
            self.act = act

        def forward(self, x):
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))

    def mlp():
        kind = kinds["mlp"]
        act = nn.SiLU() if kind == "gated_silu" else nn.GELU(approximate="tanh" if kind == "gelu_tanh" else "none")
        return GatedMlp(act) if kind.startswith("gated") else Mlp(act)

    class Block(nn.Module):
        """One transformer block; its residual adds are written here."""

        def __init__(self):
            super().__init__()
            first, second = ("input", "post_attention") if kinds["placement"] == "pre" else ("attention", "output")
            setattr(self, f"{first}_{norm_name}", norm(d))
            self.self_attn = SelfAttention()
            self.resid_dropout = nn.Dropout(p)
            setattr(self, f"{second}_{norm_name}", norm(d))
            self.mlp = mlp()
            self.mlp_dropout = nn.Dropout(p)
            self.norms = (f"{first}_{norm_name}", f"{second}_{norm_name}")

        def forward(self, hidden_states, attention_mask, position_embeddings):
            norm1, norm2 = (getattr(self, name) for name in self.norms)
            if kinds["placement"] == "pre":
                residual = hidden_states
                hidden_states = self.self_attn(norm1(hidden_states), attention_mask, position_embeddings)
                hidden_states = residual + self.resid_dropout(hidden_states)
                residual = hidden_states
                hidden_states = self.mlp(norm2(hidden_states))
                return residual + self.mlp_dropout(hidden_states)
            attended = self.self_attn(hidden_states, attention_mask, position_embeddings)
            hidden_states = norm1(hidden_states + self.resid_dropout(attended))
            return norm2(hidden_states + self.mlp_dropout(self.mlp(hidden_states)))

    class GeneratedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, d)
            if kinds["position"] == "rope":
                self.rotary_emb = RotaryEmbedding(head_dim)
            else:
                self.embed_positions = nn.Embedding(tokens, d)
                if kinds["position"] == "learned_norm":
                    self.embed_layernorm = nn.LayerNorm(d)
            self.embed_dropout = nn.Dropout(p)
            count = rng.randint(1, 2)
            # a ModuleList called ``layers``, as transformers has it: torch.onnx names a
            # ModuleDict's children without the dict's own name, a ModuleList's as layers.0
            self.layers = nn.ModuleList(Block() for _ in range(blocks or count))
            if kinds["placement"] == "pre":
                setattr(self, f"final_{norm_name}", norm(d))
            self.lm_head = nn.Linear(d, vocab, bias=False)
            if kinds["lm_head"] == "tied":
                self.lm_head.weight = self.embed_tokens.weight
            self.kinds = dict(kinds)

        def forward(self, input_ids):
            b, t = input_ids.shape
            position_ids = torch.arange(t, device=input_ids.device).unsqueeze(0)
            hidden_states = self.embed_tokens(input_ids)
            position_embeddings = None
            if kinds["position"] == "rope":
                position_embeddings = self.rotary_emb(hidden_states, position_ids)
            else:
                hidden_states = hidden_states + self.embed_positions(position_ids)
                if kinds["position"] == "learned_norm":
                    hidden_states = self.embed_layernorm(hidden_states)
            hidden_states = self.embed_dropout(hidden_states)
            dtype = hidden_states.dtype
            min_value = torch.finfo(dtype).min
            attention_mask = None
            if kinds["mask"] == "triu":
                attention_mask = torch.triu(torch.full((t, t), min_value, dtype=dtype), diagonal=1)[None, None]
            elif kinds["mask"] == "masked_fill":  # LLaMA's _make_causal_mask
                mask = torch.full((t, t), min_value, dtype=dtype)
                mask_cond = torch.arange(mask.size(-1))
                mask = mask.masked_fill(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
                attention_mask = mask[None, None, :, :].expand(b, 1, t, t)
            elif kinds["mask"] == "where" and kinds["attention"] == "sdpa":
                above = torch.arange(t)[None, :] > torch.arange(t)[:, None]
                attention_mask = torch.where(
                    above, torch.full((), min_value, dtype=dtype), torch.zeros((), dtype=dtype)
                )[None, None]
            elif kinds["mask"] == "padding":  # BERT's extended attention mask of an all-ones mask
                ones = torch.ones_like(input_ids)
                attention_mask = (1.0 - ones[:, None, None, :].to(dtype)) * min_value
            for decoder_layer in self.layers:
                hidden_states = decoder_layer(hidden_states, attention_mask, position_embeddings)
            if kinds["placement"] == "pre":
                hidden_states = getattr(self, f"final_{norm_name}")(hidden_states)
            return self.lm_head(hidden_states)

    module = GeneratedLM()
    example = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(seed))
    return module.eval(), example
