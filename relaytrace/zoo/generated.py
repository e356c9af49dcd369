"""Seeded random torch models from the layers TVM users meet, for finding attribution bugs.

``generate(seed)`` returns ``(module, example)``; the same seed gives the same model
and weights. A model is an image stage (conv, depthwise, grouped and transposed
conv, batchnorm, channels-first LayerNorm written out, nn.LayerNorm after a permute,
GELU / SiLU / ReLU6 / sigmoid gating, residual adds, split + concat, pooling, a
module called twice), optionally followed by a token stage (flatten + transpose,
causal self-attention, an MLP), and a linear head or none (the feature map is the
output, as in dense prediction). Module names say what a layer
is (``b3_dwconv``), so a lineage reads against the model at a glance.
"""

from __future__ import annotations

import math
import random

from attrs import define

from ..frontends.common import require

IMAGE_BLOCKS = ("conv", "dwconv", "grouped", "deconv", "ln2d", "ln_permute", "gate", "residual",
                "split_cat", "pool", "twice")


def generate(seed: int):
    """(torch module in eval mode, example input) of generated model ``seed``."""
    torch = require("torch", "torch")
    nn = torch.nn
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
            self.half = c // 2
            self.conv = nn.Conv2d(c - self.half, c - self.half, 1)
            self.act = act

        def forward(self, x):
            a, b = x.split([self.half, x.shape[1] - self.half], dim=1)
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
                stage = [Attention(c, rng.choice([1, 2]), t)]
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
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    example = torch.randn(*module.input_shape, generator=torch.Generator().manual_seed(seed))
    return module.eval(), example


NHWC = {"relax.nn.conv2d": ["NHWC", "OHWI"]}
PIPELINES = {"unfused": ("unfused", None), "fused": ("fused", None), "nhwc": ("fused", NHWC)}


@define(frozen=True)
class BuildCheck:
    """One generated model built one way, run and verified."""

    seed: int
    frontend: str  # torch | onnx
    pipeline: str  # unfused | fused | nhwc
    sites: int
    verified: int
    suspect: tuple[str, ...]  # "site: reason"
    unverified: tuple[str, ...]
    problems: tuple[str, ...]  # broken invariants, wrong outputs, unstable ids
    seconds: float
    skipped: str = ""  # why there is no build: TVM itself cannot build this model this way

    @property
    def ok(self) -> bool:
        return not (self.suspect or self.unverified or self.problems)


def check(seed: int, frontends=("torch", "onnx"), pipelines=tuple(PIPELINES), workdir=None) -> list[BuildCheck]:
    """Build generated model ``seed`` through each frontend and pipeline; each build's
    outputs must equal torch's, every call site must verify, and the model's origin
    ids must be the same in every pipeline of a frontend."""
    import tempfile
    import time
    from pathlib import Path

    import numpy as np
    import tvm
    from tvm import relax

    from ..build import build
    from ..frontends.onnx import export_torch_to_onnx, from_onnx
    from ..frontends.torch import from_torch

    module, example = generate(seed)
    expected = module(example).detach().numpy()
    out = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for frontend in frontends:
            if frontend == "torch":
                model = from_torch(module, (example,), name=f"generated{seed}")
            else:
                path = export_torch_to_onnx(module, (example,), str(Path(tmp) / f"generated{seed}.onnx"))
                model = from_onnx(path, name=f"generated{seed}")
            ids = None
            for name in pipelines:
                start = time.perf_counter()
                pipeline, layout = PIPELINES[name]
                try:
                    executable, lineage = build(model, "llvm", pipeline=pipeline, convert_layout=layout)
                except Exception as exc:
                    out.append(_failed_build(seed, frontend, name, model, exc, time.perf_counter() - start))
                    continue
                vm = relax.VirtualMachine(executable, tvm.cpu())
                got = vm["main"](tvm.runtime.tensor(example.numpy()))
                got = (got if hasattr(got, "numpy") else got[0]).numpy()  # from_torch returns a tuple
                problems = list(lineage.verification.problems) + list(lineage.degraded)
                if not np.allclose(got, expected, rtol=1e-3, atol=1e-4):
                    problems.append(f"output differs from torch's by {np.abs(got - expected).max():.3g}")
                op_ids = sorted(o.id for o in lineage.origins.values() if o.kind == "op")
                if ids is not None and op_ids != ids:
                    problems.append(f"origin ids differ from the {pipelines[0]} build's: "
                                    f"{sorted(set(op_ids) ^ set(ids))[:4]}")
                ids = ids if ids is not None else op_ids
                labels = {s.position: s.label for s in lineage.call_sites}
                verdicts = lineage.verification.sites
                out.append(BuildCheck(
                    seed, frontend, name, len(verdicts), sum(1 for v in verdicts if v.status == "verified"),
                    tuple(f"{labels[v.position]}: {'; '.join(v.reasons)}" for v in verdicts if v.status == "suspect"),
                    tuple(f"{labels[v.position]}: {'; '.join(v.reasons)}" for v in verdicts
                          if v.status == "unverified"),
                    tuple(problems), time.perf_counter() - start))
    return out


def _failed_build(seed, frontend, name, model, exc, seconds) -> BuildCheck:
    """A traced build that raised: skipped when plain ``tvm.compile`` fails alike (a TVM
    limit), a problem when it does not (tracing must never break a build)."""
    import tvm

    from ..build import build_pipeline

    pipeline, layout = PIPELINES[name]
    target = tvm.target.Target("llvm")
    try:
        tvm.compile(model.mod, target, relax_pipeline=build_pipeline(pipeline, target, layout))
    except Exception as plain:
        return BuildCheck(seed, frontend, name, 0, 0, (), (), (), seconds,
                          skipped=f"TVM cannot build it: {str(plain).strip().splitlines()[0][:120]}")
    return BuildCheck(seed, frontend, name, 0, 0, (), (), (f"traced build failed, plain build did not: {exc}",),
                      seconds)
