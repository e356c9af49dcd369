"""Two profiles of one model, or one profile against external timings, layer by layer.

Layers are matched by stable origin ids, so fused vs unfused, NCHW vs NHWC and
before vs after tuning line up. Two imports of one model through different frontends
(a torch run and an ONNX run) have different ops (ONNX folds BatchNorm, decomposes
others), so ``by_layer`` matches them by layer name instead and says, per layer,
whether the ops agree."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from attrs import define

from ..errors import FileFormatError, RelaytraceError
from ..model.names import Name
from ..model.origin import OP
from ..model.run_spec import PolicyName
from ..render.safe_text import csv_value, terminal
from . import attribution


class Match(Name):
    """How a layer's ops compare between two imports matched by layer name."""

    SAME = "same ops"
    DIFFERENT = "different ops"
    ONLY_A = "only in A"
    ONLY_B = "only in B"


class Why(Name):
    """Why one side of a diff has no time of its own for a layer."""

    FUSED = "fused into"  # its ops run in kernels other layers anchor
    NO_KERNEL = "no kernel"  # eliminated, or run by VM builtins only
    NOT_IN = "not in"  # that side has no such layer


@define(frozen=True)
class Absence:
    """Why a side has no time for a layer (``why``), with the layers whose kernels its
    ops run in (``hosts``, for ``FUSED``) or the side that lacks it (``side``, for
    ``NOT_IN``: "A", "B", "the reference"). ``str()`` is the words a table shows; code
    reads the fields, never the words."""

    why: Why
    hosts: tuple[str, ...] = ()
    side: str = ""

    def __str__(self) -> str:
        if self.why == Why.FUSED:
            return f"fused into {', '.join(self.hosts[:3])}{' ...' if len(self.hosts) > 3 else ''}"
        return f"not in {self.side}" if self.why == Why.NOT_IN else str(self.why)


@define(frozen=True)
class LayerDiff:
    """One layer in two runs A and B: each run's time (None where it is absent, and
    ``absent_a`` / ``absent_b`` why) and kernels."""

    layer: str
    a_us: float | None
    b_us: float | None
    kernels_a: tuple[str, ...]
    kernels_b: tuple[str, ...]
    match: Match | None = None  # by layer name only
    absent_a: Absence | None = None
    absent_b: Absence | None = None
    spread_us: float = 0.0  # how far the runs scatter this layer's time, both sides together

    def shown(self, side: str) -> str:
        """Side "a" or "b" as a table cell: its time in ms, or why it has none."""
        us, absence = (self.a_us, self.absent_a) if side == "a" else (self.b_us, self.absent_b)
        return str(absence) if us is None else f"{us / 1e3:.3f}"

    @property
    def within_noise(self) -> bool:
        """The change is no larger than the runs' own scatter (``layer_spread``, both
        sides added): it may be noise. False when neither side has any (one run each)."""
        return self.spread_us > 0 and abs(self.change_us) <= self.spread_us

    @property
    def change_us(self) -> float:
        """b - a, a side without time counted as 0."""
        return (self.b_us or 0.0) - (self.a_us or 0.0)

    @property
    def ratio(self) -> float | None:
        """b / a: below 1 means B is faster."""
        if self.a_us is None or self.b_us is None or self.a_us == 0:
            return None
        return self.b_us / self.a_us


def same_model(
    lineage_a,
    lineage_b,
    why: str = "if they are one model through two frontends (torch and ONNX), diff them --by-layer",
) -> None:
    """Refuses two lineages whose model ops differ (by origin id), naming some on each
    side, and ``why`` (what to do instead, or why one model is needed)."""
    ids_a = {o.id for o in lineage_a.origins.values() if o.kind == OP}
    ids_b = {o.id for o in lineage_b.origins.values() if o.kind == OP}
    if ids_a != ids_b:
        only_a, only_b = sorted(ids_a - ids_b), sorted(ids_b - ids_a)
        raise RelaytraceError(
            f"A and B are not the same model's ops (A: {lineage_a.build.model!r}, B: {lineage_b.build.model!r}): "
            f"{len(only_a)} ops only in A (e.g. {', '.join(only_a[:3])}), "
            f"{len(only_b)} only in B (e.g. {', '.join(only_b[:3])}); {why}"
        )


def compare(
    lineage_a, profile_a, lineage_b, profile_b, policy: PolicyName | str = PolicyName.ANCHOR, by_layer: bool = False
) -> tuple[LayerDiff, ...]:
    """Per layer of A then B: the time on each side (None: no time there). By origin
    ids (one model, two builds; refused otherwise), or ``by_layer`` name."""
    if by_layer:
        _some_common_layer(lineage_a, lineage_b)
    else:
        same_model(lineage_a, lineage_b)
    a, spread_a = _timed(lineage_a, profile_a, policy)
    b, spread_b = _timed(lineage_b, profile_b, policy)
    layers = list(dict.fromkeys(list(lineage_a.layers()) + list(a) + list(lineage_b.layers()) + list(b)))
    ops_a, ops_b = _layer_ops(lineage_a), _layer_ops(lineage_b)
    rows = (
        LayerDiff(
            layer,
            a[layer].us if layer in a else None,
            b[layer].us if layer in b else None,
            _kernels(lineage_a, layer),
            _kernels(lineage_b, layer),
            _match(ops_a.get(layer), ops_b.get(layer)) if by_layer else None,
            None if layer in a else absent(lineage_a, layer, "A"),
            None if layer in b else absent(lineage_b, layer, "B"),
            spread_a.get(layer, 0.0) + spread_b.get(layer, 0.0),
        )
        for layer in layers
    )
    return tuple(sorted(rows, key=lambda r: -abs(r.change_us)))


def _timed(lineage, profile, policy):
    """(layer -> its LayerRow, layer -> its spread), from one attribution of the profile."""
    parts = attribution.shares(lineage, profile, policy)
    return {r.layer: r for r in attribution.layers_from(parts)}, layer_spread(parts, profile)


def layer_spread(shares, profile) -> dict[str, float]:
    """layer -> how far its time scatters over the profile's runs: each of its
    ``shares`` (``attribution.shares``) of a call site's median scaled by that site's
    max - min over median. 0 with one run."""
    times = profile.site_times()
    spread: dict[str, float] = {}
    for share in shares:
        t = times[share.key]
        if t.median_us > 0 and t.runs > 1:
            spread[share.layer] = spread.get(share.layer, 0.0) + share.us * (t.max_us - t.min_us) / t.median_us
    return spread


def absent(lineage, layer: str, side: str) -> Absence:
    """Why a layer has no time of its own in a lineage's profile: its ops run inside
    kernels another layer anchors (``fused into conv1``), in no kernel (eliminated, or
    VM builtins only), or the model has no such layer."""
    if layer not in lineage.layers():
        return Absence(Why.NOT_IN, side=side)
    anchors = [lineage.origins[s.anchor].layer for s in lineage.kernels_of(layer) if s.anchor]
    hosts = tuple(a for a in dict.fromkeys(anchors) if a != layer)
    return Absence(Why.FUSED, hosts) if hosts else Absence(Why.NO_KERNEL)


def totals(rows: tuple[LayerDiff, ...]) -> tuple[float, float]:
    """(A, B) summed over the layers that have time there."""
    return sum(r.a_us or 0.0 for r in rows), sum(r.b_us or 0.0 for r in rows)


def match_summary(rows: tuple[LayerDiff, ...]) -> str:
    """One line on how ``compare(..., by_layer=True)`` matched the layers (names as
    ``terminal`` shows them)."""
    found = {m: [r.layer for r in rows if r.match == m] for m in Match}
    both = len(found[Match.SAME]) + len(found[Match.DIFFERENT])
    only = [
        f"{len(v)} {k} ({', '.join(map(terminal, v[:5]))}{' ...' if len(v) > 5 else ''})"
        for k, v in found.items()
        if k in (Match.ONLY_A, Match.ONLY_B) and v
    ]
    return (
        f"matched by layer name: {both} layers on both sides ({len(found[Match.SAME])} with the same ops, "
        f"{len(found[Match.DIFFERENT])} with different ops)" + "".join(f"; {o}" for o in only)
    )


def _layer_ops(lineage) -> dict[str, Counter]:
    """layer -> how many ops of each kind it has (two matmuls are not one)."""
    out: dict[str, Counter] = {}
    for o in lineage.origins.values():
        if o.kind == OP:
            out.setdefault(o.layer, Counter())[o.short_op] += 1
    return out


def _match(ops_a, ops_b) -> Match:
    if ops_a is None:
        return Match.ONLY_B
    if ops_b is None:
        return Match.ONLY_A
    return Match.SAME if ops_a == ops_b else Match.DIFFERENT


def _some_common_layer(lineage_a, lineage_b) -> None:
    if not set(lineage_a.layers()) & set(lineage_b.layers()):
        raise RelaytraceError(
            f"{lineage_a.build.model!r} and {lineage_b.build.model!r} have no layer name in common: "
            "nothing to compare by layer"
        )


def _kernels(lineage, layer) -> tuple[str, ...]:
    try:
        return tuple(s.label for s in lineage.kernels_of(layer))
    except KeyError:
        return ()


def read_reference(path) -> dict[str, float]:
    """External per-layer times: a CSV with a ``layer`` column and a ``time_us`` or a
    ``time_ms`` column (not both: which one counts?); UTF-8, with or without Excel's
    byte-order mark. A time must be a finite, non-negative number; a layer is listed
    once (which row would count?). A layer cell is read as ``csv_value`` reads it: our
    own ``layers.csv`` (whose ``'=...`` cells were neutralised) names its layers as the
    model does. Whatever does not read so is one line naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no reference file at {path}")
    try:
        return _reference_rows(path)
    except UnicodeDecodeError:
        raise FileFormatError(f"{path} is not a UTF-8 text file: save the reference as CSV (UTF-8)") from None


def _reference_rows(path: Path) -> dict[str, float]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        try:
            fields = reader.fieldnames or []
            units = [u for u in ("time_us", "time_ms") if u in fields]
            twice = sorted({c for c in fields if fields.count(c) > 1})
            if "layer" not in fields or not units:
                raise FileFormatError(f"{path}: needs columns 'layer' and 'time_us' or 'time_ms' (found {fields})")
            if len(units) > 1:
                raise FileFormatError(
                    f"{path}: has both time_us and time_ms: keep one, so that it is clear which times count"
                )
            if twice:
                raise FileFormatError(
                    f"{path}: has the column{'s' if len(twice) > 1 else ''} {', '.join(twice)} twice: keep one of each"
                )
            unit = units[0]
            out: dict[str, float] = {}
            lines: dict[str, int] = {}  # layer -> the line it is first listed on
            for row in reader:
                line = reader.line_num
                try:
                    value = float(row[unit])
                    if not 0 <= value < float("inf"):
                        raise ValueError
                except (TypeError, ValueError):
                    raise FileFormatError(
                        f"{path}:{line}: {unit} {row[unit]!r} is not a time (a number from 0)"
                    ) from None
                layer = csv_value(row["layer"] or "")
                if layer in lines:
                    raise FileFormatError(
                        f"{path}:{line}: layer {layer!r} is listed again (first on line "
                        f"{lines[layer]}): give each layer once"
                    )
                lines[layer], out[layer] = line, value * (1e3 if unit == "time_ms" else 1.0)
        except csv.Error as exc:  # a cell over the csv module's field limit (128 KiB): the record after line_num
            raise FileFormatError(f"{path}:{reader.line_num + 1}: not a CSV table of layer times ({exc})") from None
    return out


def compare_reference(lineage, profile, reference: dict[str, float], policy: PolicyName | str = PolicyName.ANCHOR):
    """Layers of the model against the reference; a layer the reference lacks is None
    (missing), never zero. Reference layers the model does not have are returned too."""
    rows, spread = _timed(lineage, profile, policy)
    ours = {layer: r.us for layer, r in rows.items()}
    layers = list(dict.fromkeys(list(ours) + [layer for layer in lineage.layers() if layer not in ours]))
    rows = tuple(
        LayerDiff(
            layer,
            ours.get(layer),
            reference.get(layer),
            _kernels(lineage, layer),
            (),
            absent_a=None if layer in ours else absent(lineage, layer, "A"),
            absent_b=None if layer in reference else Absence(Why.NOT_IN, side="the reference"),
            spread_us=spread.get(layer, 0.0),
        )
        for layer in layers
    )
    unknown = tuple(layer for layer in reference if layer not in set(layers))
    return rows, unknown
