"""Where the tracking time goes, pass by pass, without TVM's own work in the way.

Records the modules of one plain build, then replays them through a fresh Recorder
several times and prints the fastest time of each stage: what the instrument does
during the build (record each pass's functions), then, as after a traced build
(``follow``), origin assignment with the input walk, each pass the tracker follows,
kernel members, call sites, the IR's facts (tuned kernels, shape consumers) and
verification (the tracker's reads freed as it returns), and the collection the
collector's pause held back (what the follow left in reference cycles would wait for
it); the code and the memory plans only with ``--outputs`` (an API build puts them off
until they are first asked for). Use it to see what a change to the tracker buys; use
compile_overhead.py for the ratio the target is about.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import defaultdict
from pathlib import Path

import tvm

from relaytrace.model.jsonio import gc_paused
from relaytrace.tracking.follow import follow
from relaytrace.tracking.recorder import Recorder
from relaytrace.zoo.relax_models import deep_chain, resnet_style

sys.path.insert(0, str(Path(__file__).parent))
from compile_overhead import _pipeline  # noqa: E402  (the pipelines compile_overhead measures)


def record(mod, target, passes=()) -> list[tuple[bool, object, object]]:
    """(after?, module, pass info) for every instrument call of a plain build."""
    calls: list[tuple[bool, object, object]] = []

    @tvm.ir.instrument.pass_instrument
    class Calls:
        def run_before_pass(self, mod, info):
            calls.append((False, mod, info))

        def run_after_pass(self, mod, info):
            calls.append((True, mod, info))

    with tvm.transform.PassContext(opt_level=3, instruments=[Calls()]):
        tvm.compile(mod, target, relax_pipeline=_pipeline(target, passes))
    return calls


def replay(calls, layer_of=None, outputs: bool = False) -> dict[str, float]:
    stages: dict[str, float] = defaultdict(float)
    recorder = Recorder()
    start = time.perf_counter()
    for after, mod, info in calls:
        (recorder.run_after_pass if after else recorder.run_before_pass)(mod, info)
    stages["recording (in the build)"] = time.perf_counter() - start
    clock = [time.perf_counter()]

    def step(name: str) -> None:
        now = time.perf_counter()
        stages[name] += now - clock[0]
        clock[0] = now

    with gc_paused():  # as Trace.finish does
        clock[0] = time.perf_counter()
        lineage = follow(recorder.recording, layer_of, on_step=step, read_code=outputs)
        step("verification")
    gc.collect(0)  # the objects the pause held back from the collector, walked once when it ends
    step("collection after the pause")
    if lineage.journal.degraded:
        raise SystemExit(f"tracking degraded: {lineage.journal.degraded}")
    return stages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deep", type=int, default=2000, help="bindings of the generated deep model; 0: resnet_style")
    parser.add_argument(
        "--decoder",
        type=int,
        default=0,
        metavar="BLOCKS",
        help="the nn decoder of this many blocks (prefill and decode) instead",
    )
    parser.add_argument(
        "--llama",
        type=int,
        default=0,
        metavar="BLOCKS",
        help="the MLC-style Llama of this many blocks, weights bundled and lifted, instead",
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--outputs",
        action="store_true",
        help="read what outputs show during the follow, as the CLI's builds do (the code, the memory plans)",
    )
    args = parser.parse_args(argv)
    layer_of, passes = None, ()
    if args.llama:
        from relaytrace.frontends.nn import from_nn
        from relaytrace.zoo.mlc_llama import llama

        imported = from_nn(*llama(layers=args.llama, param_mode="plain"))
        mod, layer_of, passes = imported.mod, imported.layer_of, ("BundleModelParams", "LiftTransformParams")
    elif args.decoder:
        from relaytrace.frontends.nn import from_nn
        from relaytrace.zoo.nn_decoder import decoder

        imported = from_nn(*decoder(layers=args.decoder))
        mod, layer_of = imported.mod, imported.layer_of
    else:
        mod = deep_chain(args.deep) if args.deep else resnet_style(blocks=3)
    calls = record(mod, tvm.target.Target("llvm"), passes)
    best: dict[str, float] = {}
    for _ in range(args.runs):
        for stage, seconds in replay(calls, layer_of, args.outputs).items():
            best[stage] = min(best.get(stage, seconds), seconds)
    total = sum(best.values())
    for stage, seconds in sorted(best.items(), key=lambda item: -item[1]):
        if seconds >= 0.0002:
            print(f"{stage:<28} {seconds * 1e3:6.2f} ms  {seconds / total:5.1%}")
    print(f"{'total (fastest per stage)':<28} {total * 1e3:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
