"""What is live at each step of an entry's memory plan, on a plan built by hand (no TVM)."""

import attrs

from relaytrace.analysis.memory import live_at, memory_at
from relaytrace.model.memory import Block, Held, MemoryPlan

from .test_by_hand import lineage

STEPS = ("fused_conv2d_relu#0", "layout_transform#0", "matmul#0")
PLAN = MemoryPlan("main", STEPS, (
    Block("a", ((1024, ()),), 0, 1, (Held((16, 16), "float32", STEPS[0], 0, 1),)),
    Block("b", ((512, ()),), 1, 2, (Held((8, 16), "float32", STEPS[1], 1, 1),
                                    Held((8, 16), "float32", STEPS[2], 2, 2)), returned=True),
    # its first value is read at step 0 only, its next written at step 2: idle at step 1
    Block("c", ((2048, ()),), 0, 2, (Held((32, 16), "float32", STEPS[0], 0, 0),
                                     Held((32, 16), "float32", STEPS[2], 2, 2))),
))


def test_what_is_live_at_any_step_adds_up_to_its_live_bytes_and_at_the_peak_is_at_peak():
    memory = memory_at(attrs.evolve(lineage(), build=attrs.evolve(lineage().build, memory={"main": PLAN})), "main", {})
    assert memory.live == (3072, 3584, 2560) and memory.peak_step == 1
    assert [(s.block, s.bytes, s.start, s.end, s.returned) for s in memory.spans] == [
        ("a", 1024, 0, 1, False), ("b", 512, 1, 2, True), ("c", 2048, 0, 2, False)]
    for step, live in enumerate(memory.live):
        assert sum(v.bytes for v in live_at(memory, step)) == live
    assert live_at(memory, memory.peak_step) == memory.at_peak
    # at the peak: c waits for matmul's value (fc's), a holds the fused conv+relu's (its last op: relu), b the
    # inserted transform's (no op of the model: its origin's layer)
    assert [(v.block, v.layer, v.idle, v.returned) for v in memory.at_peak] == [
        ("c", "fc", True, False), ("a", "relu", False, False), ("b", "conv1", False, True)]
    assert [(v.block, v.site, v.shape, v.idle) for v in live_at(memory, 2)] == [
        ("c", STEPS[2], (32, 16), False), ("b", STEPS[2], (8, 16), False)]
    assert live_at(memory, -1) == live_at(memory, 3) == ()
