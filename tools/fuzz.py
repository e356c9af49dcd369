"""The long fuzz run: many seeded cases of each class in tests/fuzz.py, with counts.

    .venv/bin/python tools/fuzz.py                 # 2000 each: artifacts, legacy, names, layouts; 285 options;
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
    layout_cases,
    legacy_cases,
    name_cases,
    option_cases,
    run_cli,
    signal_cases,
    stopped_server_cases,
)

TINY = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "tiny_model.py"
CLASSES = ("artifacts", "legacy", "options", "names", "layouts", "signals", "stopped")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="cases per class (options: a seventh)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", type=Path, help="an output DIR to mutate (default: profile the tiny model)")
    parser.add_argument("--only", nargs="+", choices=CLASSES, help="run these classes only")
    args = parser.parse_args()
    broken = 0
    with tempfile.TemporaryDirectory(prefix="relaytrace-fuzz-") as tmp:
        tmp = Path(tmp)
        source = args.source
        if source is None:
            source = tmp / "source"
            code, _, err = run_cli(["--quiet", "profile", f"{TINY}:make", "--repeat", "1", "--out", source])
            if code:
                print(f"could not make the source directory: {err}")
                return 1
        work = tmp / "work"
        work.mkdir()
        classes = {  # generators: a class not chosen never starts
            "artifacts": artifact_cases(source, work, args.seed, args.cases),
            "legacy": legacy_cases(work, args.seed, args.cases),
            "options": option_cases(source, work, args.seed, max(args.cases // 7, 20)),
            "names": name_cases(args.seed, args.cases),
            "layouts": layout_cases(work, args.seed, args.cases),
            "signals": signal_cases(work, f"{TINY}:make"),
            "stopped": stopped_server_cases(work, f"{TINY}:make"),
        }
        for name, cases in classes.items():
            if args.only and name not in args.only:
                continue
            results = list(cases)
            problems = [(what, problem) for what, problem in results if problem]
            total = len(results)
            print(f"{name}: {total} cases, {len(problems)} broken promises")
            for what, problem in problems[:10]:
                print(f"  {what}: {problem}")
            broken += len(problems)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
