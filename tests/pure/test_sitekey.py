"""A call site's one identity and its two text forms."""

import pytest

from relaytrace.model.sitekey import SiteKey
from tests.pure.test_by_hand import lineage, profile


def test_labels_and_their_parse_round_trip():
    for key in (SiteKey("main", "fused_matmul_add", 0), SiteKey("decode", "rms_norm1", 12)):
        assert SiteKey.parse(key.label) == key
        assert SiteKey.parse(key.in_entry, key.entry) == key
    assert SiteKey("main", "k", 3).label == "k#3" and SiteKey("prefill", "k", 3).label == "prefill:k#3"
    assert SiteKey("prefill", "k", 3).in_entry == "k#3"


@pytest.mark.parametrize("text", ["k", "k#", "#0", "k#x", "k#-1", ":k#0", "decode:#0", "k#1.5", "k#\u00b2", "k#\u0661"])
def test_what_is_not_a_site_is_refused_naming_both_forms(text):
    with pytest.raises(ValueError, match="KERNEL#CALL or ENTRY:KERNEL#CALL"):
        SiteKey.parse(text)


def test_lineage_profile_and_shares_key_a_site_alike():
    from relaytrace.analysis.attribution import shares

    built, ran = lineage(), profile()
    assert [s.key for s in built.call_sites] == list(ran.by_site(kind="kernel"))
    assert {share.key for share in shares(built, ran)} == {s.key for s in built.call_sites}
    assert all(ran.key(r) in ran.by_site() for r in ran.records)
