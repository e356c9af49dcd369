"""The HTML report of models whose names are hostile (``fixtures/hostile.py``), opened
in headless Chromium and clicked all over: every name is shown as the text it is, none
runs, none empties the page, none breaks the script as an object key."""

import json

import numpy as np
import pytest

from relaytrace.analysis.memory import live_at
from relaytrace.analysis.report import make_report
from relaytrace.render.html import html_report, script_json

from .fixtures.hostile import HOSTILE_NAMES
from .test_render import CHROMIUM, launch

MODEL = "<!--<script>"
INPUT = "</script><script>alert(3)</script>"
# TVM refuses a PrimFunc named with a NUL: its LLVM symbol is cut there and the JIT
# aborts (segfault) on the missing definition. That layer computes with a Relax op.
KERNEL_NAMES = tuple(n for n in HOSTILE_NAMES if "\x00" not in n)


def _prim_func(name: str, step: int):
    from tvm import te

    a = te.placeholder((4,), "float32", name="A")
    b = te.compute((4,), lambda j: a[j] + float(step), name="B")  # step > 0: not a copy
    return te.create_prim_func([a, b]).with_attr("global_symbol", name)


def _hostile_relax():
    """A Relax chain, one binding per hostile name (plain Relax: the layer is the var's
    name), each a call of a PrimFunc of the same name (TVM permitting); the input var
    hostile too."""
    from tvm import relax
    from tvm.relax import op as R

    bb = relax.BlockBuilder()
    tensor = relax.TensorType((4,), "float32")
    x = relax.Var(INPUT, tensor)
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for i, name in enumerate(HOSTILE_NAMES):
                if name in KERNEL_NAMES:
                    call = relax.call_tir(bb.add_func(_prim_func(name, i + 1), name), [v], tensor)
                else:
                    call = R.add(v, relax.const(np.float32(i + 1)))
                # bound by hand: emit would rename a var named like a function already added
                binding = relax.VarBinding(relax.DataflowVar(name, tensor), bb.normalize(call))
                bb.emit_normalized(binding)
                v = binding.var
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    return bb.get()


def _hostile_onnx():
    """An ONNX chain of Adds whose node names (the layers, and their sources) and graph
    name (the model) are hostile."""
    import onnx
    from onnx import TensorProto, helper

    from relaytrace.frontends.onnx import from_onnx

    nodes, inits, prev = [], [], "x"
    for i, name in enumerate(HOSTILE_NAMES):
        inits.append(helper.make_tensor(f"c{i}", TensorProto.FLOAT, [4], [float(i + 1)] * 4))
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [f"t{i}"], name=name))
        prev = f"t{i}"
    graph = helper.make_graph(
        nodes,
        MODEL,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return from_onnx(model, layer_names="onnx")


@pytest.fixture(scope="module", params=["relax", "onnx"])
def hostile(request):
    """(frontend, report) of the hostile model built unfused (every kernel keeps its
    PrimFunc's name) and profiled."""
    import relaytrace

    model = _hostile_relax() if request.param == "relax" else _hostile_onnx()
    executable, lineage = relaytrace.build(model, "llvm", pipeline="unfused", model=MODEL)
    return request.param, make_report(
        lineage, relaytrace.profile(executable, lineage, [np.ones(4, "float32")], repeat=1)
    )


def test_script_json_cannot_end_or_derail_its_script_element():
    data = {"names": [*HOSTILE_NAMES, "\u2028\u2029", "<script", "-->"]}
    text = script_json(data)
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in text
    assert json.loads(text) == data


def _click_all(page, selector: str):
    """Click each element matching ``selector`` in turn (looked up again before each
    click: a click may redraw them)."""
    for i in range(page.locator(selector).count()):
        element = page.locator(selector).nth(i)
        if element.count():
            element.dispatch_event("click")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: the HTML report was not opened")
def test_every_hostile_name_is_text_in_the_html_report(hostile, tmp_path):
    """Open the page, click every module bar, call-site bar, graph node, table row and
    pane link: no dialog, no script error, every name shown as itself in the layer
    table, the graph and the module pane, and no element made from a name."""
    from playwright.sync_api import sync_playwright

    frontend, report = hostile
    layers = {o.layer for o in report.lineage.origins.values() if o.kind == "op"}
    assert set(HOSTILE_NAMES) == layers == {r.layer for r in report.layers}
    if frontend == "relax":  # its kernels are named too
        assert set(KERNEL_NAMES) <= set(report.lineage.kernels)
    path = tmp_path / "report.html"
    path.write_text(html_report(report))
    dialogs, errors = [], []
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1500, "height": 1200})
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready]", state="attached", timeout=10_000)
        assert page.title() == f"relaytrace: {MODEL}"
        shown = page.locator("#layers tbody tr td:first-child").all_text_contents()
        assert sorted(shown) == sorted(HOSTILE_NAMES)
        assert sorted(page.locator("#graph g.gnode").evaluate_all("gs => gs.map(g => g.dataset.key)")) == sorted(
            HOSTILE_NAMES
        )
        assert sorted(page.locator("#graph g.gnode text.name").all_text_contents()) == sorted(HOSTILE_NAMES)
        kernels = set(page.locator("#kernels tbody tr td:first-child").all_text_contents())
        assert kernels == set(report.lineage.kernels)
        pane = page.locator("#detail")
        for i in range(len(HOSTILE_NAMES)):  # the model's bar, a layer there, its site, that site's layer
            page.locator("#icicle rect").first.dispatch_event("click")
            assert pane.locator("h3").text_content() == f"module {MODEL}"
            assert sorted(pane.locator("a[data-layer]").all_text_contents()) == sorted(HOSTILE_NAMES)
            name = pane.locator("a[data-layer]").nth(i).text_content()
            pane.locator("a[data-layer]").nth(i).dispatch_event("click")
            assert pane.locator("h3").text_content() == f"layer {name}"
            pane.locator("a[data-site]").first.dispatch_event("click")
            assert pane.locator("h3").text_content().startswith("call site ")
            pane.locator("a[data-layer]").first.dispatch_event("click")
        for selector in (
            "#icicle rect",
            "#crumbs a",
            "#timeline rect",
            "#graph g.gnode",
            "#layers tbody tr",
            "#kernels tbody tr",
            "#optypes tbody tr",
            "#checks tbody tr",
            "#roofline circle",
            "#roof tbody tr",
            "#memchart circle",
            "#memstep a",
            "th",
            "#code-layers li",
            "#code-tir span[data-block]",
            "#code-relax span",
        ):
            _click_all(page, selector)
        # the code viewer lists each hostile layer as text, and says which a block computes
        assert sorted(page.locator("#code-layers li").all_text_contents()) == sorted(HOSTILE_NAMES)
        page.locator("#code-layers li").first.dispatch_event("click")
        page.locator("#code-tir span[data-block]").first.dispatch_event("click")
        assert any(name in page.locator("#code-info").text_content() for name in HOSTILE_NAMES)
        # the memory tables at the last step clicked: the layers that wrote what is live there, as text
        memory = report.memory
        last = len(memory.steps) - 1
        assert page.locator("#memchart circle.picked").get_attribute("data-step") == str(last)
        shown = page.locator("#memstep table >> nth=1").locator("tbody tr td:first-child").all_text_contents()
        assert shown and sorted(shown) == sorted({v.layer for v in live_at(memory, last)})
        assert set(shown) & set(HOSTILE_NAMES)
        page.wait_for_timeout(300)  # an image that failed to load has fired its onerror by now
        made = page.evaluate(
            "() => ({img: document.querySelectorAll('img').length, "  # the pane's own <b>
            "b: document.querySelectorAll('b:not(#detail > b):not(#code b)').length, "  # labels aside
            "scripts: document.scripts.length})"
        )
        browser.close()
    assert dialogs == [] and errors == []
    # the data's, d3-hierarchy's, dagre's, pure.js, the report's, the viewer's
    assert made == {"img": 0, "b": 0, "scripts": 6}
