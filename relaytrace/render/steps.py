"""An LLM served as an engine serves one sequence — its prompt's prefill, then a decode
step — as one table: each layer's share of the time to the first token and of the time
per output token (``steps.csv``, and the terminal's lines). Reads only the two reports;
a layer's name is escaped as text in every format."""

from __future__ import annotations

from .export import csv_text
from .safe_text import terminal


def _rows(prefill, decode) -> list[tuple[str, float, float]]:
    """(layer, µs in the prefill step, µs in the decode step), the decode's slowest first."""
    first = {r.layer: r.us for r in prefill.layers}
    then = {r.layer: r.us for r in decode.layers}
    layers = sorted(set(first) | set(then), key=lambda name: (-then.get(name, 0.0), -first.get(name, 0.0), name))
    return [(name, first.get(name, 0.0), then.get(name, 0.0)) for name in layers]


def steps_csv(prefill, decode) -> str:
    """layer, prefill µs (its share of the time to the first token), decode µs (its share
    of the time per output token), and each as a percent of its step's kernels."""
    total_first = sum(r.us for r in prefill.layers) or 1.0
    total_then = sum(r.us for r in decode.layers) or 1.0
    rows = [
        [name, round(a, 3), round(100 * a / total_first, 2), round(b, 3), round(100 * b / total_then, 2)]
        for name, a, b in _rows(prefill, decode)
    ]
    return csv_text(["layer", "prefill_us", "prefill_percent", "decode_us", "decode_percent"], rows)


def steps_summary(prefill, decode, top: int = 10) -> str:
    """The two serving figures, each step's size, and the ``top`` layers by decode time
    with their prefill time beside."""
    (tokens, _), (_, context) = prefill.profile.step, decode.profile.step
    lines = [
        f"served one sequence: time to first token {prefill.profile.e2e_median_us / 1e3:.3f} ms "
        f"({prefill.profile.entry}, {tokens} token(s)); time per output token "
        f"{decode.profile.e2e_median_us / 1e3:.3f} ms ({decode.profile.entry} at context {context})",
        f"{'layer':<44} {'prefill (ms)':>12} {'decode (ms)':>12}",
    ]
    for name, a, b in _rows(prefill, decode)[:top]:
        lines.append(f"{terminal(name)[:44]:<44} {a / 1e3:12.3f} {b / 1e3:12.3f}")
    return "\n".join(lines)
