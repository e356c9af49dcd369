"""Peak memory of ``relaytrace.compare`` against a plain run, side by side.

Each measurement is its own Python process (peak resident memory, ``ru_maxrss``, only
grows): build zoo ResNet-50 (224x224), then either run the build once and the torch
model once (``plain``), or ``compare`` them (``compare``). Printed: both peaks, what
compare adds, the bytes of every layer output it compares (what keeping them all
would cost) and the ratio of the two, which stays far below 1 when the comparison
streams. Run: python benchmarks/compare_memory.py [--model resnet50] [--image 224]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys
import numpy as np, torch, tvm
from tvm import relax
import relaytrace
from relaytrace import zoo
from relaytrace.analysis.comparison import compare
from relaytrace.frontends.torch import from_torch
from relaytrace.analysis.layer_outputs import layer_outputs

mode, name, image = sys.argv[1], sys.argv[2], int(sys.argv[3])
module, example = zoo.get(name, image=image)
executable, lineage = relaytrace.build(from_torch(module, (example,)), "llvm")
outputs = 0
if mode == "plain":
    vm = relax.VirtualMachine(executable, tvm.cpu())
    vm["main"](tvm.runtime.tensor(example.numpy()))
    with torch.no_grad():
        module(example)
else:
    result = compare(executable, lineage, module, [example.numpy()])
    outputs = sum(4 * int(np.prod(e.shape)) for e in result.layers if e.compared)
print(json.dumps({"peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "outputs_bytes": outputs}))
"""


def _measure(mode: str, model: str, image: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, model, str(image)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--image", type=int, default=224)
    args = parser.parse_args()
    plain = _measure("plain", args.model, args.image)
    streamed = _measure("compare", args.model, args.image)
    extra = (streamed["peak_kb"] - plain["peak_kb"]) * 1024
    outputs = streamed["outputs_bytes"]
    print(
        f"{args.model} {args.image}x{args.image}: peak {plain['peak_kb'] / 1024:.0f} MB plain (build, one VM run, "
        f"one torch run), {streamed['peak_kb'] / 1024:.0f} MB compare: +{extra / 2**20:.0f} MB"
    )
    print(
        f"layer outputs compared: {outputs / 2**20:.0f} MB in all; compare's extra peak / all outputs = "
        f"{extra / outputs:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
