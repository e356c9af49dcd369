"""What a user of a traced build's outputs waits for, on the nn decoder of 32 and 80 blocks.

For each size it builds the decoder (``zoo.nn_decoder``, prefill and decode) traced,
writes its lineage.json and code.json, and prints, each the median of ``--runs``:

- ``load (fresh)``: ``Lineage.load`` in a new Python process (what ``query`` or
  ``report`` pays), timed inside that process, relaytrace imported first;
- ``load (build's)``: ``Lineage.load`` in this process, which built the model (TVM and
  the build's objects in memory);
- ``query --kernel``: the command ``relaytrace query DIR --kernel K`` from start to exit
  (a kernel in the middle of the run), relaytrace's modules compiled to bytecode first,
  as a pip install leaves them;
- ``report interactive``: report.html (an estimate of a 32-token prefill on A100 peaks:
  the page, not the model, is measured) opened in headless Chromium: the page's own
  clock (``performance.now()``, from the navigation's start) when its scripts are done
  and every pane answers (``body[data-ready]``), one browser for every opening.

Targets (issue 57): load <= 100 ms fresh and <= 150 ms in the build's process at 32
blocks; ``query`` <= 200 ms; the report interactive <= 0.5 s at 32 blocks, <= 1.5 s at 80.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import relaytrace
from relaytrace.analysis.estimate import estimated_profile
from relaytrace.analysis.report import make_report
from relaytrace.frontends.nn import from_nn
from relaytrace.model.lineage import Lineage
from relaytrace.model.peaks import named
from relaytrace.render.html import html_report
from relaytrace.zoo.nn_decoder import decoder

_FRESH_LOAD = (
    "import sys, time; from relaytrace.model.lineage import Lineage; s = time.perf_counter(); "
    "Lineage.load(sys.argv[1]); print(time.perf_counter() - s)"
)


def _median_ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1e3:.0f} ms"


def _fresh_loads(path: Path, runs: int) -> list[float]:
    return [
        float(subprocess.run([sys.executable, "-c", _FRESH_LOAD, str(path)], check=True, capture_output=True).stdout)
        for _ in range(runs)
    ]


def _queries(directory: Path, kernel: str, runs: int) -> list[float]:
    command = [sys.executable, "-m", "relaytrace.cli", "query", str(directory), "--kernel", kernel]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=directory)  # cwd: no checkout on the path
        times.append(time.perf_counter() - start)
    return times


def _page_opens(path: Path, runs: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        for _ in range(runs + 1):  # the first opening warms the browser: not counted
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(path.as_uri())
            page.wait_for_selector("body[data-ready]")
            times.append(float(page.evaluate("document.body.dataset.ready")) / 1e3)
            page.close()
        browser.close()
    return times[1:]


def measure(blocks: int, runs: int) -> None:
    """Print the reader figures of the decoder of ``blocks`` blocks (module docstring)."""
    _, lineage = relaytrace.build(from_nn(*decoder(layers=blocks), name=f"decoder{blocks}"), "llvm", read_code=True)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = lineage.save(directory / "lineage.json")
        lineage.code.save(directory / "code.json")
        in_build = []
        for _ in range(runs):
            start = time.perf_counter()
            Lineage.load(path)
            in_build.append(time.perf_counter() - start)
        kernels = list(lineage.kernels)
        peaks = named("nvidia-a100-sxm4-80gb")
        report = make_report(lineage, estimated_profile(lineage, peaks, entry="prefill", shapes={"tokens": (1, 32)}))
        page = directory / "report.html"
        page.write_text(html_report(report))
        figures = {
            "load (fresh)": _fresh_loads(path, runs),
            "load (build's)": in_build,
            "query --kernel": _queries(directory, kernels[len(kernels) // 2], runs),
            "report interactive": _page_opens(page, runs),
        }
        print(
            f"decoder({blocks} blocks): lineage.json {path.stat().st_size / 1e6:.2f} MB, report.html "
            f"{page.stat().st_size / 1e6:.2f} MB, {len(lineage.call_sites)} sites; "
            + ", ".join(f"{name} {_median_ms(times)}" for name, times in figures.items()),
            flush=True,
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, nargs="+", default=[32, 80])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    compileall.compile_dir(Path(relaytrace.__file__).parent, quiet=1)
    for blocks in args.blocks:
        measure(blocks, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
