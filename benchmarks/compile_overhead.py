"""Traced / plain compile time, measured side by side (interleaved runs, median).

Prints one line per model: bindings, plain and traced medians (and minimums), the
ratio of medians and the extra time it stands for. Each run starts after a full
garbage collection, so that one side does not pay for garbage the other left.
Target: ratio <= 1.05, cost linear in bindings x passes.
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
from relaytrace.digest import native_status
from relaytrace.relax_models import deep_chain, resnet_style


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
    bindings = _bindings(mod)
    print(f"{name:<24} bindings={bindings:>5}  plain={p:6.3f}s (min {min(plain):6.3f})  "
          f"traced={t:6.3f}s (min {min(traced):6.3f})  ratio={t / p:.3f}  extra={(t - p) * 1e3:4.0f}ms",
          flush=True)
    return t / p


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--deep", type=int, default=2000, help="bindings of the generated deep model")
    args = parser.parse_args(argv)
    print(f"IR reader: {native_status()}  (RELAYTRACE_NATIVE=0 measures the Python one)", flush=True)
    measure("resnet_style(blocks=3)", resnet_style(blocks=3), args.runs)
    measure(f"deep_chain({args.deep})", deep_chain(args.deep), args.runs)
    measure(f"deep_chain({args.deep // 2})", deep_chain(args.deep // 2), args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
