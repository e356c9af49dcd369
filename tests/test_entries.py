"""Builds with several entry functions, some of them symbolic, as LLM deployments make
them (issue 42): each entry's lineage is its own, a symbolic entry's data flow is as
complete as a static one's, and every output of an entry's report says the build's
verdicts. Real TVM builds of the zoo's ``tvm.relax.frontend.nn`` decoder (``prefill`` at
a symbolic ``seq_len``, ``decode`` at one token) and of small TVMScript modules."""

import csv

import pytest

import relaytrace


@pytest.fixture(scope="module")
def decoder_fp16():
    """The zoo decoder (2 blocks) built fused through ToMixedPrecision: (executable, lineage)."""
    from relaytrace.frontends.nn import from_nn
    from relaytrace.zoo.nn_decoder import decoder

    module, spec = decoder(layers=2)
    return relaytrace.build(from_nn(module, spec, name="decoder"), "llvm", mixed_precision="float32")


def _site_of(lineage, entry: str, layer: str, short_op: str) -> int:
    """The position of the one call site of ``entry`` that runs ``layer``'s ``short_op``."""
    (position,) = [
        s.position
        for s in lineage.call_sites
        if s.key.entry == entry
        and any(lineage.origins[o].layer == layer and lineage.origins[o].short_op == short_op for o in s.origin_ids)
    ]
    return position


def test_a_symbolic_entrys_data_flow_is_as_complete_as_a_static_ones(decoder_fp16):
    """prefill (symbolic seq_len) and decode (one token) are one program: VMShapeLower
    binds prefill's allocations anew (sized from the shape heap), which lost which kernel
    wrote each (9 data-flow edges for prefill's 43 sites against decode's 49), so every
    cast ToMixedPrecision inserted there 'served an op at no neighbouring site'."""
    _, lineage = decoder_fp16
    check = lineage.verification
    assert check.ok, (check.summary(), [s for s in check.sites if s.status != "verified"][:3])
    edges = set(lineage.site_edges)
    count = {}
    for entry in ("prefill", "decode"):
        positions = {s.position for s in lineage.call_sites if s.key.entry == entry}
        count[entry] = sum(a in positions for a, _ in edges)
        for i in range(2):
            block = f"layers.{i}"
            norm = _site_of(lineage, entry, f"{block}.input_norm", "rms_norm")
            qkv = _site_of(lineage, entry, f"{block}.self_attn.qkv_proj", "matmul")
            softmax = _site_of(lineage, entry, f"{block}.self_attn", "softmax")
            assert (norm, qkv) in edges, entry  # the norm's output is the projection's input
            assert any(a == softmax for a, _ in edges), entry  # the attention's scores flow on
    assert count["prefill"] == count["decode"]


def test_an_entrys_verification_csv_says_the_verdicts_its_layers_csv_says(decoder_fp16):
    """Each entry's report of a two-entry build: verification.csv gave every layer
    'unverified (an older lineage)' (the entry's view of the lineage kept no layer
    verdicts) while layers.csv said 'verified'; both now give the build's verdict."""
    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.analysis.report import make_report
    from relaytrace.model.peaks import named
    from relaytrace.render.export import layers_csv
    from relaytrace.render.verification_csv import verification_csv

    _, lineage = decoder_fp16
    built = {c.layer: c.status for c in lineage.verification.layers}
    report = make_report(lineage, estimated_profile(lineage, named("nvidia-a100-sxm4-80gb"), entry="decode"))
    checked = {r["layer"]: r for r in csv.DictReader(verification_csv(report).splitlines())}
    listed = {r["layer"]: r["verification"] for r in csv.DictReader(layers_csv(report).splitlines())}
    assert {"layers.1.self_attn.qkv_proj", "lm_head"} <= set(checked) and set(listed) <= set(checked)
    for layer, row in checked.items():
        assert row["verdict"] == built[layer], (layer, row["reasons"])
        assert "older lineage" not in row["reasons"]
    for layer, verdict in listed.items():
        assert verdict == checked[layer]["verdict"], layer


_ENTRY = """
    @R.function
    def {name}(x: R.Tensor((4,), "float32")):
        with R.dataflow():
            y = R.call_dps_packed("my.f", (x, R.prim_value(T.float64(0.25))), out_ty=R.Tensor((4,), "float32"))
            z = R.{op}(y, y)
            R.output(z)
        return z
"""


def _two_entries_passing_a_prim_value():
    """Entries ``a`` (an add) and ``b`` (a multiply) each pass the float 0.25 to a packed
    call (the repro of issue 42): ComputePrimValue makes one ``compute_symbolic_expr``
    PrimFunc both call."""
    from tvm.script import from_source
    from tvm.script import ir as I
    from tvm.script import relax as R
    from tvm.script import tirx as T

    entries = "".join(_ENTRY.format(name=name, op=op) for name, op in (("a", "add"), ("b", "multiply")))
    return from_source(f"@I.ir_module\nclass Two:{entries}", extra_vars={"I": I, "R": R, "T": T})


def test_a_prim_value_two_entries_share_has_an_origin_in_each():
    """Entry b's call of the shared ``compute_symbolic_expr`` carried entry a's inserted
    op (serving a's packed call), and b's report raised a KeyError on it. Each entry's
    call now has its own, serving its own call, verified; each entry's lineage, outputs
    and report name only its own ops."""
    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.analysis.report import make_report
    from relaytrace.model.peaks import named
    from relaytrace.render.export import layers_csv
    from relaytrace.render.html import html_report

    _, lineage = relaytrace.build(_two_entries_passing_a_prim_value(), "llvm", model="two")
    check = lineage.verification
    assert check.ok, (check.summary(), [s for s in check.sites if s.status != "verified"])
    for entry, op in (("a", "add"), ("b", "multiply")):
        (site,) = [s for s in lineage.call_sites if s.key.entry == entry and s.kernel.startswith("compute_symbolic")]
        (origin,) = [lineage.origins[o] for o in site.origin_ids]
        assert origin.kind == "inserted" and origin.function == entry and origin.serves == (f"{entry}.y/f",)
        view = lineage.for_entry(entry)
        named_ops = {o for s in view.call_sites for o in s.origin_ids} | {
            o for x in view.origins.values() for o in x.serves
        }
        assert named_ops <= set(view.origins) and all(view.origins[o].function == entry for o in named_ops)
        report = make_report(lineage, estimated_profile(lineage, named("nvidia-a100-sxm4-80gb"), entry=entry))
        page = html_report(report)
        assert f"{entry}.y/f" in page and f"{'b' if entry == 'a' else 'a'}.y/f" not in page
        layers = {r["layer"]: r for r in csv.DictReader(layers_csv(report).splitlines())}
        assert set(layers) == {f"{entry}.y", f"{entry}.z"} and layers[f"{entry}.z"]["ops"] == op


def test_an_estimate_of_a_symbolic_entry_sizes_every_argument_from_the_inputs(decoder_fp16):
    """``relaytrace estimate --entry prefill`` refused every symbolic build ('an argument
    of shape ['?'] is sized only at run time'): the shape heap and the allocations a
    symbolic entry sizes from it are typed by their rank alone. Each takes its kernel's
    own parameter shape at the given length: every site is counted, the heap's shape
    function too, and the qkv projection's FLOPs follow the length."""
    from relaytrace.analysis.estimate import estimated_profile
    from relaytrace.analysis.report import make_report
    from relaytrace.model.peaks import named
    from relaytrace.render.html import html_report

    _, lineage = decoder_fp16
    sites = [s for s in lineage.call_sites if s.key.entry == "prefill"]
    assert any(s.kernel.startswith("shape_func") for s in sites)
    for length in (8, 128):
        profile = estimated_profile(lineage, named("nvidia-a100-sxm4-80gb"), "prefill", {"tokens": (1, length)})
        report = make_report(lineage, profile)
        roofline = report.roofline
        assert roofline.counted == len(sites), [r.notes for r in roofline.sites.values() if r.notes][:2]
        assert roofline.layer("layers.1.self_attn.qkv_proj").flops == 2 * length * 64 * 192
        assert roofline.layer("lm_head").bytes >= length * 256 * 4  # its float32 logits, written
        assert "layers.0.self_attn" in html_report(report)
