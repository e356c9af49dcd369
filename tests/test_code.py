"""The code a build made, linked by origin to TIR blocks (``model.code``, ``tracking.code``):
every block of every kernel given to a member op and verified, the layer a block
computes told by data flow, the viewer in the report, ``query --code`` and the sidecar."""

from __future__ import annotations

import json
import re
import shutil

import attrs
import pytest

from relaytrace.analysis.report import make_report
from relaytrace.errors import UsageError
from relaytrace.model.code import Code, block_origins, check_blocks, mismatches
from relaytrace.model.lineage import Lineage
from relaytrace.model.ops import is_prim_value_computation, is_shape_computation
from relaytrace.model.provenance import SCHEMA
from relaytrace.render.provenance import provenance
from tests.conftest import anchored_kernel
from tests.fuzz import run_cli
from tests.test_render import CHROMIUM, _browser, launch


def assert_every_block_mapped_and_verified(lineage) -> dict:
    """Every kernel TVM compiled has its code; every block of it is verified, and at every
    call site each block of a member with an op is given an origin of that site. Returns
    the sidecar."""
    code = lineage.code
    assert code is not None and code.problems == ()
    compiled = {k for k, sites in lineage.kernels.items() if not sites[0].library}
    assert compiled <= set(code.kernels)
    for name, kernel in code.kernels.items():  # each block's line is its own, as TVM prints it
        for text, blocks in ((kernel.fused, kernel.blocks), (kernel.built, kernel.built_blocks)):
            rows = text.splitlines()
            assert all(f'T.sblock("{b.name}")' in rows[b.line - 1] for b in blocks), name
    for name, function in code.functions.items():
        rows = function.text.splitlines()
        assert all(c.callee in rows[c.line - 1] for c in function.calls), name
    found = provenance(lineage).to_json()
    for name, kernel in found["kernels"].items():
        if not kernel["blocks"]:  # a shape function's TIR computes in no block, nor need hand-written TIR
            cache = lineage.build.kv_cache.kernels if lineage.build.kv_cache else ()
            assert is_shape_computation(name) or is_prim_value_computation(name) or name in cache, name
            continue
        assert {b["status"] for b in kernel["blocks"]} == {"verified"}, (name, kernel["blocks"])
        members = lineage.build.kernel_members.get(name, ())
        computing = {i for i, b in enumerate(code.kernels[name].blocks) if not members or members[b.member].ops}
        for site in kernel["sites"]:
            assert site["relax_line"] > 0, site["label"]
            assert {int(i) for i in site["blocks"]} == computing, (site["label"], site["blocks"])
            for i, owner in site["blocks"].items():  # a KV cache's kernel has no members: its builtin's op
                assert owner["op"] in (
                    members[code.kernels[name].blocks[int(i)].member].ops if members else (owner["op"],)
                )
    return found


@pytest.mark.parametrize("config", ["fused", "nhwc"])
def test_every_block_of_every_kernel_is_its_members_and_verified(builds, config):
    _, lineage = builds[config]
    found = assert_every_block_mapped_and_verified(lineage)
    kinds = {o["kind"] for k in found["kernels"].values() for s in k["sites"] for o in s["blocks"].values()}
    if config == "nhwc":  # the layout transforms ConvertLayout inserted: their blocks say so
        inserted = [
            o
            for k in found["kernels"].values()
            for s in k["sites"]
            for o in s["blocks"].values()
            if o["kind"] == "inserted"
        ]
        assert inserted and {o["op"] for o in inserted} <= {"relax.layout_transform", "relax.permute_dims"}
    else:
        assert kinds == {"op"}


def test_a_layer_names_its_relax_call_and_only_the_blocks_of_its_own_op(builds):
    _, lineage = builds["fused"]
    conv = lineage.code_of("layer1_conv2_conv")
    (site,) = conv.sites
    kernel = lineage.code.kernels[site.kernel]
    relax_line = lineage.code.functions[site.function].text.splitlines()[site.line - 1]
    assert site.kernel in relax_line
    names = [kernel.blocks[i].name for i in site.blocks]
    assert any("conv2d" in n for n in names) and not any(n.startswith(("T_add", "compute")) for n in names)
    # the residual add and the conv's bias add share a kernel and an op: data flow tells them apart
    residual = lineage.code_of("layer1_add")
    (add_site,) = residual.sites
    assert add_site.kernel == site.kernel
    (block,) = add_site.blocks
    bias = lineage.code_of("layer1_conv2_bias").sites[0].blocks
    assert bias != (block,)
    reads = kernel.blocks[block].reads
    assert any(
        w in reads for i in bias for w in kernel.blocks[i].writes
    )  # the residual add reads the bias add's result


def test_a_block_given_to_the_wrong_member_is_suspect(builds):
    _, lineage = builds["fused"]
    kernel = lineage.code.kernels[anchored_kernel(lineage, "layer1_conv2_conv")]
    assert {c.status for c in check_blocks(kernel)} == {"verified"}
    blocks = list(kernel.blocks)
    last = len(blocks) - 1  # the ReLU's block, given to the conv's bias add instead
    blocks[last] = attrs.evolve(blocks[last], member=blocks[last].member - 1)
    checks = check_blocks(attrs.evolve(kernel, blocks=tuple(blocks)))
    suspect = [c for c in checks if c.status == "suspect"]
    assert suspect and any("is not" in r or "no block" in r or "output" in r for c in suspect for r in c.reasons)
    shuffled = attrs.evolve(kernel, blocks=tuple(reversed(kernel.blocks)))
    assert any(c.status == "suspect" for c in check_blocks(shuffled))


def test_block_origins_follow_data_flow_not_the_order_of_ops(builds):
    _, lineage = builds["fused"]
    site = lineage.kernels_of("layer1_add")[0]
    members = lineage.build.kernel_members[site.kernel]
    owners, ambiguous = block_origins(
        site, members, lineage.code.kernels[site.kernel], lineage.origins, set(lineage.edges)
    )
    layers = [lineage.origins[owners[m]].layer for m in sorted(owners)]
    assert layers == ["layer1_conv2_conv", "layer1_conv2_bias", "layer1_add", "layer1_relu2"] and not ambiguous
    # without the data flow, the two adds could go either way: the answer says so
    assert block_origins(site, members, lineage.code.kernels[site.kernel], lineage.origins, set())[1]


def test_the_code_is_saved_apart_and_query_code_prints_the_layers_blocks(tiny_out, tmp_path):
    data = json.loads((tiny_out / "provenance.json").read_text())
    assert data["schema"] == SCHEMA and data["kernels"]
    assert "code" not in json.loads((tiny_out / "lineage.json").read_text())
    lineage = Lineage.load(tiny_out / "lineage.json")
    with pytest.raises(UsageError, match="carries no code"):
        lineage.code_of("fc")
    lineage = lineage.with_code(Code.load(tiny_out / "code.json"))
    layer = next(o.layer for o in lineage.origins.values() if o.short_op == "matmul")
    code, out, err = run_cli(["query", str(tiny_out), "--code", layer])
    assert code == 0, err
    assert ">>" in out and "[verified]" in out and "Relax main:" in out
    assert "(matmul at " in out or "(matmul)" in out  # a marked block names its op (and its line)
    code, out, err = run_cli(["query", str(tiny_out), "--code", layer, "--json"])
    found = json.loads(out)
    assert found["sites"] and all(b["status"] == "verified" for s in found["sites"] for b in s["blocks"])
    code, out, err = run_cli(["render", str(tiny_out), "--format", "html", "--out", str(tmp_path / "r.html")])
    assert code == 0, err
    assert 'id="code-relax"' in (tmp_path / "r.html").read_text()  # re-rendered, the viewer is kept
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "lineage.json").write_bytes((tiny_out / "lineage.json").read_bytes())
    code, out, err = run_cli(["query", str(bare), "--code", layer])
    assert code != 0 and "no code.json" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: the code viewer was not exercised")
def test_a_code_json_that_contradicts_itself_is_refused_naming_the_field(tiny_out, tmp_path):
    """A block's range edited to end at line 10⁹ froze the report's page and marked
    another block in query --code; a call past its function's text was an IndexError."""
    from relaytrace.errors import FileFormatError

    data = json.loads((tiny_out / "code.json").read_text())
    kernel = next(k for k, v in data["kernels"].items() if v["blocks"])
    function = next(f for f, v in data["functions"].items() if v["calls"])
    edits = {
        "spans lines": lambda d: d["kernels"][kernel]["blocks"][0].update(end=10**9),
        "not a line of its": lambda d: d["functions"][function]["calls"][0].update(line=10**6),
        "not one of the kernel's": lambda d: d["kernels"][kernel]["blocks"][0].update(member=99),
    }
    for words, edit in edits.items():
        changed = json.loads(json.dumps(data))
        edit(changed)
        (tmp_path / "code.json").write_text(json.dumps(changed))
        with pytest.raises(FileFormatError, match=f"code.json: .*{words}"):
            Code.load(tmp_path / "code.json")
    out = tmp_path / "run"
    shutil.copytree(tiny_out, out)
    (out / "code.json").write_text((tmp_path / "code.json").read_text())
    code, _, err = run_cli(["query", str(out), "--code", "fc"])
    assert code == 1 and err.count("\n") == 1 and "not one of the kernel's" in err, err


def test_the_code_of_another_build_is_refused_by_the_lineage(builds, tiny_out, tmp_path):
    """Issue 54: the code of the same model at another input size, or of another model,
    was shown [verified] as this build's; a code.json of schema /1 still loads."""
    import relaytrace
    from relaytrace.errors import FileFormatError
    from relaytrace.zoo.relax_models import resnet_style

    _, lineage = builds["fused"]
    _, smaller = relaytrace.build(resnet_style(blocks=3, image=16), "llvm", model="resnet_style")
    assert set(smaller.code.kernels) == set(lineage.code.kernels)  # the same kernels, by name
    with pytest.raises(
        FileFormatError,
        match=r"small is not the code of this lineage's build: kernels.*\.params\[\d\] is \[1, \d+, 16, 16\] float32, "
        r"not the \[1",
    ):
        lineage.with_code(smaller.code, "small")
    other = Code.load(tiny_out / "code.json")
    with pytest.raises(FileFormatError, match=r"tiny's is not the code of this lineage's build: kernels\['\w+'\]"):
        lineage.with_code(other, "tiny's")
    assert any(p.endswith("is no kernel of this build (resnet_style)") for p in mismatches(lineage, other))
    assert lineage.with_code(lineage.code).code is lineage.code
    # on the command line: a directory whose code.json is another model's
    out = tmp_path / "run"
    shutil.copytree(tiny_out, out)
    lineage.code.save(out / "code.json", overwrite=True)
    code, _, err = run_cli(["query", str(out), "--code", "fc"])
    assert code == 1 and err.count("\n") == 1 and "code.json is not the code of this lineage's build" in err, err
    # an earlier version's code.json (no buffer types) loads, and is not judged by them
    data = json.loads((tiny_out / "code.json").read_text())
    data["schema"] = "relaytrace.code/1"
    for kernel in data["kernels"].values():
        kernel.pop("params", None)
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = Code.load(tmp_path / "old.json")
    assert old.kernels and all(k.params == () for k in old.kernels.values())
    assert Lineage.load(tiny_out / "lineage.json").with_code(old).code is old


def test_the_code_viewer_links_a_layer_its_relax_call_and_its_blocks(builds, input_data, tmp_path):
    import relaytrace
    from relaytrace.render.html import html_report

    executable, lineage = builds["nhwc"]
    report = make_report(lineage, relaytrace.profile(executable, lineage, [input_data], repeat=1))
    page_path = tmp_path / "report.html"
    page_path.write_text(html_report(report))
    with _browser() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        page.locator("#code-layers li[data-layer='layer1_conv2_conv']").click()
        site = lineage.code_of("layer1_conv2_conv").sites[0]
        assert page.locator("#code-relax span.on").get_attribute("data-line") == str(site.line)
        on = page.locator("#code-tir span.on").all_inner_texts()
        assert any('T.sblock("conv2d_nhwc' in t or 'T.sblock("conv2d' in t for t in on)
        page.locator("#code-tir span", has_text='T.sblock("compute').first.click()
        assert "layer1_relu2" in page.locator("#code-info").inner_text()
        assert page.locator("#code-layers li.on").inner_text() == "layer1_relu2"
        # a layer of two call sites: both are links, and the second one opens its own line
        two = next(o.layer for o in lineage.origins.values() if len(lineage.code_of(o.layer).sites) > 1)
        page.locator(f"#code-layers li[data-layer='{two}']").click()
        second = lineage.code_of(two).sites[1]
        page.locator("#code-info a[data-code-site]", has_text=re.compile(f"^{re.escape(second.label)}$")).click()
        assert page.locator("#code-relax span.on").get_attribute("data-line") == str(second.line)
        order = page.locator("#code-layers li").all_text_contents()
        assert order.index("stem_conv") < order.index("layer1_conv1_conv") < order.index("fc")  # in run order
        page.fill("#code-search", "layer2_conv1")
        assert page.locator("#code-layers li:visible").count() >= 1
        assert errors == []


@pytest.mark.slow
def test_resnet50_fused_and_nhwc_every_block_is_mapped_verified_and_inserted_blocks_named(resnet50_profiled, resnet50):
    import relaytrace
    from relaytrace.build import NHWC

    _, fused, _ = resnet50_profiled
    assert_every_block_mapped_and_verified(fused)
    model, _ = resnet50
    _, nhwc = relaytrace.build(model, "llvm", convert_layout=NHWC)
    found = assert_every_block_mapped_and_verified(nhwc)
    inserted = [
        nhwc.origins[o["origin"]]
        for k in found["kernels"].values()
        for s in k["sites"]
        for o in s["blocks"].values()
        if o["kind"] == "inserted"
    ]
    # the layout transforms into NHWC before the first conv and back after the last, each
    # block named as an op ConvertLayout inserted, serving model ops
    assert {o.pass_name for o in inserted} == {"ConvertLayout"} and all(o.serves for o in inserted)
    assert "conv1" in {o.layer for o in inserted}


def test_the_printer_places_each_block_asked_about_and_a_hostile_name_cannot_move_one():
    """``script_lines`` reads lines from the annotations TVM's printer writes, under a tag
    made for the print: a block named like a marker, with a newline and a comment in its
    name, stays on its line; the text is the printer's own; an object the printer did
    not mark (not in the function) fails loudly, never silently without a line."""
    import tvm_ffi
    from tvm.s_tir.stmt import SBlock
    from tvm.script import tirx as T

    from relaytrace.tracking.printed import PrinterChanged, script_lines

    @T.prim_func(private=True, s_tir=True)
    def kernel(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("double\n  # relaytrace-0 1"):
                vi = T.axis.spatial(4, i)
                b[vi] = a[vi] * T.float32(2)
        for i in range(4):
            with T.sblock("relaytrace-0 0"):
                vi = T.axis.spatial(4, i)
                b[vi] = b[vi] + T.float32(1)

    blocks: list = []
    tvm_ffi.structural_walk(kernel.body, (SBlock, blocks.append), order="pre")
    blocks = [b for b in blocks if b.name_hint != "root"]
    text, lines = script_lines(kernel, "kernel", blocks)
    assert text == kernel.script(name="kernel")
    rows = text.splitlines()
    assert [rows[n - 1].strip()[:18] for n in lines] == ['with T.sblock("dou', 'with T.sblock("rel']
    assert lines[0] < lines[1]

    @T.prim_func(private=True, s_tir=True)
    def other(a: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("zero"):
                vi = T.axis.spatial(4, i)
                a[vi] = T.float32(0)

    with pytest.raises(PrinterChanged, match="1 of 1 objects of other"):
        script_lines(other, "other", blocks[:1])


def test_the_code_is_read_at_its_first_ask_and_is_what_reading_it_during_the_build_gives():
    """Issue 57: a build puts the code off (printing it is a third of tracking's time)
    until ``lineage.code`` is first read; then it is the code a build that read it
    while following (``read_code=True``, the CLI's way) holds, and it is made once."""
    import relaytrace
    from relaytrace.zoo.relax_models import resnet_style

    _, later = relaytrace.build(resnet_style(blocks=1), "llvm")
    _, now = relaytrace.build(resnet_style(blocks=1), "llvm", read_code=True)
    assert later._code is None and later._code_later is not None  # nothing printed yet
    assert now._code is not None and now._code_later is None
    evolved = attrs.evolve(later, schema=later.schema)  # the promise travels with the lineage
    assert evolved._code is None and evolved._code_later is not None
    code = later.code
    assert code == now.code and code.kernels and code.functions
    assert later._code_later is None and later.code is code  # made once
    assert evolved.code == code  # its own, made alike
    assert Lineage.from_json(later.to_json()).code is None  # lineage.json never holds it
    import pickle

    _, unread = relaytrace.build(resnet_style(blocks=1), "llvm")
    pickled = pickle.loads(pickle.dumps(unread))  # the code made first: what makes it holds TVM objects
    assert pickled == unread and pickled._code_later is None and pickled.code == now.code
