"""Profiler fidelity on zoo resnet50 (fused), measured side by side in one run.

Prints:
- timeline sum of kernel time / end-to-end median  (target: within 5% of 1.0)
- instrumented run / plain run, interleaved medians (target: <= 1.05)
- isolated vs timeline per-kernel-site agreement: median and spread of the ratios
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import tvm
from tvm import relax

import relaytrace
from relaytrace.frontends.loader import load
from relaytrace.model.profile import KERNEL


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    executable, lineage = relaytrace.build(load(f"demo:{args.model}").model, "llvm")
    x = np.random.default_rng(0).standard_normal(lineage.inputs[0][1]).astype(lineage.inputs[0][2])
    timeline = relaytrace.profile(executable, lineage, [x], repeat=args.repeat)
    print(f"{args.model}: {timeline.summary()}")
    print(f"timeline kernel sum / end-to-end median: {timeline.kernel_us / timeline.e2e_median_us:.4f}")

    vm = relax.VirtualMachine(executable, tvm.cpu())
    data = tvm.runtime.tensor(x)
    stamps = []

    def stamp(func, name, before, ret, *a):
        stamps.append((time.perf_counter_ns(), name, before))
        return relax.VMInstrumentReturnKind.NO_OP

    def no_op(*a):
        return relax.VMInstrumentReturnKind.NO_OP

    plain, instrumented = [], []
    for i in range(args.repeat * 2):
        for fn, out in ((no_op, plain), (stamp, instrumented))[:: 1 if i % 2 == 0 else -1]:
            vm.set_instrument(fn)
            stamps.clear()
            start = time.perf_counter()
            vm["main"](data)
            out.append(time.perf_counter() - start)
    print(
        f"instrumented run / plain run (median of {len(plain)} interleaved): "
        f"{statistics.median(instrumented) / statistics.median(plain):.4f}"
    )

    isolated = relaytrace.profile(executable, lineage, [x], repeat=args.repeat, mode="isolated")
    t_sites, i_sites = timeline.by_site(KERNEL), isolated.by_site(KERNEL)
    ratios = sorted(i_sites[k] / t_sites[k] for k in t_sites if t_sites[k] > 50)
    q = lambda p: ratios[int(p * (len(ratios) - 1))]  # noqa: E731
    print(
        f"isolated / timeline per site (sites > 50 us, n={len(ratios)}): median {q(0.5):.3f}, "
        f"10%-90% {q(0.1):.3f}-{q(0.9):.3f}; totals {isolated.kernel_us / timeline.kernel_us:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
