"""One table of relaytrace's figures for every zoo model, measured in one run, for a
user to quote (issue 57, item 4):

- **compile**: traced / plain build time, wall and CPU (the process's, both threads:
  what tracing costs when no core is free), median of ``--runs`` paired runs
  (``compile_overhead.measure``);
- **profile**: the timed runs' wall time (each kernel call stamped by the VM's
  instrument) over the untimed end-to-end runs of the same build (``Profile``'s
  ``timed_run_us`` / ``e2e_median_us``): what profiling adds to a run;
- **attributed** and **verified**: the share of kernel call sites the lineage gives
  layers, and the share confirmed by the compiled IR (``Lineage.coverage``).

    .venv/bin/python benchmarks/summary.py [--runs 3] [--repeat 5] [--image 224] [--only NAME ...]

The vision models of ``relaytrace.zoo.MODELS`` (torch, fused, llvm) and the MLC-style
Llama (``zoo.mlc_llama``, 4 blocks, its decode served at a context of 256). Each row
prints as it is measured; the table is printed again at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import relaytrace
from relaytrace import zoo

sys.path.insert(0, str(Path(__file__).parent))
from compile_overhead import measure  # noqa: E402  (the paired traced / plain builds)

LLAMA = "mlc_llama4 decode"


def _vision(name: str, image: int):
    from relaytrace.frontends.torch import from_torch

    module, example = zoo.get(name, image=image)
    return from_torch(module, (example,), name=name), [example.numpy()], {}


def _llama():
    from relaytrace.frontends.nn import from_nn
    from relaytrace.profiling.serve import Serving
    from relaytrace.zoo.mlc_llama import llama

    return from_nn(*llama(layers=4), name="mlc_llama4"), [], {"entry": "decode", "serving": Serving(context=256)}


def row(name: str, model, inputs, options: dict, runs: int, repeat: int) -> tuple:
    """(name, compile wall ratio, compile CPU ratio, profile ratio, attributed %, verified %)."""
    got = measure(name, model, runs)
    wall, cpu = got.wall, got.cpu
    executable, lineage = relaytrace.build(model, "llvm")
    profile = relaytrace.profile(executable, lineage, inputs, repeat=repeat, **options)
    timed = profile.timed_run_us / profile.e2e_median_us if profile.e2e_median_us else float("nan")
    coverage = lineage.coverage()
    verified = coverage.verified_sites / coverage.call_sites if coverage.call_sites else 1.0
    return name, wall, cpu, timed, 100 * coverage.site_fraction, 100 * verified


def table(rows) -> str:
    """The rows as a Markdown table (docs/benchmarks.md takes it as it is)."""
    lines = [
        "| model | compile wall | compile CPU | profiled run / untimed | sites attributed | sites verified |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {n} | {w:.3f} | {c:.3f} | {t:.3f} | {a:.1f} % | {v:.1f} % |" for n, w, c, t, a, v in rows]
    if rows:
        medians = [statistics.median(r[i] for r in rows) for i in (1, 2, 3)]
        lines.append(f"| median | {medians[0]:.3f} | {medians[1]:.3f} | {medians[2]:.3f} | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="paired traced / plain builds per model")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each profile")
    parser.add_argument("--image", type=int, default=224, help="the vision models' input size")
    parser.add_argument("--only", nargs="+", choices=(*zoo.MODELS, LLAMA), help="these models alone")
    args = parser.parse_args(argv)
    rows = []
    for name in args.only or (*zoo.MODELS, LLAMA):
        model, inputs, options = _llama() if name == LLAMA else _vision(name, args.image)
        rows.append(row(name, model, inputs, options, args.runs, args.repeat))
        print(table(rows[-1:]).splitlines()[2], flush=True)
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
