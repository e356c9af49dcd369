"""Memory from a plan built by hand (no TVM): live bytes per step, the peak and whose it
is, what is live at any step, idle blocks, weights by the layer that reads them,
symbolic sizes bound, the plan saved and read back, the terminal and CSV forms, the
plan held against a run's addresses."""

import json

import attrs

from relaytrace.analysis.memory import TVM_SAYS, Verdict, entry_dims, live_at, memory_at
from relaytrace.analysis.report import make_report
from relaytrace.model.lineage import Lineage
from relaytrace.model.lineage_schema import migrate
from relaytrace.model.memory import Block, Held, MemoryPlan, Weight
from relaytrace.render.memory import formula, memory_csv, memory_line, memory_summary, size

from .test_by_hand import lineage, profile

CONV, LAYOUT, FC = "fused_conv2d_relu#0", "layout_transform#0", "matmul#0"
# conv writes a (kept for the layout transform), the transform writes b, the matmul reads b
# and writes the output into c; block a is reused for nothing; block d is idle between
# its values (written at step 0, read at 0, written again at 2).
PLAN = MemoryPlan(
    "main",
    (CONV, LAYOUT, FC),
    blocks=(
        Block("a", ((4, ("n",)),), 0, 1, (Held((1, "n"), "float32", CONV, 0, 1),)),
        Block("b", ((2048, ()),), 1, 2, (Held((1, 8, 8, 8), "float32", LAYOUT, 1, 2),)),
        Block("c", ((256, ()),), 2, 2, (Held((4, 16), "float32", FC, 2, 2),), returned=True),
        Block("d", ((100, ()),), 0, 2, (Held((25,), "float32", CONV, 0, 0), Held((25,), "float32", FC, 2, 2))),
    ),
    weights=(Weight("const#0", (8, 3, 3, 3), "float32", (CONV,)), Weight("fc_w", (64, 16), "float32", (FC,))),
    inputs=(("x", (1, 3, "n", 8), "float32"),),
    tvm=(4, (4 * 100 + 2048 + 256 + 100) / 2**30),
)


def planned(plan=PLAN) -> Lineage:
    lin = lineage()
    entries = {"main": (("x", (1, 3, "n", 8), "float32"),)}
    return attrs.evolve(lin, build=attrs.evolve(lin.build, entries=entries, memory={"main": plan}))


def test_live_bytes_at_each_step_and_the_peak_with_what_is_live_there():
    m = memory_at(planned(), "main", {"n": 100})
    assert m.live == (400 + 100, 400 + 2048 + 100, 2048 + 256 + 100)
    assert (m.peak, m.peak_step, m.peak_site) == (2548, 1, LAYOUT)
    assert m.peak_formula == ((2148, ()), (4, ("n",)))  # the blocks live at the peak, summed
    live = {v.block: v for v in m.at_peak}
    assert [v.block for v in m.at_peak] == ["b", "a", "d"]  # largest first
    assert live["a"].layer == "relu" and live["a"].shape == (1, 100)  # conv+relu writes relu's value, dims bound
    assert live["b"].layer == "conv1" and not live["b"].idle  # the inserted transform is its layer's
    assert live["d"].idle and live["d"].site == FC  # kept between its values, for the matmul's
    assert (m.planned, m.blocks, m.returned) == (400 + 2048 + 256 + 100, 4, 256)
    assert m.weights == 4 * (8 * 27 + 64 * 16) and m.inputs == 4 * 3 * 100 * 8


def test_layers_hold_what_they_wrote_and_weights_go_to_the_layer_that_reads_them():
    m = memory_at(planned(), "main", {"n": 100})
    conv, relu, fc = m.layer("conv1"), m.layer("relu"), m.layer("fc")
    assert conv.weights == 4 * 8 * 27 and relu.weights == 0  # the fused kernel's anchor reads the conv weight
    assert fc.weights == 4 * 64 * 16
    assert relu.at_peak == 400 and conv.at_peak == 2048 and fc.at_peak == 0  # d is idle, kept for fc's value
    assert relu.activations == 400 + 100 and fc.activations == 256 + 100
    assert m.layers[0].layer == "conv1"  # most at the peak first
    lives = {(v.kind, v.name, v.site): v for v in m.lifetimes}
    assert lives["activation", "a", CONV].at_peak and not lives["activation", "d", CONV].at_peak
    assert lives["weight", "fc_w", FC].first == 2 and lives["input", "x", ""].bytes == 4 * 3 * 100 * 8


def test_the_plan_is_checked_against_tvms_figure_and_a_symbolic_size_needs_its_dim():
    agrees = memory_at(planned(), "main", {"n": 100})
    assert agrees.checks[0].against == TVM_SAYS and agrees.checks[0].verdict == Verdict.AGREES
    assert agrees.checks[0].text.endswith(": agrees")
    differs = memory_at(planned(), "main", {"n": 101})
    assert differs.checks[0].verdict == Verdict.DIFFERS and "DIFFERS" in differs.checks[0].text
    unbound = memory_at(planned(), "main", {})
    assert not unbound.known and "n" in unbound.why
    assert memory_at(planned(), "decode", {}) is None  # no plan of that entry
    assert "not known" in memory_line(unbound) and "no memory plan" in memory_line(None)


def test_the_report_binds_the_dims_the_profile_ran_with():
    prof = attrs.evolve(profile(), inputs=(("x", (1, 3, 100, 8), "float32"),))
    assert entry_dims(planned(), "main", prof.inputs) == {"n": 100}
    report = make_report(planned(), prof)
    assert report.memory.peak == 2548
    rows = memory_csv(report).splitlines()
    assert rows[0].startswith("kind,name,bytes,shape") and len(rows) == 1 + 5 + 2 + 1
    assert "activation,a,400,1x100,float32,fused_conv2d_relu#0,relu,0,1" in rows[1]
    assert make_report(lineage(), profile()).memory is None  # a lineage without plans


def test_a_plan_survives_its_file_and_an_older_file_has_none(tmp_path):
    lin = planned()
    back = Lineage.load(lin.save(tmp_path / "lineage.json"))
    assert back.build.memory == lin.build.memory
    data = json.loads((tmp_path / "lineage.json").read_text())
    data["schema"] = "relaytrace.lineage/4"
    del data["build"]["memory"]
    assert migrate(data, "old")["schema"] == "relaytrace.lineage/7"


def test_the_terminal_shows_the_peak_its_formula_and_the_idle_blocks():
    text = memory_summary(memory_at(planned(), "main", {"n": 100}))
    assert "peak 2.49 KiB of activations at layout_transform#0" in text
    assert "4*n + 2148 bytes" in text and "idle, kept for 25 float32" in text
    assert "1 block(s), 100 B, are idle at the peak" in text
    assert size(3 * 2**30) == "3 GiB" and size(1536) == "1.5 KiB" and formula(()) == "0"


def test_a_runs_addresses_confirm_the_plan_or_say_where_they_differ():
    # block a at 1000, b at 5000, c at 9000, d at 20000 (its two values at one address)
    run = {CONV: (0, 0, 1000, 20000), LAYOUT: (1000, 5000), FC: (5000, 0, 9000, 20000)}
    plan = attrs.evolve(
        PLAN,
        blocks=tuple(
            attrs.evolve(
                b, tensors=tuple(attrs.evolve(h, argument={"a": 2, "b": 1, "c": 2, "d": 3}[b.name]) for h in b.tensors)
            )
            for b in PLAN.blocks
        ),
    )
    good = memory_at(planned(plan), "main", {"n": 100}, run).checks
    assert [c.verdict for c in good[1:]] == [Verdict.AGREES, Verdict.AGREES, Verdict.MEASURED]
    assert good[1].text.endswith("each block's values at one address: agrees")
    assert good[2].text.endswith("overlapped: agrees") and "spanned 2804 bytes at 4 distinct addresses" in good[3].text
    clash = dict(run, **{LAYOUT: (1000, 1200)})  # b on a's memory while both are live
    assert (
        "DIFFERS: a and b are both live at layout_transform#0"
        in memory_at(planned(plan), "main", {"n": 100}, clash).checks[2].text
    )
    moved = dict(run, **{FC: (5000, 0, 9000, 30000)})  # d's second value elsewhere
    assert (
        "DIFFERS: the values of d were at different addresses"
        in memory_at(planned(plan), "main", {"n": 100}, moved).checks[1].text
    )
    assert memory_at(planned(), "main", {"n": 100}, {CONV: (1,)}).checks[1].verdict == Verdict.NOT_CHECKED


def test_what_is_live_at_any_step_adds_up_to_its_live_bytes_and_at_the_peak_is_at_peak():
    m = memory_at(planned(), "main", {"n": 100})
    assert [(s.block, s.bytes, s.start, s.end, s.returned) for s in m.spans] == [
        ("a", 400, 0, 1, False),
        ("b", 2048, 1, 2, False),
        ("c", 256, 2, 2, True),
        ("d", 100, 0, 2, False),
    ]
    for step, live in enumerate(m.live):
        assert sum(v.bytes for v in live_at(m, step)) == live
    assert live_at(m, m.peak_step) == m.at_peak
    assert [(v.block, v.site, v.shape, v.idle, v.value_bytes) for v in live_at(m, 2)] == [
        ("b", LAYOUT, (1, 8, 8, 8), False, 2048),
        ("c", FC, (4, 16), False, 256),
        ("d", FC, (25,), False, 100),
    ]
    assert live_at(m, -1) == live_at(m, 3) == ()
    assert {v.block: v.sized_for for v in m.at_peak} == {"a": "relu", "b": "conv1", "d": "relu"}  # d: its first
