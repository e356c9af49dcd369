"""A numerical comparison of a compiled model against its source framework, layer by
layer: the data (``LayerError``, ``Comparison``) and the statistics of one pair of
arrays (``error_of``, which alone needs numpy: reading a comparison does not import it).
Needs neither TVM nor torch.

A layer's output is its last op's output. It is compared where a kernel call site
writes it (``relaytrace.analysis.layer_outputs``); a layer whose output stays inside a kernel
(fused into the next layer's ops) is ``fused``, with the call site that holds it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import attrs
from attrs import define

from ..errors import FileFormatError
from .codec import decode, encode
from .jsonio import migrate, read_record, write_json
from .names import Name

if TYPE_CHECKING:
    import numpy as np

SCHEMA = "relaytrace.compare/3"  # /3 added the divergence found inside a kernel, /2 each layer's route
_MIGRATIONS = {  # each only added fields: older files load (no route known, no divergence searched)
    old: lambda data, where: {**data, "schema": SCHEMA} for old in ("relaytrace.compare/1", "relaytrace.compare/2")
}


class Outcome(Name):
    """A layer's comparison: inside the tolerance or beyond it, or why it was not
    compared (its output is fused into a later kernel, never written, or not
    comparable with the reference's)."""

    WITHIN = "within"
    BEYOND = "beyond"
    FUSED = "fused"
    NO_OUTPUT = "no output"
    NOT_COMPARABLE = "not comparable"


WITHIN, BEYOND, FUSED, NO_OUTPUT, NOT_COMPARABLE = Outcome


class Route(Name):
    """How a compared layer's value was read from the build (``analysis.layer_outputs``):
    written by its kernel as it is (``direct``), after ops that only move data, applied
    to the reference too (``through data movement``), or from a rebuild that writes out
    a value the build keeps inside a kernel (``observed build``: ``compare --observe``)."""

    DIRECT = "direct"
    MOVED = "through data movement"
    OBSERVED = "observed build"


DIRECT, MOVED, OBSERVED = Route


@define(frozen=True)
class LayerError:
    """One layer's output, compiled against the reference. Figures are None when the
    layer was not compared (``status`` fused / no output / not comparable, ``note``
    says why) or undefined (``error_of``)."""

    layer: str
    status: Outcome
    site: str = ""  # the kernel call site (or VM builtin) that writes, or holds, the output
    note: str = ""
    shape: tuple[int, ...] = ()
    max_abs: float | None = None
    max_rel: float | None = None  # max abs error / the reference's largest magnitude
    tolerance_ratio: float | None = None  # max of |got - ref| / (atol + rtol |ref|): above 1 is beyond
    cosine: float | None = None
    nan: int = 0  # NaNs in the compiled output
    inf: int = 0
    reference_nan: int = 0  # NaNs (and Infs) in the reference's
    route: Route | None = None  # how the value was read, for a layer compared

    @property
    def compared(self) -> bool:
        """The layer's value was compared (within or beyond tolerance), not skipped."""
        return self.status in (WITHIN, BEYOND)


@define(frozen=True)
class Probe:
    """One rebuild of a search inside a kernel (``analysis.narrow``): the ops whose
    values it wrote out (origin ids, in run order) and which of them were beyond the
    tolerance; an op it could not compare is in neither ``within`` nor ``beyond``."""

    ops: tuple[str, ...]
    beyond: tuple[str, ...] = ()
    within: tuple[str, ...] = ()


@define(frozen=True)
class Divergence:
    """The first op beyond the tolerance inside the kernel that writes the first layer
    beyond it, found by rebuilds that write the kernel's ops' values out
    (``analysis.narrow``). ``error``: that op's value compared (its row's ``layer`` is
    the op's origin id); ``after``: the op before it in the kernel found within the
    tolerance ("" when none: it is the first op of the kernel compared, so the
    divergence may come in with the kernel's inputs, ``note`` says so); ``candidates``:
    the kernel's ops up to the layer's, with a value of their own in the source program
    (the last op of each source node), the search chose from."""

    layer: str  # the first layer beyond the tolerance, where the search began
    site: str  # the kernel call sites that run the op's source node, in run order, ", "-joined
    op: str  # the first op found beyond: its origin id
    op_layer: str
    short_op: str
    source: str  # where in the user's code it was made ("file.py:LINE", an ONNX node), "" unknown
    error: LayerError
    after: str = ""
    candidates: tuple[str, ...] = ()
    rebuilds: tuple[Probe, ...] = ()
    note: str = ""
    node_ops: tuple[str, ...] = ()  # the ops its source node was translated into (conv2d, add), in order
    read_here: tuple[str, ...] = ()  # the candidates compared on the build itself (its kernels write them)

    def summary(self) -> str:
        """One line: the op, its layer and line, its error, and what it took."""
        where = f" at {self.source}" if self.source else ""
        observed = sum(len(p.ops) for p in self.rebuilds)
        took = [
            f"{len(self.rebuilds)} rebuild{'s' if len(self.rebuilds) != 1 else ''} writing out {observed} of "
            f"the {len(self.candidates)} ops' values"
        ] * bool(self.rebuilds)
        took += [f"{len(self.read_here)} read from the build itself"] * bool(self.read_here)
        error = self.error
        before = f", after {self.after} within" if self.after else ""
        what = "+".join(self.node_ops) if len(self.node_ops) > 1 else self.short_op
        line = f"first op beyond the tolerance, in {self.site}: {what} of {self.op_layer}{where}"
        line += f" ({_badness(error)}{before}; {', '.join(took) or 'the layer compared says it'})"
        return f"{line}; {self.note}" if self.note else line


@define(frozen=True)
class Comparison:
    """Every layer of one entry in run order, and the tolerance they were judged by."""

    model: str
    entry: str
    atol: float
    rtol: float
    precision: str  # "as built", or the ToMixedPrecision setting the build was made with
    layers: tuple[LayerError, ...]
    tolerance: str = "given"  # where atol and rtol came from: "given", or the default they are for
    divergence: Divergence | None = None  # the first op beyond inside its kernel, when searched
    schema: str = SCHEMA

    @property
    def first_beyond(self) -> LayerError | None:
        """The first layer in run order whose output is beyond the tolerance."""
        return next((e for e in self.layers if e.status == BEYOND), None)

    @property
    def first_nan(self) -> LayerError | None:
        """The first layer in run order whose compiled output holds a NaN or an Inf."""
        return next((e for e in self.layers if e.nan or e.inf), None)

    def worst(self, n: int = 5) -> tuple[LayerError, ...]:
        """The ``n`` compared layers farthest beyond their tolerance, farthest first: by
        ``tolerance_ratio``, a layer whose output holds a NaN or an Inf (an overflow) or
        differs where nothing is tolerated counting as infinitely far, ties in run order
        (the first overflow before the layers it reaches). Where the build's precision
        hurts most, not only where it first shows."""
        beyond = [e for e in self.layers if e.status == BEYOND]
        return tuple(sorted(beyond, key=_farness)[:n])

    def counts(self) -> dict[str, int]:
        """Status -> how many layers have it."""
        return {s: sum(1 for e in self.layers if e.status == s) for s in Outcome}

    def summary(self) -> str:
        """Two or three lines: how many layers were compared and within, how many were
        not compared for each reason (``_SKIPPED``; the counts add up to the layers), the
        first one beyond (with its kernel call site) and the first NaN, in words."""
        c = self.counts()
        moved = sum(1 for e in self.layers if e.compared and e.route == MOVED)
        kept = sum(1 for e in self.layers if e.compared and e.route == OBSERVED)
        given = "" if self.tolerance == "given" else f", {self.tolerance}"
        skipped = [f"{c[status]} {what}" for status, what in _SKIPPED if c[status]]
        lines = [
            f"{c[WITHIN] + c[BEYOND]} of {len(self.layers)} layers compared (atol {self.atol:g}, rtol "
            f"{self.rtol:g}{given}; {self.precision}): {c[WITHIN]} within, {c[BEYOND]} beyond"
            f"{_routes(moved, kept)}" + (f"; not compared: {', '.join(skipped)}" if skipped else "")
        ]
        first = self.first_beyond
        none = "no layer beyond the tolerance" if c[WITHIN] else "no layer compared, so none beyond the tolerance"
        lines.append(
            f"first layer beyond the tolerance: {first.layer} ({_badness(first)}, in {first.site})" if first else none
        )
        worst = self.worst()
        if len(worst) > 1 or (worst and worst[0] is not first):
            lines.append("farthest beyond it: " + ", ".join(f"{e.layer} ({_farness_said(e)})" for e in worst))
        if self.divergence is not None:
            lines.append(self.divergence.summary())
        if self.first_nan:
            e = self.first_nan
            lines.append(
                f"first layer with NaN/Inf in its compiled output: {e.layer} ({e.nan} NaN, {e.inf} Inf, "
                f"in {e.site}; the reference has {e.reference_nan})"
            )
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The comparison as plain JSON data, as ``save`` writes it."""
        first, nan = self.first_beyond, self.first_nan
        return {
            "schema": self.schema,
            **encode(self),
            "first_beyond": first.layer if first else None,  # derived, for scripts
            "first_nan": nan.layer if nan else None,
        }

    @classmethod
    def from_json(cls, data, where: str = "compare") -> Comparison:
        """The comparison a JSON object holds, every field checked (a
        ``FileFormatError`` naming it otherwise)."""
        data = migrate(
            data, _MIGRATIONS, SCHEMA, "compare", where, made_by="`relaytrace compare --out DIR` (or Comparison.save)"
        )
        comparison = decode(cls, {k: v for k, v in data.items() if k not in _DERIVED}, where)
        _check_ranges(comparison, where)
        return comparison

    def save(self, path, overwrite: bool = False):
        """Writes ``compare.json`` whole or not at all; an existing file only with ``overwrite``."""
        return write_json(path, self.to_json(), overwrite)

    @classmethod
    def load(cls, path) -> Comparison:
        """The comparison saved at ``path``; a corrupt file is a one-line format error."""
        return read_record(path, "compare", cls.from_json)


_DERIVED = ("first_beyond", "first_nan")  # written for scripts, made again from the layers
_COUNTS = ("nan", "inf", "reference_nan")  # counts of elements
_ERRORS = ("max_abs", "max_rel", "tolerance_ratio")  # magnitudes, or None


def with_observed(comparison: Comparison, observed: Comparison, layers) -> Comparison:
    """``comparison`` with each of ``layers`` it did not compare judged as in
    ``observed``, the comparison of a rebuild that writes their values out
    (``analysis.observe``): route ``observed build``, and a note naming the kernel of
    the compared build that held the value (fused) or wrote it in a form not compared,
    the one kernel the rebuild splits for it. A layer compared in the build itself
    keeps its row; one the rebuild could not compare either keeps its row, with the
    rebuild's reason added."""
    found = {e.layer: e for e in observed.layers}
    out = []
    for e in comparison.layers:
        seen = found.get(e.layer) if e.layer in layers and not e.compared else None
        if seen is None:
            out.append(e)
        elif seen.compared:
            how = "keeps it inside" if e.status == FUSED else "writes it, not comparably, in"
            held = f" (this build {how} {e.site})" if e.site else ""
            out.append(
                attrs.evolve(
                    seen,
                    route=OBSERVED,
                    note="; ".join(
                        n
                        for n in (
                            seen.note,
                            f"read from {seen.site} of a rebuild that writes it out{held}: the two differ in that "
                            "kernel only",
                        )
                        if n
                    ),
                )
            )
        else:
            out.append(
                attrs.evolve(e, note=f"{e.note}; the rebuild that keeps it could not compare it either: {seen.note}")
            )
    return attrs.evolve(comparison, layers=tuple(out))


def default_tolerance(accumulate: str | None = None) -> tuple[float, float, str]:
    """``(atol, rtol, why)`` a comparison judges by when the user gives none, from how
    the build computes: float32 as built (``accumulate`` None), or float16 through
    ToMixedPrecision accumulating in ``accumulate`` (float32 or float16). Chosen so that
    a sound build of the zoo's models has no layer beyond them, so that "beyond" points
    at a layer that loses more than its precision must: float32 1e-4; float16 1e-2
    (ten times its unit roundoff, 4.9e-4, over a layer's chain of ops), 5e-2 when it
    also accumulates in float16."""
    if accumulate is None:
        return 1e-4, 1e-4, "the default for float32"
    if accumulate == "float32":
        return 1e-2, 1e-2, "the default for float16 accumulating in float32"
    return 5e-2, 5e-2, "the default for float16 accumulating in float16"


def _check_ranges(comparison: Comparison, where: str) -> None:
    """Every figure of a comparison is one ``error_of`` can make: tolerances, counts,
    errors and dims at least 0, a cosine from -1 to 1, each layer once, none within
    tolerance at a tolerance ratio above 1; a ``FileFormatError``
    naming the file and field otherwise (an edited or corrupt file)."""
    layers = comparison.layers
    fields = [(key, getattr(comparison, key)) for key in ("atol", "rtol")]
    for i, e in enumerate(layers):
        fields += [(f"layers[{i}].{name}", getattr(e, name)) for name in _COUNTS + _ERRORS]
        fields += [(f"layers[{i}].shape", min(e.shape, default=0))]
    for name, value in fields:
        if value is not None and value < 0:
            raise FileFormatError(
                f"{where}: {name} must be at least 0, not {value!r}: the file was edited or is "
                "corrupt; run `relaytrace compare` again"
            )
    seen: set[str] = set()
    for i, e in enumerate(layers):
        if e.layer in seen:
            raise FileFormatError(
                f"{where}: layers[{i}] is layer {e.layer!r} again: each layer is compared once; "
                "the file was edited or is corrupt; run `relaytrace compare` again"
            )
        seen.add(e.layer)
        if e.status == WITHIN and e.tolerance_ratio is not None and e.tolerance_ratio > 1:
            raise FileFormatError(
                f"{where}: layers[{i}] is within tolerance at a tolerance ratio of "
                f"{e.tolerance_ratio:g}: above 1 is beyond it; the file was edited or is corrupt; "
                "run `relaytrace compare` again"
            )
        finite = not (e.nan or e.inf or e.reference_nan)  # else beyond by a non-finite value (``error_of``)
        if e.status == BEYOND and finite and e.tolerance_ratio is not None and e.tolerance_ratio <= 1:
            raise FileFormatError(
                f"{where}: layers[{i}] is beyond tolerance at a tolerance ratio of {e.tolerance_ratio:g}: "
                "1 or below is within it; the file was edited or is corrupt; run `relaytrace compare` again"
            )
        if e.cosine is not None and not -1 - 1e-6 <= e.cosine <= 1 + 1e-6:
            raise FileFormatError(
                f"{where}: layers[{i}].cosine must be from -1 to 1, not {e.cosine!r}: the file "
                "was edited or is corrupt; run `relaytrace compare` again"
            )


def _farness_said(e: LayerError) -> str:
    """How far beyond its tolerance a layer is, as the summary says it: its NaNs and
    Infs, or the times its tolerance its worst element is off."""
    return _badness(e) if e.nan or e.inf else f"x{_num(e.tolerance_ratio)}"


def _farness(e: LayerError) -> float:
    """How far beyond its tolerance a layer is, as a sort key (farthest first)."""
    if e.nan or e.inf or e.tolerance_ratio is None:
        return -math.inf
    return -e.tolerance_ratio


# each reason a layer was not compared, as the summary counts it (those with none are left out)
_SKIPPED = (
    (FUSED, "fused into a kernel that does not write them out"),
    (NO_OUTPUT, "with no output (the last op eliminated by a pass, or run in no kernel)"),
    (NOT_COMPARABLE, "not comparable with the reference's value"),
)


def _routes(moved: int, kept: int) -> str:
    said = [f"{moved} read through data movement"] * bool(moved)
    said += [f"{kept} from a rebuild that writes them out"] * bool(kept)
    return f" ({', '.join(said)})" if said else ""


def _badness(e: LayerError) -> str:
    """How far a compared output is from the reference, in words: its NaNs and Infs
    when it has any (an error over the finite elements alone says little then), else
    its largest error."""
    if e.nan or e.inf:
        return f"{e.nan} NaN, {e.inf} Inf"
    return f"max abs error {_num(e.max_abs)}"


def _num(value) -> str:
    return "n/a (no element finite on both sides)" if value is None else f"{value:.3g}"


def error_of(layer: str, site: str, got: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> LayerError:
    """The statistics of one layer's compiled output ``got`` against the reference
    ``ref`` (same shape; both taken as float64). A NaN or Inf where the reference has
    a finite value (or the other way round) is beyond any tolerance; the same
    non-finite value on both sides is not an error. The errors are over the elements
    finite on both sides (None when there are none); ``max_rel`` is None when the
    reference is all zeros and the output is not, ``tolerance_ratio`` when atol is 0
    and an element differs where the reference is 0 (both beyond)."""
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    nan, inf = int(np.isnan(got).sum()), int(np.isinf(got).sum())
    reference_nan = int((~np.isfinite(ref)).sum())
    both = np.isfinite(got) & np.isfinite(ref)
    same_bad = ~both & ((np.isnan(got) & np.isnan(ref)) | (got == ref))
    diff = np.abs(got - ref, where=both, out=np.zeros_like(got))
    tolerance = atol + rtol * np.abs(np.where(both, ref, 0.0))
    ratio = np.divide(diff, tolerance, out=np.where(diff > 0, np.inf, 0.0), where=tolerance > 0)
    beyond = bool((~both & ~same_bad).any()) or bool((ratio > 1).any())
    max_abs = float(diff[both].max()) if both.any() else None
    scale = float(np.abs(ref[both]).max()) if both.any() else 0.0
    worst = float(ratio[both].max()) if both.any() else None
    return LayerError(
        layer=layer,
        status=BEYOND if beyond else WITHIN,
        site=site,
        shape=tuple(int(d) for d in ref.shape),
        max_abs=max_abs,
        max_rel=None if max_abs is None or (scale == 0 and max_abs > 0) else (max_abs / scale if scale else 0.0),
        tolerance_ratio=worst if worst is None or np.isfinite(worst) else None,
        cosine=_cosine(got[both], ref[both]) if max_abs is not None else None,
        nan=nan,
        inf=inf,
        reference_nan=reference_nan,
    )


def _cosine(got: np.ndarray, ref: np.ndarray) -> float:
    """Cosine similarity of the flattened arrays; two all-zero arrays are alike (1),
    an all-zero one and another are not (0)."""
    import numpy as np

    a, b = float(np.linalg.norm(got)), float(np.linalg.norm(ref))
    if a == 0 or b == 0:
        return 1.0 if a == b else 0.0
    return float(np.dot(got.ravel(), ref.ravel()) / (a * b))
