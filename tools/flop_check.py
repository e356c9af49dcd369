"""Each layer's useful FLOPs held to PyTorch's own count (``FlopCounterMode``) on models
relaytrace's tests do not check this way: a check a person runs, whose table goes in an
issue's note or docs/benchmarks.md.

For every module torch counts FLOPs in (its matmuls, convolutions and attention), the
useful FLOPs relaytrace gives that module's layers for the same ops (``matmul``,
``conv*``, ``linear``), all its calls summed; the ratio and the worst layer per model.
Bias adds are left out of both sides (torch does not count them). Usage:

    python tools/flop_check.py [MODEL ...]     # default: all of MODELS
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import relaytrace  # noqa: E402
from relaytrace import zoo  # noqa: E402
from relaytrace.analysis.roofline import site_work  # noqa: E402
from relaytrace.frontends.torch import from_torch  # noqa: E402
from relaytrace.model.layer_name import module_path  # noqa: E402
from tests.fixtures import hf_models  # noqa: E402

COUNTED = ("matmul", "conv1d", "conv2d", "conv2d_transpose", "conv3d", "linear", "dense")


class UNet(torch.nn.Module):
    """A small UNet-like block: a strided conv down, a grouped conv, a squeeze-excite, a
    ConvTranspose2d up and a skip."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.down = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.group = torch.nn.Conv2d(32, 32, 3, padding=1, groups=4)
        self.fc1 = torch.nn.Conv2d(32, 8, 1)
        self.fc2 = torch.nn.Conv2d(8, 32, 1)
        self.up = torch.nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.head = torch.nn.Conv2d(16, 4, 1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        y = torch.relu(self.group(torch.relu(self.down(s))))
        y = y * torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return self.head(self.up(y) + s)


def _zoo(name, image):
    return lambda: zoo.get(name, image=image)


MODELS = {
    "resnet18": _zoo("resnet18", 64),
    "mobilenet_v2": _zoo("mobilenet_v2", 64),
    "vgg16": _zoo("vgg16", 32),
    "unet": lambda: (UNet().eval(), torch.randn(1, 3, 32, 32)),
    **{name: make for name, make in hf_models.MODELS.items()},
    "mistral": hf_models.mistral,
}


def torch_counts(module, example) -> dict[str, float]:
    """FlopCounterMode's FLOPs of each module's own forward, by module path (the root's
    prefix dropped; torch's count of a module holds its children's, taken off here)."""
    with FlopCounterMode(display=False) as counter:
        module(example)
    root = type(module).__name__
    total = {
        name.removeprefix(root).removeprefix("."): float(sum(ops.values()))
        for name, ops in counter.get_flop_counts().items()
        if name != "Global"
    }
    own = dict(total)
    for path, flops in total.items():
        if path:  # its parent: the nearest enclosing module torch lists (a ModuleList runs no forward)
            parent = max((p for p in total if p == "" or path.startswith(p + ".")), key=len)
            own[parent] -= flops
    return own


def relaytrace_counts(module, example, name) -> dict[str, float]:
    """relaytrace's useful FLOPs of the counted ops, per module path."""
    executable, lineage = relaytrace.build(from_torch(module, (example,), name=name), "llvm", pipeline="fused")
    profile = relaytrace.profile(executable, lineage, [example.numpy()], repeat=1, number=1)
    out: dict[str, float] = {}
    for _, ops in site_work(lineage, profile, None).values():
        for op in ops:
            origin = lineage.origins[op.origin]
            if origin.short_op in COUNTED and op.useful:
                path = module_path(origin.layer)
                out[path] = out.get(path, 0.0) + op.useful
    return out


def check(name: str) -> tuple[int, int, float, str]:
    """(layers compared, layers within 2 %, worst ratio, worst layer) of one model."""
    module, example = MODELS[name]()
    theirs = torch_counts(module, example)
    ours = relaytrace_counts(module, example, name)
    compared, within, worst, worst_layer = 0, 0, 1.0, ""
    for path, flops in sorted(ours.items()):
        if path not in theirs or not theirs[path]:
            print(f"  {name}: layer {path} counts {flops:,.0f} FLOPs; torch counts none there")
            continue
        ratio = flops / theirs[path]
        compared += 1
        within += abs(ratio - 1) <= 0.02
        if abs(ratio - 1) >= abs(worst - 1):
            worst, worst_layer = ratio, path
    missing = sorted(p for p, f in theirs.items() if f > 0 and p and p not in ours)
    for path in missing:
        print(f"  {name}: torch counts {theirs[path]:,.0f} FLOPs in {path}; relaytrace none")
    return compared, within, worst, worst_layer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"of: {', '.join(MODELS)}")
    args = parser.parse_args(argv)
    print(f"{'model':<14}{'layers':>8}{'within 2%':>11}{'worst ratio':>13}  worst layer")
    bad = 0
    for name in args.models or MODELS:
        compared, within, worst, layer = check(name)
        bad += compared - within
        print(f"{name:<14}{compared:>8}{within:>11}{worst:>13.4f}  {layer}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
