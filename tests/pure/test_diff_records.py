"""A diff's reasons are records (``analysis.diff.Absence``, ``Match``): code reads their
fields, and only a table shows their words."""

from __future__ import annotations

from relaytrace.analysis.diff import Absence, LayerDiff, Match, Why, match_summary


def test_an_absence_says_its_words_and_keeps_its_hosts():
    fused = Absence(Why.FUSED, ("conv1", "conv2", "conv3", "conv4"))
    assert str(fused) == "fused into conv1, conv2, conv3 ..." and fused.hosts[3] == "conv4"
    assert str(Absence(Why.NOT_IN, side="the reference")) == "not in the reference"
    assert str(Absence(Why.NO_KERNEL)) == "no kernel"
    row = LayerDiff("bn1", 2000.0, None, ("k",), (), absent_b=fused)
    assert (row.shown("a"), row.shown("b")) == ("2.000", str(fused))


def test_the_match_summary_counts_each_kind():
    rows = tuple(
        LayerDiff(name, 1.0, 1.0, (), (), match=m)
        for name, m in (("a", Match.SAME), ("b", Match.DIFFERENT), ("c", Match.ONLY_A), ("d", Match.ONLY_A))
    )
    assert match_summary(rows) == (
        "matched by layer name: 2 layers on both sides (1 with the same ops, 1 with different ops); 2 only in A (c, d)"
    )
