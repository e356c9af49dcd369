"""Regenerate docs/gallery/: real pictures of zoo models, and screenshots of their HTML
reports in headless Chromium (run: python tools/make_gallery.py [--screenshots | --memory |
--llm | --inside]: only retake the screenshots of the reports already there; or first make
again only the reports they are of that have a memory section, ResNet-50's and the
decoder's; or only the MLC-style Llama's served decode, its report and screenshot; or only
ResNet-18 timed inside its kernels, its report and its timeline's screenshot)."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import numpy as np

import relaytrace
from relaytrace.analysis.report import make_report
from relaytrace.build import NHWC
from relaytrace.frontends.loader import load
from relaytrace.render import graphviz as G
from relaytrace.render.html import html_report
from relaytrace.render.table import roofline_summary

OUT = Path(__file__).resolve().parent.parent / "docs" / "gallery"
MEMORY_STEP = 40  # the kernel call (0-based) of zoo ResNet-50 clicked in its memory chart: one on its plateau


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:] == ["--screenshots"]:  # of the reports already there
        _screenshots()
        return 0
    if sys.argv[1:] == ["--llm"]:
        _llm_decode()
        return 0
    if sys.argv[1:] == ["--inside"]:
        _inside()
        return 0
    if sys.argv[1:] == ["--code"]:
        for name, layout in (("resnet50", None), ("resnet50", NHWC)):
            tag, report = _zoo_report(name, layout)
            (OUT / f"{tag}_report.html").write_text(html_report(report))
        _code_screenshots()
        return 0
    if sys.argv[1:] == ["--memory"]:
        (OUT / "resnet50_report.html").write_text(html_report(_zoo_report("resnet50", None)[1]))
        (OUT / "decoder24_report.html").write_text(html_report(_decoder_report()))
        _screenshots()
        return 0
    for name, layout in (("resnet50", None), ("resnet50", NHWC), ("mobilenet_v2", None)):
        tag, report = _zoo_report(name, layout)
        lineage, prof = report.lineage, report.profile
        G.render(G.layer_graph(lineage, report, collapse=2), OUT / f"{tag}_layers_depth2.png", overwrite=True)
        G.render(G.kernel_graph(lineage, report), OUT / f"{tag}_kernels.svg", overwrite=True)
        G.render(G.layer_graph(lineage, report), OUT / f"{tag}_layers.svg", overwrite=True)
        (OUT / f"{tag}_report.html").write_text(html_report(report))
        print(tag, prof.summary())
        print(roofline_summary(report.roofline))
    _comparison()
    _llm_decode()
    decoder = _decoder_report()
    (OUT / "decoder24_report.html").write_text(html_report(decoder))
    print("decoder24", decoder.profile.summary())
    print(roofline_summary(decoder.roofline))
    _screenshots()
    _code_screenshots()
    _inside()
    return 0


def _zoo_report(name: str, layout):
    """(tag, report) of a zoo model built for llvm (in ``layout``), one run profiled."""
    tag = name + ("_nhwc" if layout else "")
    executable, lineage = relaytrace.build(load(f"demo:{name}").model, "llvm", convert_layout=layout, model=tag)
    x = np.random.default_rng(0).standard_normal(lineage.inputs[0][1]).astype("float32")
    return tag, make_report(lineage, relaytrace.profile(executable, lineage, [x], repeat=1))


def _comparison() -> None:
    """Zoo ResNet-18 built in float16 (ToMixedPrecision, float16 accumulators) against
    its float32 torch model at atol = rtol = 1e-2: the layer graph coloured by error,
    and its profile's report with the errors in the pane."""
    from relaytrace import zoo
    from relaytrace.analysis.comparison import compare
    from relaytrace.frontends.torch import from_torch
    from relaytrace.render.diff_graph import error_graph

    module, example = zoo.get("resnet18")
    executable, lineage = relaytrace.build(
        from_torch(module, (example,), name="resnet18"), "llvm", mixed_precision="float16"
    )
    result = compare(
        executable,
        lineage,
        module,
        [example.numpy()],
        atol=1e-2,
        rtol=1e-2,
        precision="float16, accumulating in float16",
    )
    G.render(error_graph(lineage, result), OUT / "resnet18_fp16_errors.svg", overwrite=True)
    print(result.summary())
    executable, lineage = relaytrace.build(from_torch(module, (example,), name="resnet18"), "llvm")
    report = make_report(lineage, relaytrace.profile(executable, lineage, [example.numpy()], repeat=1))
    (OUT / "resnet18_report_with_errors.html").write_text(html_report(report, result))


def _decoder_report():
    """relaytrace.zoo.nn_decoder's 24-block decoder through TVM's nn frontend, prefill
    of 32 tokens."""
    from relaytrace.frontends.nn import from_nn
    from relaytrace.zoo.nn_decoder import decoder

    module, spec = decoder(layers=24)
    executable, lineage = relaytrace.build(from_nn(module, spec, name="decoder24"), "llvm")
    params = [
        np.random.default_rng(0).standard_normal(shape).astype(dtype)
        if "float" in dtype
        else np.zeros(shape if "seq_len" not in shape else (1, 32), dtype)
        for _, shape, dtype in lineage.build.entries["prefill"]
    ]
    return make_report(lineage, relaytrace.profile(executable, lineage, params, entry="prefill", repeat=2))


def _llm_decode() -> None:
    """relaytrace.zoo.mlc_llama (4 blocks, packed weights, nn.llm's paged KV cache)
    served: one decode token after a context of 256, five runs; its report, and a
    screenshot of its Kernels table with the paged-decode attention kernel clicked (the
    attention layers that ran it in the pane)."""
    from playwright.sync_api import sync_playwright

    from relaytrace.frontends.nn import from_nn
    from relaytrace.profiling.serve import Serving
    from relaytrace.zoo.mlc_llama import llama

    executable, lineage = relaytrace.build(from_nn(*llama(layers=4), name="llama4"), "llvm")
    report = make_report(
        lineage, relaytrace.profile(executable, lineage, [], entry="decode", serving=Serving(context=256), repeat=5)
    )
    (OUT / "llama4_decode_report.html").write_text(html_report(report))
    print("llama4 decode", report.profile.summary())
    with sync_playwright() as pw:
        browser = _browser(pw)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto((OUT / "llama4_decode_report.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.fill("#search", "batch_decode_paged_kv")
        page.locator("#kernels tbody tr").first.click()
        page.evaluate(
            "document.getElementById('kernels').previousElementSibling.previousElementSibling.scrollIntoView()"
        )
        page.screenshot(path=str(OUT / "report_llm_decode_kernels.png"))
        browser.close()


def _screenshots() -> None:
    """The decoder's overview with ``layers.3`` clicked in the icicle; ResNet-18's pane
    with its float16 error; ResNet-50's layer graph as it opens (grouped), and every
    layer with ``layer3.1.conv2`` found and clicked; the roofline charts of ResNet-50
    (``layer3.1.conv2`` clicked) and the decoder (its slowest layer clicked); the memory
    sections of the decoder (at its peak) and of ResNet-50 (step ``MEMORY_STEP`` clicked);
    ResNet-50's Kernels table with its slowest kernel clicked, the kernel's pane beside it;
    ResNet-50's advice."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = _browser(pw)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto((OUT / "decoder24_report.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.locator('#icicle rect[data-name="layers.3"]').first.click()
        page.screenshot(path=str(OUT / "report_overview_decoder24.png"))
        page.goto((OUT / "resnet18_report_with_errors.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.locator("#graph").scroll_into_view_if_needed()
        page.fill("#search", "layer4.1.conv2")
        page.locator('#graph g.gnode[data-key="layer4.1.conv2"]').click()
        page.screenshot(path=str(OUT / "report_numerics_resnet18_fp16.png"))
        page.goto((OUT / "resnet50_report.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.locator("#graph").scroll_into_view_if_needed()
        page.screenshot(path=str(OUT / "report_graph_resnet50_grouped.png"))  # over 120 layers: grouped
        page.select_option("#depth", "0")
        page.fill("#search", "layer3.1.conv2")
        page.locator('#graph g.gnode[data-key="layer3.1.conv2"]').click()
        page.screenshot(path=str(OUT / "report_graph_resnet50.png"))
        for report, layer, name in (
            ("resnet50_report.html", "layer3.1.conv2", "report_roofline_resnet50.png"),
            ("decoder24_report.html", None, "report_roofline_decoder24.png"),
        ):
            page.goto((OUT / report).as_uri())
            page.wait_for_selector("body[data-ready]")
            page.locator("#roofline").scroll_into_view_if_needed()
            dot = (
                page.locator(f'#roofline circle[data-layer="{layer}"]')
                if layer
                else page.locator("#roofline circle").first
            )  # drawn largest (slowest) first
            dot.dispatch_event("click")
            page.locator("#roofline").scroll_into_view_if_needed()
            page.screenshot(path=str(OUT / name))
        page.goto((OUT / "resnet50_report.html").as_uri())  # the Kernels table, its slowest kernel clicked
        page.wait_for_selector("body[data-ready]")
        page.locator("#kernels tbody tr").first.click()
        page.evaluate(
            "document.getElementById('kernels').previousElementSibling.previousElementSibling.scrollIntoView()"
        )  # the section's heading at the top, the pane (sticky) beside it
        page.screenshot(path=str(OUT / "report_kernels_resnet50.png"))
        for report, step, name in (
            ("decoder24_report.html", None, "report_memory_decoder.png"),
            ("resnet50_report.html", MEMORY_STEP, "report_memory_resnet50.png"),
        ):
            page.goto((OUT / report).as_uri())
            page.wait_for_selector("body[data-ready]")
            if step is not None:
                page.locator(f'#memchart circle[data-step="{step}"]').dispatch_event("click")
            page.screenshot(path=str(OUT / name), full_page=True, clip=_section(page, "memory", 2))
        page.goto((OUT / "resnet50_report.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.screenshot(path=str(OUT / "report_advice_resnet50.png"), full_page=True, clip=_section(page, "advice", 1))
        browser.close()


def _code_screenshots() -> None:
    """The code viewer of zoo ResNet-50 with ``layer3.1.conv2`` clicked (its Relax call and
    its kernel's conv blocks lit), and of the NHWC build with a block of a layout
    transform ConvertLayout inserted clicked (its op and the layer it serves named)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = _browser(pw)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto((OUT / "resnet50_report.html").as_uri())
        page.wait_for_selector("body[data-code-ready]")
        page.locator('#code-layers li[data-layer="layer3.1.conv2"]').click()
        page.screenshot(path=str(OUT / "report_code_resnet50_conv.png"), full_page=True, clip=_section(page, "code", 4))
        page.goto((OUT / "resnet50_nhwc_report.html").as_uri())
        page.wait_for_selector("body[data-code-ready]")
        served = page.evaluate(
            "data.code.sites.flatMap(([, s]) => Object.values(s.blocks)).find(o => o.kind === 'inserted').layer"
        )  # the layer served by the first layout transform that runs in a kernel's blocks
        page.locator(f'#code-layers li[data-layer="{served}"]').click()
        page.locator("#code-tir span.inserted").first.click()
        page.screenshot(
            path=str(OUT / "report_code_resnet50_nhwc_block.png"), full_page=True, clip=_section(page, "code", 4)
        )
        browser.close()


def _inside() -> None:
    """Zoo ResNet-18 at 64x64, its batch norms folded into the convs (so that each conv
    runs fused with its bias add, ReLU and residual add), each fused kernel timed inside
    (``time_inside``) and billed by ``--policy measured``: its report, and a screenshot
    of its timeline, each kernel's slice with its ops' measured shares under it (the
    nested slices)."""
    from playwright.sync_api import sync_playwright

    from relaytrace import zoo
    from relaytrace.frontends.torch import from_torch

    module, example = zoo.get("resnet18", image=64)
    executable, lineage = relaytrace.build(
        from_torch(module, (example,), name="resnet18"), "llvm", fold_batch_norm=True
    )
    profile = relaytrace.profile(executable, lineage, [example.numpy()], repeat=5)
    inside = relaytrace.time_inside(module, lineage, [example.numpy()], example_args=(example,), repeat=5)
    report = make_report(lineage, attrs.evolve(profile, inside=inside), policy="measured")
    (OUT / "resnet18_inside_report.html").write_text(html_report(report))
    print("resnet18 inside", report.profile.summary())
    with sync_playwright() as pw:
        browser = _browser(pw)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto((OUT / "resnet18_inside_report.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.screenshot(
            path=str(OUT / "report_inside_timeline_resnet18.png"), full_page=True, clip=_section(page, "timeline", 1)
        )
        browser.close()


def _browser(pw):
    """Headless Chromium, as every screenshot here is taken."""
    return pw.chromium.launch(
        executable_path="/usr/bin/chromium",
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )


def _section(page, box: str, before: int) -> dict:
    """The clip of a report section in the page: from its heading (``before`` elements
    before the box ``#box``) to the box's end."""
    return page.locator(f"#{box}").evaluate(
        "(m, n) => { let a = m; for (let i = 0; i < n; i++) a = a.previousElementSibling; "
        "a = a.getBoundingClientRect(); const b = m.getBoundingClientRect(); "
        "return {x: a.left + scrollX - 8, y: a.top + scrollY - 8, width: b.width + 16, "
        "height: b.bottom - a.top + 16}; }",
        before,
    )


if __name__ == "__main__":
    sys.exit(main())
