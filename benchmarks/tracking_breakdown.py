"""Where the tracking time goes, pass by pass, without TVM's own work in the way.

Records the modules of one plain build, then replays them through a fresh
TraceSession several times and prints the fastest time of each stage: what the
instrument does during the build (record each pass's functions), then, as after a
traced build, origin assignment with the input walk, each pass the tracker follows,
and lineage extraction. Use it to see what a change to the tracker buys; use
compile_overhead.py for the ratio the target is about.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import tvm
from tvm import relax

from relaytrace.tracking.callsites import lineage_from
from relaytrace.tracking.recorder import TraceSession, gc_paused
from relaytrace.relax_models import deep_chain, resnet_style


def record(mod, target) -> list[tuple[bool, object, str]]:
    """(after?, module, pass name) for every instrument call of a plain build."""
    calls: list[tuple[bool, object, str]] = []

    @tvm.ir.instrument.pass_instrument
    class Recorder:
        def run_before_pass(self, mod, info):
            calls.append((False, mod, info.name))

        def run_after_pass(self, mod, info):
            calls.append((True, mod, info.name))

    with tvm.transform.PassContext(opt_level=3, instruments=[Recorder()]):
        tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
    return calls


def replay(calls) -> dict[str, float]:
    stages: dict[str, float] = defaultdict(float)
    session = TraceSession()
    start = time.perf_counter()
    for after, mod, name in calls:
        (session.after if after else session.before)(mod, name)
    stages["recording (in the build)"] = time.perf_counter() - start
    with gc_paused():  # as Trace.finish does
        start = time.perf_counter()
        for stage in session.tracking():
            now = time.perf_counter()
            stages[stage] += now - start
            start = now
        lineage = lineage_from(session.tracker, "model", "llvm", "fused", session.degraded, members=session.members)
        stages["lineage extraction"] = time.perf_counter() - start
    if lineage.degraded:
        raise SystemExit(f"tracking degraded: {lineage.degraded}")
    return stages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deep", type=int, default=2000, help="bindings of the generated deep model; 0: resnet_style")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    mod = deep_chain(args.deep) if args.deep else resnet_style(blocks=3)
    calls = record(mod, tvm.target.Target("llvm"))
    best: dict[str, float] = {}
    for _ in range(args.runs):
        for stage, seconds in replay(calls).items():
            best[stage] = min(best.get(stage, seconds), seconds)
    total = sum(best.values())
    for stage, seconds in sorted(best.items(), key=lambda item: -item[1]):
        if seconds >= 0.0002:
            print(f"{stage:<28} {seconds * 1e3:6.2f} ms  {seconds / total:5.1%}")
    print(f"{'total (fastest per stage)':<28} {total * 1e3:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
