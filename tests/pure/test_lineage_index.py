"""The lineage's query index (``model.lineage_index``), pure: on generated lineages of
every shape (several entries, shared kernels, inserted ops serving several others,
sites with no origin) each indexed query gives what a scan of the lineage's records
gives; a lineage changed by ``attrs.evolve`` is indexed anew."""

import random

import attrs
import pytest

from relaytrace import Lineage, UnknownNameError
from relaytrace.model.build_facts import BuildFacts
from relaytrace.model.lineage import CallSite, Role
from relaytrace.model.origin import INSERTED, OP, Origin
from relaytrace.model.verification import SUSPECT, VERIFIED, SiteCheck, Verification


def _lineage(seed: int) -> Lineage:
    rng = random.Random(seed)
    ops = [Origin(f"L{i % 7}/op{i}", f"L{i % 7}", "relax.add", "main", i) for i in range(rng.randint(3, 30))]
    inserted = [
        Origin(
            f"ins{i}",
            "",
            "relax.layout_transform",
            "main",
            100 + i,
            kind=INSERTED,
            serves=tuple(o.id for o in rng.sample(ops, rng.randint(0, 3))),
        )
        for i in range(rng.randint(0, 5))
    ]
    origins = {o.id: o for o in ops + inserted}
    kernels: dict[str, list[CallSite]] = {}
    positions = list(range(rng.randint(1, 40)))
    rng.shuffle(positions)  # the kernels' lists are in run order, the dict is not
    for position in sorted(positions):
        kernel = f"k{rng.randint(0, 6)}"
        entry = rng.choice(("main", "decode"))
        chosen = rng.sample(list(origins), rng.randint(0, 3))
        call = sum(1 for s in kernels.get(kernel, ()) if s.function == entry)
        kernels.setdefault(kernel, []).append(
            CallSite(kernel, call, position, tuple(Role(o, "fused") for o in chosen), entry)
        )
    sites = [s for v in kernels.values() for s in v]
    verification = Verification(tuple(SiteCheck(s.position, rng.choice((VERIFIED, SUSPECT)), ()) for s in sites), ())
    return Lineage(
        BuildFacts("m", "llvm", "fused", entries={"main": (), "decode": ()}),
        origins,
        {k: tuple(v) for k, v in kernels.items()},
        verification=verification,
    )


def _scan_kernels_of(lineage: Lineage, name: str) -> list[str]:
    ids = (
        {name}
        if name in lineage.origins
        else {o.id for o in lineage.origins.values() if o.layer == name and o.kind == OP}
    )
    wanted = ids | {o.id for o in lineage.origins.values() if set(o.serves) & ids}
    sites = sorted((s for v in lineage.kernels.values() for s in v), key=lambda s: s.position)
    return [s.label for s in sites if wanted & set(s.origin_ids)]


@pytest.mark.parametrize("seed", range(40))
def test_indexed_queries_answer_as_a_scan_of_the_records(seed):
    lineage = _lineage(seed)
    sites = sorted((s for v in lineage.kernels.values() for s in v), key=lambda s: s.position)
    assert list(lineage.call_sites) == sites
    assert list(lineage.layers()) == list(dict.fromkeys(o.layer for o in lineage.origins.values() if o.kind == OP))
    for name in [*lineage.layers(), *lineage.origins]:
        assert [s.label for s in lineage.kernels_of(name)] == _scan_kernels_of(lineage, name)
    for s in sites:
        assert lineage.site_by_label(s.label) == s
        assert lineage.check(s) == next(c for c in lineage.verification.sites if c.position == s.position)
    with pytest.raises(UnknownNameError):
        lineage.kernels_of("no such layer")
    with pytest.raises(UnknownNameError):
        lineage.site_by_label("k0#999")


def test_an_evolved_lineage_is_indexed_anew():
    lineage = _lineage(3)
    site = lineage.call_sites[0]
    lineage.kernels_of(lineage.layers()[0])  # the index is built
    moved = attrs.evolve(site, roles=(Role("L0/op0", "anchor"),))
    kernels = {k: tuple(moved if s == site else s for s in v) for k, v in lineage.kernels.items()}
    changed = attrs.evolve(lineage, kernels=kernels)
    assert site.label in [s.label for s in changed.kernels_of("L0/op0")]
    assert changed.call_sites[0] == moved and lineage.call_sites[0] == site
    assert changed == attrs.evolve(lineage, kernels=kernels)  # the index takes no part in equality


def test_an_unverified_lineage_counts_every_site_unverified():
    lineage = attrs.evolve(_lineage(5), verification=None)
    assert {lineage.check(s).status for s in lineage.call_sites} == {"unverified"}
