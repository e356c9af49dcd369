"""Lineage queries, graph and JSON persistence, on a real fused build."""

import json

import attrs
import pytest

from relaytrace import Lineage, UnknownNameError
from relaytrace.errors import LineageFormatError
from relaytrace.model.journal import Change
from relaytrace.model.lineage import Role

from .lineage_files import flat_v2


def test_queries(builds):
    _, lineage = builds["fused"]
    sites = lineage.kernels_of("layer1_conv2_conv")
    assert len(sites) == 1 and sites[0].call == 0 and sites[0].label == f"{sites[0].kernel}#0"
    kernel = sites[0].kernel  # the conv, bias, residual add and relu of a block: reused by the next block
    assert kernel.startswith("fused_conv2d") and kernel.endswith(tuple(f"relu{n}" for n in ("", *"0123456789")))
    origins = lineage.origins_of(kernel, call=1)
    assert [o.layer for o in origins][0] == "layer2_conv2_conv"
    steps = [c.pass_name for c in lineage.history("layer1_conv2_conv")]
    assert not any("alloc" in c.callee for c in lineage.history("layer1_conv2_conv"))  # buffers are not ops
    fuse_tir = next(i for i, s in enumerate(steps) if s.startswith("FuseTIR"))
    assert steps.index("LegalizeOps") < steps.index("FuseOps") < fuse_tir
    assert lineage.coverage().site_fraction == 1.0


def test_unknown_names_get_suggestions(builds):
    _, lineage = builds["fused"]
    with pytest.raises(UnknownNameError, match="did you mean|Did you mean"):
        lineage.origins_of(lineage.kernels_of("layer1_conv2_conv")[0].kernel[:-1])  # a near miss
    with pytest.raises(UnknownNameError, match="layer1_conv2_conv"):
        lineage.kernels_of("layer1_conv2_cnv")
    with pytest.raises(UnknownNameError):
        lineage.site("mean", call=3)


def test_graph_has_dataflow_and_lineage_edges(builds):
    _, lineage = builds["nhwc"]
    g = lineage.graph()
    kinds = {d["kind"] for _, _, d in g.edges(data=True)}
    assert kinds == {"dataflow", "lineage"}
    assert g.has_edge("stem_conv/conv2d", "stem_bias/add")
    sites = [n for n, d in g.nodes(data=True) if d["kind"] == "call_site"]
    assert len(sites) == lineage.coverage().call_sites


@pytest.mark.parametrize("name", ["unfused", "fused", "nhwc"])
def test_json_round_trip_is_exact(builds, tmp_path, name):
    _, lineage = builds[name]
    path = lineage.save(tmp_path / "lineage.json")
    loaded = Lineage.load(path)
    assert loaded == lineage
    assert json.loads(path.read_text())["schema"] == "relaytrace.lineage/7"
    # records come back as records, not as tuples that merely compare equal
    assert all(type(r) is Role for s in loaded.call_sites for r in s.roles)
    assert all(type(c) is Change for h in loaded.journal.history_by_origin.values() for c in h)
    anchor = next(s.anchor for s in loaded.call_sites if s.anchor)
    history = loaded.history(anchor)
    assert history and all(type(c) is Change for c in history)


def test_loading_a_lineage_sets_off_at_most_the_collection_its_pause_held_back(builds, tmp_path):
    """The parsed JSON and the records made of it are read with the collector paused:
    collections set off while parsing walked every object of the process (TVM's and
    torch's, in a build's), and made an 80-block decoder's lineage load twice as long
    there as in a fresh process. At most the one collection the pause held back runs,
    as it ends (its generation is not asserted: CPython numbers them differently
    across versions)."""
    import gc

    path = builds["unfused"][1].save(tmp_path / "lineage.json")
    collections: list[int] = []

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        loaded = Lineage.load(path)
    finally:
        gc.callbacks.remove(seen)
    assert loaded == builds["unfused"][1]
    assert len(collections) <= 1, collections


def test_save_never_overwrites_unless_asked(builds, tmp_path):
    _, lineage = builds["fused"]
    path = tmp_path / "lineage.json"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="--force"):
        lineage.save(path)
    assert path.read_text() == "keep me"
    lineage.save(path, overwrite=True)
    assert Lineage.load(path) == lineage


def test_malformed_files_get_clear_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(LineageFormatError, match="line 1"):
        Lineage.load(bad)
    bad.write_text(json.dumps({"schema": "something/else"}))
    with pytest.raises(LineageFormatError, match="schema"):
        Lineage.load(bad)
    bad.write_text(json.dumps({"schema": "relaytrace.lineage/1", "model": "m"}))
    with pytest.raises(LineageFormatError, match="bad.json has no field 'origins'"):
        Lineage.load(bad)
    with pytest.raises(FileNotFoundError):
        Lineage.load(tmp_path / "nope.json")


def test_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    import os

    from relaytrace.model.jsonio import write_atomic

    path = tmp_path / "report.html"
    write_atomic(path, "first")
    with pytest.raises(FileExistsError):
        write_atomic(path, "second")
    assert path.read_text() == "first"

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "third", overwrite=True)
    assert path.read_text() == "first" and sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    monkeypatch.undo()
    write_atomic(path, b"fourth", overwrite=True)
    assert path.read_text() == "fourth"


def test_lineages_of_schemas_1_to_3_still_load_and_a_bad_history_is_named(builds, tmp_path):
    """/1 wrote a record per history step; /2 indexed one table of distinct changes; both
    kept every field flat, where /3 groups them into build and journal; /4 adds the
    kernels' work and /5 each entry's memory plan, which older files load without."""
    _, lineage = builds["fused"]
    data = lineage.to_json()
    history = data["journal"]["history_by_origin"]
    table = history["changes"]
    assert len(table) < sum(len(v) for v in history["by_origin"].values())  # shared steps
    v2 = flat_v2(data)
    v1 = {
        **v2,
        "schema": "relaytrace.lineage/1",
        "history": {
            oid: [dict(zip(Change._fields, table[i])) for i in indices] for oid, indices in history["by_origin"].items()
        },
    }
    later = ("work", "memory", "params", "kv_cache", "offloads")  # new in /4, /5 and within /5
    v3 = {**data, "schema": "relaytrace.lineage/3", "build": {k: v for k, v in data["build"].items() if k not in later}}
    unworked = attrs.evolve(lineage, build=attrs.evolve(lineage.build, work={}, memory={}, params={}))
    for name, old in (("v1.json", v1), ("v2.json", v2), ("v3.json", v3)):
        (tmp_path / name).write_text(json.dumps(old))
        assert Lineage.load(tmp_path / name) == unworked
    oid = next(iter(history["by_origin"]))
    for bad, message in (
        ({**history, "by_origin": {oid: [len(table)]}}, rf"by_origin\['{oid}'\]"),
        ({**history, "changes": [[1, "P"]]}, r"history_by_origin.changes\[0\] must be a list of 5"),
    ):
        journal = {**data["journal"], "history_by_origin": bad}
        (tmp_path / "bad.json").write_text(json.dumps({**data, "journal": journal}))
        with pytest.raises(LineageFormatError, match=message):
            Lineage.load(tmp_path / "bad.json")
