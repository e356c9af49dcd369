"""What serving an LLM step through relaytrace's KV cache costs, measured side by side in
one run on the MLC-style Llama (``zoo.mlc_llama``), built once for llvm.

Prints, for a prefill (``--tokens``) and a decode step (after ``--context``):
- wrapped / plain: the median step with the cache made by relaytrace (each of its kernels
  in a Python wrapper, not timing) against the cache the build's own create entry makes
  (target: <= 1.05 for the decode of a model this small, where it shows most);
- the KV-cache kernels' share of the timeline's recorded time, and the recorded calls'
  sum against the step's end-to-end median (what the timer's stamps add).
"""

from __future__ import annotations

import argparse
import statistics
import time

import tvm
from tvm import relax

import relaytrace
from relaytrace.frontends.nn import from_nn
from relaytrace.model.profile import CACHE
from relaytrace.profiling.serve import Server, Serving, served_spec
from relaytrace.zoo.mlc_llama import llama


def _median_step(step, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)

    executable, lineage = relaytrace.build(from_nn(*llama(layers=args.layers), name="llama"), "llvm")
    device = tvm.cpu()
    for entry, serving in (("prefill", Serving(tokens=args.tokens)), ("decode", Serving(context=args.context))):
        vm = relax.VirtualMachine(executable, device)
        spec = served_spec(lineage, entry, serving)
        wrapped, plain = Server(vm, device, spec), Server(vm, device, spec, timed=False)
        ratios = []
        for _ in range(3):  # interleaved, so a change in the machine's load moves both
            a, b = _median_step(wrapped.step, args.runs), _median_step(plain.step, args.runs)
            ratios.append(a / b)
        prof = relaytrace.profile(executable, lineage, [], entry=entry, serving=serving, repeat=5)
        cache_us = sum(prof.by_site(CACHE).values())
        print(
            f"{entry} ({wrapped.tokens} token(s) after {wrapped.context}): wrapped / plain cache "
            f"{statistics.median(ratios):.3f} (runs {', '.join(f'{r:.3f}' for r in ratios)}); KV-cache kernels "
            f"{cache_us:.1f} us = {100 * cache_us / (prof.kernel_us + prof.builtin_us):.1f}% of recorded time; "
            f"recorded / end-to-end {(prof.kernel_us + prof.builtin_us) / prof.e2e_median_us:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
