"""Graphviz pictures, the HTML report (in real headless Chromium) and the Chrome trace."""

import json
import shutil
import subprocess

import attrs
import pytest

from relaytrace.analysis import attribution as A
from relaytrace.analysis.advice import Change, Finding
from relaytrace.analysis.report import make_report
from relaytrace.errors import RelaytraceError
from relaytrace.render import graphviz as G
from relaytrace.render.chrome_trace import chrome_trace
from relaytrace.render.html import html_report

from .conftest import anchored_kernel, move_origin

CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def small_profiled(builds, input_data):
    import relaytrace

    executable, lineage = builds["nhwc"]
    return lineage, relaytrace.profile(executable, lineage, [input_data], repeat=2)


def test_dot_renders_with_dot_and_structure_without_profile(builds, tmp_path):
    _, lineage = builds["nhwc"]
    path = G.render(G.layer_graph(lineage), tmp_path / "layers.dot")
    subprocess.run(["dot", "-Tsvg", str(path), "-o", str(tmp_path / "x.svg")], check=True)
    source = path.read_text()
    assert "ConvertLayout" in source and "dashed" in source
    assert " ms (" not in source and "legend" not in source  # no profile: structure only


def test_png_and_pdf_are_real_files(small_profiled, tmp_path):
    lineage, prof = small_profiled
    png = G.render(G.kernel_graph(lineage, make_report(lineage, prof)), tmp_path / "kernels.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pdf = G.render(G.layer_graph(lineage, make_report(lineage, prof), collapse=1), tmp_path / "layers.pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"


def test_render_never_overwrites_unless_asked(small_profiled, tmp_path):
    lineage, prof = small_profiled
    target = tmp_path / "k.svg"
    target.write_text("mine")
    with pytest.raises(FileExistsError, match="--force"):
        G.render(G.kernel_graph(lineage, make_report(lineage, prof)), target)
    assert target.read_text() == "mine"
    G.render(G.kernel_graph(lineage, make_report(lineage, prof)), target, overwrite=True)
    assert target.read_text().lstrip().startswith("<?xml")
    with pytest.raises(RelaytraceError, match="unknown graph format"):
        G.render(G.kernel_graph(lineage), tmp_path / "k.gif")


def test_mismatched_profile_is_refused(builds, small_profiled):
    _, other = builds["unfused"]
    _, prof = small_profiled
    with pytest.raises(RelaytraceError, match="does not match"):
        make_report(other, prof)


def test_chrome_trace_has_required_fields_for_every_call(small_profiled):
    lineage, prof = small_profiled
    trace = chrome_trace(make_report(lineage, prof))
    calls = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(calls) == len(prof.records)
    for e in calls:
        assert {"ph", "ts", "dur", "pid", "tid", "name"} <= set(e)
    kernel_events = [e for e in calls if e["cat"] == "kernel"]
    assert all(e["args"]["layers"] and e["args"]["origins"] for e in kernel_events)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {f"{prof.entry} kernels", f"{prof.entry} VM builtins"}
    anchored = [e for e in kernel_events if e["args"]["layer"]]
    assert anchored and all(e["args"]["module"].split(" / ")[-1] == e["args"]["layer"].split("@")[0] for e in anchored)
    json.dumps(trace)


def test_chrome_trace_flows_go_from_an_inserted_op_to_the_layer_it_serves(small_profiled):
    lineage, prof = small_profiled  # the NHWC build: ConvertLayout inserted layout transforms
    trace = chrome_trace(make_report(lineage, prof))
    calls = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert starts and set(starts) == set(ends)

    def enclosing(flow):
        return next(e for e in calls if e["pid"] == flow["pid"] and e["ts"] <= flow["ts"] <= e["ts"] + e["dur"])

    for fid, start in starts.items():
        source, target = enclosing(start), enclosing(ends[fid])
        assert source["ts"] < target["ts"] and source["pid"] == target["pid"]
        inserted = [o for o, role in source["args"]["origins"].items() if role == "inserted"]
        served = {x for o in inserted for x in lineage.origins[o].serves}
        assert served & set(target["args"]["origins"]), (source["name"], target["name"])
    with_inserted = {e["name"] for e in calls if "inserted" in e["args"]["origins"].values()}
    assert {enclosing(s)["name"] for s in starts.values()} <= with_inserted


@pytest.mark.slow
def test_resnet50_svg_names_every_kernel_and_conv_layer(resnet50_profiled, tmp_path):
    _, lineage, prof = resnet50_profiled
    svg = G.render(G.layer_graph(lineage, make_report(lineage, prof)), tmp_path / "layers.svg").read_text()
    for kernel in lineage.kernels:
        assert kernel in svg, kernel
    for origin in lineage.origins.values():
        if origin.short_op == "conv2d":
            assert origin.layer in svg, origin.layer


def _browser():
    from playwright.sync_api import sync_playwright

    return sync_playwright()


def launch(pw):
    """Headless Chromium as every report test opens it: Debian's, offline, no first-run work."""
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    return pw.chromium.launch(executable_path=CHROMIUM, args=args)


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed and could not be "
    "(run: apt-get install chromium); the HTML report was not "
    "exercised in a browser",
)
def test_html_report_works_in_headless_chromium(small_profiled, tmp_path):
    lineage, prof = small_profiled
    page_path = tmp_path / "report.html"
    page_path.write_text(html_report(make_report(lineage, prof)))
    assert "http://" not in page_path.read_text().replace("http://www.w3.org", "")
    with _browser() as pw:
        browser = launch(pw)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        assert errors == []
        assert page.locator("#layers tbody tr").count() == len(make_report(lineage, prof).layers)
        assert page.locator("#kernels tbody tr").count() == len(lineage.kernels)
        layers = {o.layer for o in lineage.origins.values() if o.kind == "op"}
        assert sorted(page.locator("#graph g.gnode").evaluate_all("gs => gs.map(g => g.dataset.key)")) == sorted(
            layers
        )  # a small model: every layer its own node
        row = page.locator("#layers tbody tr", has_text="layer1_conv2_conv").first
        row.click()
        highlighted = page.locator("#kernels tbody tr.hl").all_inner_texts()
        conv, fc = anchored_kernel(lineage, "layer1_conv2_conv"), anchored_kernel(lineage, "fc")
        assert any(t.startswith(conv) and "layer1_conv2_conv" in t for t in highlighted)
        assert page.locator("#graph g.hl").evaluate_all("gs => gs.map(g => g.dataset.key)") == ["layer1_conv2_conv"]
        page.locator(f"#kernels tbody tr[data-key='{fc}']").click()
        assert any("fc" in t for t in page.locator("#layers tbody tr.hl").all_inner_texts())
        page.fill("#search", "layer2_conv1")
        assert page.locator("#layers tbody tr:visible").count() == 1
        assert sorted(page.locator("#graph g.found").evaluate_all("gs => gs.map(g => g.dataset.key)")) == sorted(
            layer for layer in layers if "layer2_conv1" in layer
        )
        page.fill("#search", "")
        box = page.locator("#graph").get_attribute("viewBox")
        page.locator("#graph").hover()
        page.mouse.wheel(0, -300)  # zoom in: the view box shrinks
        assert float(page.locator("#graph").get_attribute("viewBox").split()[2]) < float(box.split()[2])
        page.fill("#search", "fc")  # the first match is centred in the view: clickable
        page.locator("#graph g.gnode[data-key='fc']").click()
        assert page.locator("#detail h3").inner_text() == "layer fc"
        page.fill("#search", "")
        page.locator("#layers th", has_text="time (ms)").click()
        times = [float(t) for t in page.locator("#layers tbody tr td:nth-child(2)").all_inner_texts()]
        assert times == sorted(times)
        assert (
            page.locator(
                "p.good", has_text=f"{len(lineage.call_sites)} of {len(lineage.call_sites)} call sites verified"
            ).count()
            == 1
        )
        assert page.locator("#checks").count() == 0  # nothing to list
        convs = [s for s in lineage.call_sites if s.anchor and lineage.origins[s.anchor].short_op == "conv2d"]
        broken = attrs.evolve(move_origin(lineage, convs[0].anchor, convs[1]), verification=None)
        broken = attrs.evolve(broken, verification=broken.verify())
        page_path.write_text(html_report(make_report(broken, prof)))
        page.goto(page_path.as_uri())
        assert errors == []
        cov = broken.coverage()
        suspect = cov.suspect
        assert page.locator("p.bad", has_text=f"{len(suspect)} suspect").count() == 1
        checked = [*suspect, *(f"layer {layer}" for layer in (*cov.suspect_layers, *cov.unverified_layers))]
        assert cov.suspect_layers and sorted(
            page.locator("#checks tbody tr td:first-child").all_inner_texts()
        ) == sorted(checked)
        assert page.locator("#layers tbody tr", has_text="suspect").count() >= 1
        browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: the HTML report was not opened")
def test_a_click_on_each_kind_of_row_shows_its_detail(small_profiled, tmp_path):
    """Layers, kernels, op types and the roofline's layers: a click on a row opens its
    pane (issue 33: a kernel's row left the pane as it was)."""
    lineage, prof = small_profiled
    report = make_report(lineage, prof)
    page_path = tmp_path / "report.html"
    page_path.write_text(html_report(report))
    errors: list[str] = []
    with _browser() as pw:
        browser, page, _ = _open(pw, page_path, errors)
        pane = page.locator("#detail")
        assert "kernel, op type" in pane.inner_text()
        page.locator("#layers tbody tr", has_text="layer1_conv2_conv").first.click()
        assert pane.locator("h3").inner_text() == "layer layer1_conv2_conv"
        kernel = next(r for r in report.kernels if "layer1_conv2_conv" in r.layers)
        page.locator(f"#kernels tbody tr[data-key='{kernel.name}']").click()
        assert pane.locator("h3").inner_text() == f"kernel {kernel.name}"
        assert pane.locator("a[data-layer='layer1_conv2_conv']").count() >= 1  # its layers, as links
        sites = [s.label for s in lineage.sites(kernel.name)]
        assert sorted(pane.locator("a[data-site]").all_inner_texts()) == sorted(sites)
        assert kernel.shapes.split(",")[0] in pane.inner_text()
        pane.locator("a[data-layer='layer1_conv2_conv']").first.click()  # and on from there
        assert pane.locator("h3").inner_text() == "layer layer1_conv2_conv"
        op = next(r for r in report.op_types if r.op == "conv2d")
        page.locator("#optypes tbody tr[data-key='conv2d']").click()
        assert pane.locator("h3").inner_text() == "op type conv2d"
        convs = {o.layer for o in lineage.origins.values() if o.short_op == "conv2d" and o.kind == "op"}
        assert set(pane.locator("a[data-layer]").evaluate_all("a => a.map(x => x.dataset.layer)")) == convs
        assert f"{op.count} op(s)" in pane.inner_text()
        roof = report.roofline.layers[0].name
        page.locator(f"#roof tbody tr[data-key='{roof}']").click()
        assert pane.locator("h3").inner_text() == f"layer {roof}"
        width = page.locator("#kernels td[data-col=shapes]").first.evaluate("td => td.getBoundingClientRect().width")
        assert width >= 150  # the argument shapes are readable, not a column of one word a line
        assert errors == []
        browser.close()


def _open(pw, path, errors):
    browser = launch(pw)
    page = browser.new_page(viewport={"width": 1500, "height": 1200})
    page.on("pageerror", lambda e: errors.append(str(e)))
    import time

    start = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready]")
    return browser, page, time.perf_counter() - start


def _decoder_report(layers: int):
    import numpy as np

    import relaytrace
    from relaytrace.frontends.nn import from_nn
    from relaytrace.zoo.nn_decoder import decoder

    module, spec = decoder(layers=layers)
    executable, lineage = relaytrace.build(from_nn(module, spec, name=f"decoder{layers}"), "llvm")
    params = [
        np.random.default_rng(0).standard_normal(shape).astype(dtype)
        if "float" in dtype
        else np.zeros(shape if "seq_len" not in shape else (1, 32), dtype)
        for _, shape, dtype in lineage.build.entries["prefill"]
    ]
    return make_report(lineage, relaytrace.profile(executable, lineage, params, entry="prefill", repeat=2))


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: the HTML report was not opened")
@pytest.mark.parametrize(
    "model",
    [
        pytest.param("decoder24", marks=pytest.mark.serial),
        "resnet50",
    ],  # serial: a limit in seconds (2.7 s beside a worker)
)
def test_the_reports_overview_opens_fast_and_answers_clicks(model, tmp_path, request):
    """The new overview on a 24-block decoder (461 call sites) and zoo ResNet-50: open
    (time to interactive logged; under 2 s for the decoder here), click a module in the
    icicle: it zooms and the pane lists its layers and their kernel calls; click a layer
    there: its ops with shapes, its sites with roles and times; a timeline bar: the site;
    search finds a layer."""
    if model == "decoder24":
        report = _decoder_report(24)
        module, layer = "layers.3", "layers.3.mlp.gate_up_proj"
    else:
        report = make_report(*request.getfixturevalue("resnet50_profiled")[1:])
        module, layer = "layer3", "layer3.1.conv2"
    page_path = tmp_path / "report.html"
    page_path.write_text(html_report(report))
    errors = []
    with _browser() as pw:
        browser, page, seconds = _open(pw, page_path, errors)
        print(f"{model}: report of {len(report.lineage.call_sites)} call sites interactive in {seconds:.2f} s")
        if model == "decoder24":
            assert seconds < 2.0
        assert errors == []
        assert page.locator("#timeline rect").count() == len(report.lineage.call_sites)
        page.locator(f'#icicle rect[data-name="{module}"]').first.click()
        assert page.locator("#crumbs", has_text=module).count() == 1  # zoomed
        pane = page.locator("#detail")
        assert pane.locator("h3", has_text=f"module {module}").count() == 1
        pane.locator(f'a[data-layer="{layer}"]').click()
        assert pane.locator("h3", has_text=f"layer {layer}").count() == 1
        shown = pane.locator("a[data-site]").all_inner_texts()
        # the sites that run the layer's ops or serve them, as the lineage says, in run order
        expected = [
            s.label for s in report.lineage.call_sites if s.label in {x.label for x in report.lineage.kernels_of(layer)}
        ]
        assert shown == expected and shown
        assert pane.locator("td", has_text="float32[").count() >= 1  # the ops' shapes
        first = report.lineage.call_sites[0].label  # the page's site 0: the first in run order
        assert page.locator('#timeline rect[data-site="0"] title').text_content().startswith(f"{first}: ")
        # the bar's own click: a site shorter than a quarter pixel (a shape function, a few
        # microseconds of a run) lies under the next site's bar, where a click at its centre lands
        page.locator('#timeline rect[data-site="0"]').dispatch_event("click")
        assert pane.locator("h3", has_text=f"call site {first}").count() == 1
        page.fill("#search", layer)
        assert page.locator("#layers tbody tr:visible").count() >= 1
        # the layer graph: grouped by module depth (over 120 layers), search finds the layer's group
        depth = int(page.locator("#depth").input_value())
        layers = {o.layer for o in report.lineage.origins.values() if o.kind == "op"}
        groups = {A.module_prefix(x, depth) for x in layers} if depth else layers
        keys = page.locator("#graph g.gnode").evaluate_all("gs => gs.map(g => g.dataset.key)")
        assert sorted(keys) == sorted(groups) and len(keys) <= 120
        found = page.locator("#graph g.found").evaluate_all("gs => gs.map(g => g.dataset.key)")
        assert found == [A.module_prefix(layer, depth) if depth else layer]
        page.select_option("#depth", "0")  # every layer
        assert page.locator("#graph g.gnode").count() == len(layers)
        assert sorted(page.locator("#graph g.found").evaluate_all("gs => gs.map(g => g.dataset.key)")) == sorted(
            x for x in layers if layer in x
        )
        page.screenshot(path=str(tmp_path / f"{model}.png"))
        browser.close()
    assert errors == []


def test_layer_graph_colours_each_op_by_its_own_time_and_groups_big_models(small_profiled, monkeypatch):
    lineage, prof = small_profiled
    report = make_report(lineage, prof)
    source = G.layer_graph(lineage, report).source
    hottest = max(report.shares, key=lambda s: s.us)

    def fill(origin_id):
        line = next(x for x in source.splitlines() if f'id="origin:{origin_id}"' in x)
        return line.split('fillcolor="')[1].split('"')[0]

    assert fill(hottest.origin) == G._SCALE[-1]
    billed = {s.origin for s in report.shares if s.us > 0}
    site = lineage.site_by_label(hottest.site)
    fused = [o for o in site.origin_ids if o not in billed and lineage.origins[o].kind == "op"]
    assert fused and all(fill(o) == G._SCALE[0] for o in fused)  # in the hottest kernel, but no time of its own
    assert "grouped by module depth" not in source
    monkeypatch.setattr(G, "MAX_OPS", 8)  # a model over the limit is drawn grouped, and says so
    grouped = G.layer_graph(lineage, report)
    assert "grouped by module depth 1" in grouped.source and "origin:" not in grouped.source
    assert "origin:" in G.layer_graph(lineage, report, collapse=0).source


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: the HTML report was not opened")
def test_the_memory_chart_has_a_point_per_kernel_call_and_says_what_is_live_at_the_one_clicked(tmp_path):
    """The 2-block decoder's prefill: one point per step, the peak labelled with its bytes
    and site, the tables at the peak as the analysis says; a click on another step shows
    what is live there (as ``live_at`` says), a layer there opens its pane; without a plan,
    or with sizes not known, the section says so."""
    from relaytrace.analysis.memory import live_at
    from relaytrace.render.memory import size

    report = _decoder_report(2)
    memory = report.memory
    other = next(
        i
        for i in range(len(memory.steps))  # a step where other values are live than at the peak
        if {v.block for v in live_at(memory, i)} != {v.block for v in memory.at_peak}
    )
    page_path = tmp_path / "report.html"
    page_path.write_text(html_report(report))
    errors: list[str] = []

    def rows(page, table: int) -> list[list[str]]:
        return (
            page.locator(f"#memstep table >> nth={table}")
            .locator("tbody tr")
            .evaluate_all("trs => trs.map(tr => Array.from(tr.cells, td => td.textContent))")
        )

    with _browser() as pw:
        browser, page, _ = _open(pw, page_path, errors)
        assert page.locator("#memchart circle.step").count() == len(memory.steps) > 1
        label = page.locator("#memchart text.peak-label").text_content()
        assert memory.peak_site in label and size(memory.peak) in label
        assert [r[0] for r in rows(page, 0)] == [v.block for v in memory.at_peak]
        assert [r[0] for r in rows(page, 1)][:3] == [r.layer for r in memory.layers[:3]]  # by bytes at the peak
        page.locator(f'#memchart circle[data-step="{other}"]').hover()
        assert page.locator("#memhover").text_content() == (
            f"step {other + 1}: {memory.steps[other]}, {size(memory.live[other])} live"
        )
        page.locator(f'#memchart circle[data-step="{other}"]').dispatch_event("click")
        assert (
            page.locator("#memstep p.memhead")
            .text_content()
            .startswith(
                f"step {other + 1} of {len(memory.steps)}, {memory.steps[other]}: {size(memory.live[other])} live"
            )
        )
        expected = live_at(memory, other)

        def shown(v):
            shape = " ".join(("x".join(map(str, v.shape)), v.dtype)).strip()
            return f"kept for {shape}" if v.idle else f"{shape} ({size(v.value_bytes)})"

        assert rows(page, 0) == [
            [
                v.block,
                size(v.bytes),
                shown(v),
                v.layer,
                v.site + (" (returned)" if v.returned else ""),
                "idle" if v.idle else "",
            ]
            for v in expected
        ]
        assert page.locator("#memchart circle.picked").get_attribute("data-step") == str(other)
        layer = next(v.layer for v in expected if v.layer in {r.layer for r in report.layers})  # a row of its own
        page.locator(f'#memstep a[data-layer="{layer}"]').first.click()
        assert page.locator("#detail h3").text_content() == f"layer {layer}"
        assert page.locator("#layers tbody tr.pick td:first-child").text_content() == layer
        for memoryless, says in (
            (None, "No memory plan"),
            (attrs.evolve(memory, known=False, why="give seq_len"), "not known at these sizes: give seq_len"),
        ):
            page_path.write_text(html_report(attrs.evolve(report, memory=memoryless)))
            page.goto(page_path.as_uri())
            page.wait_for_selector("body[data-ready]")
            assert says in page.locator("#memory p.warn").text_content()
            assert page.locator("#memchart").count() == 0
        browser.close()
    assert errors == []


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: the HTML report was not opened")
def test_the_advice_section_lists_each_finding_and_its_layers_open_their_pane(small_profiled, tmp_path):
    """Each finding's title, saving and change at the top of the page; a layer of one
    opens its pane; a run without advice says so. Which rules fire depends on this
    machine's peaks (test_advice holds the rules): the page is given one finding of its
    own, about the run's slowest layer, beside whatever the rules found."""
    lineage, prof = small_profiled
    report = make_report(lineage, prof)
    slowest = report.layers[0]
    finding = Finding(
        "far-below-roofline",
        f"{slowest.layer} is slow",
        (slowest.layer,),
        (),
        ("evidence",),
        slowest.us / 2,
        Change("schedule it", "relaytrace tasks DIR --tune N --db DIR"),
    )
    report = attrs.evolve(report, advice=(*report.advice, finding))
    page_path = tmp_path / "report.html"
    page_path.write_text(html_report(report))
    errors: list[str] = []
    with _browser() as pw:
        browser, page, _ = _open(pw, page_path, errors)
        items = page.locator("ol.advice > li")
        assert items.count() == len(report.advice)
        text = items.nth(report.advice.index(finding)).text_content()
        assert finding.title in text and finding.change.how in text and f"({finding.rule})" in text
        layer = finding.layers[0]
        items.nth(report.advice.index(finding)).locator(f'a[data-layer="{layer}"]').click()
        assert page.locator("#detail h3").text_content() == f"layer {layer}"
        page_path.write_text(html_report(attrs.evolve(report, advice=())))
        page.goto(page_path.as_uri())
        page.wait_for_selector("body[data-ready]")
        assert page.locator("#advice").text_content().startswith("No advice")
        browser.close()
    assert errors == []
