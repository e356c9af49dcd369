"""Traced / plain compile time, measured side by side (interleaved runs, median).

Each run builds the model plainly and traced, back to back (the order alternating),
and takes the ratio of the two; the ratio printed is the median of these per-run
ratios, with their interquartile range. Pairing the two builds of a run cancels the
drift of this machine's speed over the minute a model takes (on a shared 2-core VM
it moves the plain build's median by several percent between invocations), which a
ratio of the two sides' medians does not. Also printed: bindings, the plain and
traced medians and the extra time. Each build starts after a full garbage
collection, so that one side does not pay for garbage the other left.
Targets: ratio <= 1.10 on deep_chain(2000), <= 1.03 on resnet_style and zoo resnet50;
cost linear in bindings x passes.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import tvm
from tvm import relax

import relaytrace
from relaytrace.relax_models import deep_chain, resnet_style


def _resnet50():
    from relaytrace import zoo
    from relaytrace.frontends.torch import from_torch

    module, example = zoo.get("resnet50")
    return from_torch(module, (example,), name="resnet50").mod


def _bindings(mod) -> int:
    return sum(len(b.bindings) for b in mod["main"].body.blocks)


def _plain(mod, target):
    with tvm.transform.PassContext(opt_level=3):
        tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))


def _traced(mod, target):
    relaytrace.build(mod, target, pipeline="fused")


def measure(name, mod, runs: int):
    target = tvm.target.Target("llvm")
    _plain(mod, target)  # warm caches on both sides
    _traced(mod, target)
    plain, traced = [], []
    for i in range(runs):
        order = (_plain, _traced) if i % 2 == 0 else (_traced, _plain)
        for fn in order:
            gc.collect()
            start = time.perf_counter()
            fn(mod, target)
            (plain if fn is _plain else traced).append(time.perf_counter() - start)
    p, t = statistics.median(plain), statistics.median(traced)
    ratios = sorted(b / a for a, b in zip(plain, traced))
    ratio = statistics.median(ratios)
    quartiles = statistics.quantiles(ratios, n=4)
    print(f"{name:<24} bindings={_bindings(mod):>5}  plain={p:6.3f}s  traced={t:6.3f}s  "
          f"ratio={ratio:.3f} (IQR {quartiles[0]:.3f}-{quartiles[2]:.3f})  extra={(t - p) * 1e3:4.0f}ms", flush=True)
    return ratio


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--deep", type=int, default=2000, help="bindings of the generated deep model")
    args = parser.parse_args(argv)
    measure("resnet_style(blocks=3)", resnet_style(blocks=3), args.runs)
    measure("zoo resnet50 (torch)", _resnet50(), args.runs)
    measure(f"deep_chain({args.deep})", deep_chain(args.deep), args.runs)
    measure(f"deep_chain({args.deep // 2})", deep_chain(args.deep // 2), args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
