"""The long fuzz run: many seeded cases of each class in tests/fuzz.py, with counts.

    .venv/bin/python tools/fuzz.py                 # 2000 each: artifacts, legacy, names, layouts; 285 options;
                                                   # 200 well-typed but contradictory files;
                                                   # 100 tampered bundles run by their run.py;
                                                   # 40 LLM serving option sets (profile, bundle, estimate);
                                                   # a whole run signalled at each of its writes (3 signals);
                                                   # a remote server stopped at each remote step
    .venv/bin/python tools/fuzz.py --cases 200 --seed 7
    .venv/bin/python tools/fuzz.py --only stopped   # a remote server stopped at each step of a
                                                   # remote profile, at once and 0.3 s in (~12 min)

Prints per class: cases, broken promises (tracebacks, wrong exit codes, files left
behind or changed), and the first few of them. Exits 1 if any promise was broken.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz import (  # noqa: E402
    artifact_cases,
    bundle_cases,
    contradiction_cases,
    layout_cases,
    legacy_cases,
    make_bundle,
    make_source,
    name_cases,
    option_cases,
    serving_cases,
    signal_cases,
    stopped_server_cases,
)

TINY = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "tiny_model.py"
LLM = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "llm_model.py"  # the zoo's MLC-style Llama
# class -> its cases, from (the source DIR to mutate, a work DIR, the parsed options); a
# generator, so a class not chosen never starts
CLASSES = {
    "artifacts": lambda source, work, a: artifact_cases(source, work, a.seed, a.cases),
    "contradictions": lambda source, work, a: contradiction_cases(source, work, a.seed, max(a.cases // 10, 40)),
    "legacy": lambda source, work, a: legacy_cases(work, a.seed, a.cases),
    "options": lambda source, work, a: option_cases(source, work, a.seed, max(a.cases // 7, 20)),
    "names": lambda source, work, a: name_cases(a.seed, a.cases),
    "layouts": lambda source, work, a: layout_cases(work, a.seed, a.cases),
    "bundles": lambda source, work, a: bundle_cases(
        make_bundle(work / "bundle", f"{TINY}:make"), work, a.seed, max(a.cases // 20, 40)
    ),
    "serving": lambda source, work, a: serving_cases(work, f"{LLM}:make", a.seed, max(a.cases // 50, 30)),
    "signals": lambda source, work, a: signal_cases(work, f"{TINY}:make"),
    "stopped": lambda source, work, a: stopped_server_cases(work, f"{TINY}:make"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="cases per class (options: a seventh)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", type=Path, help="an output DIR to mutate (default: profile the tiny model)")
    parser.add_argument("--only", nargs="+", choices=list(CLASSES), help="run these classes only")
    args = parser.parse_args()
    broken = 0
    with tempfile.TemporaryDirectory(prefix="relaytrace-fuzz-") as tmp:
        tmp = Path(tmp)
        source = args.source
        if source is None:
            source = make_source(tmp / "source", f"{TINY}:make")
        work = tmp / "work"
        work.mkdir()
        for name, make in CLASSES.items():
            if args.only and name not in args.only:
                continue
            results = list(make(source, work, args))
            problems = [(what, problem) for what, problem in results if problem]
            total = len(results)
            print(f"{name}: {total} cases, {len(problems)} broken promises")
            for what, problem in problems[:10]:
                print(f"  {what}: {problem}")
            broken += len(problems)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
