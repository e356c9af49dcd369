"""How each layer's time grows with an LLM's context and batch: a fitted curve per layer
from served steps measured at several points (``relaytrace sweep``).

Why: a decode's cost is not one figure. Its attention grows with the tokens in the
cache, its matmuls with the batch, and a profile at one point says neither. Measured at
a grid of (context, batch) points, each layer's time is fitted by non-negative least
squares to
``t = base + per_sequence · B + per_cached_token · B · C`` — a fixed cost, work per
sequence of the batch, and work per cached token each sequence attends to — with the
fit's error stated per layer, so a projection to a context nobody measured says how far
it can be trusted. Pure: it takes the measured points and computes.
"""

from __future__ import annotations

import math

from attrs import define

MIN_POINTS = 3  # three unknowns: base, per sequence, per cached token


@define(frozen=True)
class SweepPoint:
    """One served step measured: ``context`` tokens in each of ``batch`` sequences'
    cache, each layer's median time (``layer_us``) and the step's end to end."""

    context: int
    batch: int
    layer_us: dict[str, float]
    e2e_us: float


@define(frozen=True)
class LayerFit:
    """A layer's time as ``base_us + per_sequence_us · B + per_cached_token_us · B · C``
    (µs), fitted to its measured points; ``error``: the root mean square of the relative
    residuals over the points, ``worst``: the largest relative residual."""

    layer: str
    base_us: float
    per_sequence_us: float
    per_cached_token_us: float
    error: float
    worst: float

    def at(self, context: int, batch: int) -> float:
        """The fitted time of one step at ``context`` and ``batch`` (µs)."""
        return self.base_us + batch * (self.per_sequence_us + self.per_cached_token_us * context)


@define(frozen=True)
class Sweep:
    """The points an entry was measured at and each layer's fit, slowest layer at the
    largest point first; ``step`` the fit of the whole step's end-to-end time."""

    entry: str
    points: tuple[SweepPoint, ...]
    fits: tuple[LayerFit, ...]
    step: LayerFit

    def measured(self, layer: str) -> list[tuple[int, int, float]]:
        """``(context, batch, µs)`` of ``layer`` at each point."""
        return [(p.context, p.batch, p.layer_us.get(layer, 0.0)) for p in self.points]


def fit_sweep(entry: str, points: list[SweepPoint]) -> Sweep:
    """Each layer's fit over ``points`` (at least ``MIN_POINTS`` distinct ones, not all
    of one batch and context product: a ValueError otherwise, said in words)."""
    distinct = {(p.batch, p.batch * p.context) for p in points}
    if len(distinct) < MIN_POINTS or len({p.batch for p in points}) * len({p.context for p in points}) < 2:
        raise ValueError(
            f"a sweep needs at least {MIN_POINTS} points that differ in batch or context "
            f"(got {len(points)}): give more --context or --batch values"
        )
    layers = sorted({layer for p in points for layer in p.layer_us})
    fits = [_fit(layer, [(p.context, p.batch, p.layer_us.get(layer, 0.0)) for p in points]) for layer in layers]
    last = max(points, key=lambda p: (p.batch * p.context, p.batch))
    fits.sort(key=lambda f: -f.at(last.context, last.batch))
    return Sweep(entry, tuple(points), tuple(fits), _fit("(step)", [(p.context, p.batch, p.e2e_us) for p in points]))


def _fit(layer: str, rows: list[tuple[int, int, float]]) -> LayerFit:
    """Least squares of ``t = a + b·B + c·B·C`` over ``rows`` ``(C, B, t)``, each
    residual relative to its point (the points span orders of magnitude), with every
    coefficient 0 or more (no layer gets faster as its context or batch grows: noise
    must not project to a negative time). With three unknowns the constrained optimum
    is the best unconstrained fit over some subset of them that comes out non-negative:
    each subset is tried."""
    import itertools

    import numpy as np

    x = np.array([[1.0, b, b * c] for c, b, _ in rows])
    y = np.array([t for _, _, t in rows])
    weight = np.array([1 / t if t > 0 else 0.0 for t in y])  # each point's error relative to itself
    xw, yw = x * weight[:, None], y * weight
    best, best_residual = np.zeros(3), float(np.sum(yw * yw))
    for size in (1, 2, 3):
        for kept in itertools.combinations(range(3), size):
            solved, *_ = np.linalg.lstsq(xw[:, kept], yw, rcond=None)
            if (solved < 0).any():
                continue
            coefficients = np.zeros(3)
            coefficients[list(kept)] = solved
            residual = float(np.sum((xw @ coefficients - yw) ** 2))
            if residual < best_residual:
                best, best_residual = coefficients, residual
    fitted = x @ best
    relative = [(f - t) / t for f, t in zip(fitted, y) if t > 0]
    error = math.sqrt(sum(r * r for r in relative) / len(relative)) if relative else 0.0
    worst = max((abs(r) for r in relative), default=0.0)
    return LayerFit(layer, float(best[0]), float(best[1]), float(best[2]), error, worst)
