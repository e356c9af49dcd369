"""Build many generated models through torch and ONNX, unfused / fused / NHWC, and
count verified and suspect call sites: the search for attribution bugs.

    .venv/bin/python tools/check_generated.py --seeds 0-199 [--jobs 2] [--pipelines fused] [--frontends torch]
        [--show 5] [--progress]

Prints one line per build that is not clean (suspect / unverified sites, problems),
then the totals: models, builds, call sites verified / suspect / unverified, seconds.
Exits 1 when anything is not clean.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.generated_check


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _check(seed: int, options: tuple[tuple[str, ...], tuple[str, ...]]):
    warnings.simplefilter("ignore")
    from tests.generated_check import check

    frontends, pipelines = options
    try:
        return seed, check(seed, frontends, pipelines), None
    except Exception as exc:  # a crash is a finding too
        return seed, [], f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-19", help="e.g. 0-199 or 1,5,9 (default 0-19)")
    parser.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--show", type=int, default=3, help="reasons shown per bad build")
    parser.add_argument("--pipelines", default="unfused,fused,nhwc", help="of unfused, fused, nhwc (default all)")
    parser.add_argument("--frontends", default="torch,onnx", help="of torch, onnx (default both)")
    parser.add_argument(
        "--progress",
        action="store_true",
        help="also one line per model (its kind, sites, seconds): a long sweep's log reads as it runs",
    )
    args = parser.parse_args(argv)
    seeds = _seeds(args.seeds)
    start = time.perf_counter()
    totals = dict(models=0, builds=0, sites=0, verified=0, suspect=0, unverified=0, bad=0, crashed=0, skipped=0)
    with ProcessPoolExecutor(args.jobs) as pool:
        options = [(tuple(args.frontends.split(",")), tuple(args.pipelines.split(",")))] * len(seeds)
        for seed, checks, crash in pool.map(_check, seeds, options):
            totals["models"] += 1
            if args.progress:
                from relaytrace.zoo.generated import token_model

                built = [c for c in checks if not c.skipped]
                print(
                    f"seed {seed} ({'token' if token_model(seed) else 'image'} model): {len(built)} builds, "
                    f"{sum(c.sites for c in built)} sites, {sum(c.verified for c in built)} verified, "
                    f"{sum(not c.ok for c in built)} not clean; {sum(c.seconds for c in checks):.0f} s",
                    flush=True,
                )
            if crash:
                totals["crashed"] += 1
                print(f"seed {seed}: CRASHED {crash}", flush=True)
            for c in checks:
                if c.skipped:
                    totals["skipped"] += 1
                    print(f"seed {seed} {c.frontend} {c.pipeline}: skipped, {c.skipped}", flush=True)
                    continue
                totals["builds"] += 1
                totals["sites"] += c.sites
                totals["verified"] += c.verified
                totals["suspect"] += len(c.suspect)
                totals["unverified"] += len(c.unverified)
                if not c.ok:
                    totals["bad"] += 1
                    print(
                        f"seed {seed} {c.frontend} {c.pipeline}: {len(c.suspect)} suspect, "
                        f"{len(c.unverified)} unverified, {len(c.problems)} problems",
                        flush=True,
                    )
                    for line in (c.problems + c.suspect + c.unverified)[: args.show]:
                        print(f"    {line}", flush=True)
    seconds = time.perf_counter() - start
    print(
        f"{totals['models']} models ({totals['crashed']} crashed), {totals['builds']} builds "
        f"({totals['bad']} not clean, {totals['skipped']} skipped: TVM cannot build them), "
        f"{totals['sites']} call sites: {totals['verified']} verified, "
        f"{totals['suspect']} suspect, {totals['unverified']} unverified; {seconds:.0f} s"
    )
    return 1 if totals["bad"] or totals["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())
