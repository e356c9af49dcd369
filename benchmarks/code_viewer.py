"""What the code of a build costs a user of the 32-block decoder (``zoo.nn_decoder``), in one run.

Prints:
- what reading what outputs show costs a traced build: builds that read it
  (``read_code=True``, as the CLI's builds do: the code and, since session 66, the
  memory plans) and builds that put it off (the API's default: each read at its first
  ask, never here), alternating, their median wall and CPU seconds and the ratio (with
  / without);
- code.json's size and its load time (``Code.load``), beside lineage.json's;
- the report's size with the code viewer and without it (the same report, its code
  taken off), and in headless Chromium: the time until the page's scripts are done,
  with and without the viewer, and the time from a click on a layer in the viewer to its
  blocks lit (target: interactive under 2 s).

The report is of an estimate (A100 peaks, a prefill of 32 tokens): what is measured is the
viewer, not the model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import attrs

import relaytrace
from relaytrace.analysis.estimate import estimated_profile
from relaytrace.analysis.report import make_report
from relaytrace.frontends.nn import from_nn
from relaytrace.model.code import Code
from relaytrace.model.peaks import named
from relaytrace.render.html import html_report
from relaytrace.zoo.nn_decoder import decoder


def _page_times(path: Path, layer: str | None) -> tuple[float, float]:
    """(ms until the page's scripts are done, ms from a click on ``layer`` to its blocks lit)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        start = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-code-ready]" if layer else "body[data-ready]")
        ready = (time.perf_counter() - start) * 1e3
        click = 0.0
        if layer:
            start = time.perf_counter()
            page.locator(f'#code-layers li[data-layer="{layer}"]').click()
            page.wait_for_selector("#code-tir span.on")
            click = (time.perf_counter() - start) * 1e3
        browser.close()
    return ready, click


def _builds(model, runs: int):
    """(lineage, {"with": [(wall, cpu)], "without": [...]}) of ``runs`` builds each way, alternating."""
    times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    lineage = None
    for _ in range(runs):
        for way in ("without", "with"):
            wall, cpu = time.perf_counter(), time.process_time()
            _, built = relaytrace.build(model, "llvm", read_code=way == "with")
            times[way].append((time.perf_counter() - wall, time.process_time() - cpu))
            lineage = built if way == "with" else lineage
    return lineage, times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    lineage, times = _builds(from_nn(*decoder(layers=args.blocks), name=f"decoder{args.blocks}"), args.runs)
    wall = {w: statistics.median(t[0] for t in ts) for w, ts in times.items()}
    cpu = {w: statistics.median(t[1] for t in ts) for w, ts in times.items()}
    print(
        f"decoder({args.blocks} blocks), {args.runs} traced builds each way: with the code {wall['with']:.3f} s "
        f"(CPU {cpu['with']:.3f} s), without {wall['without']:.3f} s (CPU {cpu['without']:.3f} s); ratio "
        f"{wall['with'] / wall['without']:.3f} wall, {cpu['with'] / cpu['without']:.3f} CPU"
    )
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        lineage.code.save(d / "code.json")
        lineage.save(d / "lineage.json")
        start = time.perf_counter()
        Code.load(d / "code.json")
        load = time.perf_counter() - start
        start = time.perf_counter()
        relaytrace.Lineage.load(d / "lineage.json")
        lineage_load = time.perf_counter() - start
        print(
            f"code.json {os.path.getsize(d / 'code.json') / 1e6:.2f} MB, loads in {load * 1e3:.0f} ms; "
            f"lineage.json {os.path.getsize(d / 'lineage.json') / 1e6:.2f} MB, loads in {lineage_load * 1e3:.0f} ms"
        )
        peaks = named("nvidia-a100-sxm4-80gb")
        report = make_report(lineage, estimated_profile(lineage, peaks, entry="prefill", shapes={"tokens": (1, 32)}))
        with_code, without = d / "with.html", d / "without.html"
        with_code.write_text(html_report(report))
        bare = attrs.evolve(report, lineage=attrs.evolve(report.lineage, code=None))
        bare = attrs.evolve(bare, build_lineage=attrs.evolve(report.build_lineage, code=None))
        without.write_text(html_report(bare))
        layer = next(o.layer for o in lineage.origins.values() if o.short_op == "matmul")
        ready, click = _page_times(with_code, layer)
        plain, _ = _page_times(without, None)
        print(
            f"report {os.path.getsize(with_code) / 1e6:.2f} MB with the code, {os.path.getsize(without) / 1e6:.2f} MB "
            f"without; scripts done in {ready:.0f} ms with the viewer, {plain:.0f} ms without "
            f"(ratio {ready / plain:.2f}); a layer clicked to its blocks lit in {click:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
