"""``profile --inside`` checked against evidence it does not compute: each op of a fused
conv + bias add + ReLU + residual add timed inside its kernel (the instrumented copy),
beside the same op built and timed alone at the same shapes (the ``unfused`` pipeline:
one kernel per op) and beside the share the ``split`` policy models; and what the
stamps cost: each instrumented call's time against the plain build's.

    .venv/bin/python benchmarks/inside_check.py [--repeat 10]

Run it on a quiet machine; the figures go into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import attrs
import tvm

from relaytrace.analysis.report import make_report
from relaytrace.build import build, build_pipeline
from relaytrace.frontends.loader import load
from relaytrace.model.origin import OP
from relaytrace.profiling.inside import InsideRun, measure_inside
from relaytrace.profiling.vm import profile

MODEL = str(Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "residual_block.py") + ":make_large"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()
    loaded = load(MODEL)
    x = loaded.inputs
    fused_exe, fused = build(loaded.model, "llvm")
    plain = profile(fused_exe, fused, list(x), repeat=args.repeat)
    pipeline = build_pipeline("fused", tvm.target.Target("llvm"))
    how = InsideRun(tuple(x), None, args.repeat)
    inside = measure_inside(loaded.model.mod, pipeline, fused, plain.entry, how, lambda m: None)
    measured = attrs.evolve(plain, inside=inside)
    report = make_report(fused, measured, "measured")
    alone_exe, alone = build(loaded.model, "llvm", "unfused")
    alone_times = profile(alone_exe, alone, list(x), repeat=args.repeat).by_site()
    by_origin = {}  # an op built alone: its kernel's median, by the origin it computes
    for site in alone.call_sites:
        ops = [o for o in site.origin_ids if alone.origins[o].kind == OP]
        if len(ops) == 1 and site.key in alone_times:
            by_origin[ops[0]] = by_origin.get(ops[0], 0.0) + alone_times[site.key]
    times = plain.by_site()
    print(f"{MODEL.rsplit('/', 1)[-1]} (64 channels, 56x56), llvm, {args.repeat} runs each")
    print(
        f"{'site':32} {'op':8} {'layer':8} {'inside us':>10} {'alone us':>10} {'ratio':>6} {'meas %':>7} {'split %':>8}"
    )
    for row in (r for r in report.inside if r.ops):
        alone_us = sum(by_origin.get(o, 0.0) for o in row.origins)
        ratio = row.us / alone_us if alone_us else float("nan")
        print(
            f"{row.site:32} {' '.join(row.ops):8} {' '.join(row.layers):8} {row.us:10.1f} {alone_us:10.1f} "
            f"{ratio:10.2f} {row.measured_percent:10.2f} {row.modelled_percent:10.2f}"
        )
    for s in inside:
        key = next(k for k in times if k.kernel == s.kernel and k.call == s.call)
        print(
            f"{s.kernel}#{s.call}: plain {times[key]:.1f} us, instrumented {s.median_us:.1f} us "
            f"({100 * (s.median_us / times[key] - 1):+.2f}%); the plain call's runs spread over "
            f"{100 * (plain.site_times()[key].max_us - plain.site_times()[key].min_us) / times[key]:.2f}% of it"
        )


if __name__ == "__main__":
    main()
