"""The sweep's fit (``analysis.sweep``) and its files (``render.sweep``), on points whose
curve is known."""

from __future__ import annotations

import pytest

from relaytrace.analysis.sweep import SweepPoint, fit_sweep
from relaytrace.render.sweep import fits_csv, sweep_csv, sweep_html, sweep_svg, sweep_table


def _points(curves, contexts=(64, 256, 1024), batches=(1, 8)):
    """Points whose layers take ``base + B * (seq + token * C)`` µs exactly."""
    return [
        SweepPoint(c, b, {name: a + b * (s + t * c) for name, (a, s, t) in curves.items()}, 1000.0 + b * c)
        for b in batches
        for c in contexts
    ]


def test_a_known_curve_is_recovered_and_projected():
    sweep = fit_sweep("batch_decode", _points({"attn": (5.0, 2.0, 0.01), "mlp": (20.0, 3.0, 0.0)}))
    attn = next(f for f in sweep.fits if f.layer == "attn")
    assert (attn.base_us, attn.per_sequence_us, attn.per_cached_token_us) == pytest.approx((5.0, 2.0, 0.01))
    assert attn.error == pytest.approx(0, abs=1e-9) and attn.at(4096, 32) == pytest.approx(5 + 32 * (2 + 40.96))
    assert sweep.fits[0].layer == "attn"  # the slowest at the largest point first


def test_noise_never_fits_a_negative_slope():
    points = _points({"mlp": (20.0, 3.0, 0.0)})
    noisy = [SweepPoint(p.context, p.batch, {"mlp": p.layer_us["mlp"] * (0.9 if p.context > 500 else 1.0)}, 1.0)
             for p in points]  # fmt: skip
    mlp = fit_sweep("decode", noisy).fits[0]
    assert min(mlp.base_us, mlp.per_sequence_us, mlp.per_cached_token_us) >= 0 and mlp.error > 0


def test_too_few_points_are_refused_in_words():
    with pytest.raises(ValueError, match="at least 3 points"):
        fit_sweep("decode", _points({"a": (1.0, 1.0, 1.0)}, contexts=(64,), batches=(1, 2)))


def test_the_files_hold_every_point_and_escape_hostile_names():
    hostile = "<script>alert(1)</script>\x1b[31m=cmd"
    sweep = fit_sweep("decode", _points({hostile: (1.0, 1.0, 0.1)}))
    assert len(sweep_csv(sweep).splitlines()) == 1 + 2 * 6  # the layer and the step at six points
    assert "at_8192_batch_8_us" in fits_csv(sweep, 8192).splitlines()[0]
    svg = sweep_svg(sweep)
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "\x1b" not in svg
    assert "\x1b" not in sweep_table(sweep, 8192)


def test_the_page_plots_the_sweep_and_tables_every_fit_with_the_device_bound_labelled():
    hostile = "<img src=x onerror=alert(1)>\x1b[31m"
    curves = {hostile: (2.0, 1.0, 0.05), "mlp": (5.0, 3.0, 0.0)}
    sweep, device = fit_sweep("batch_decode", _points(curves)), fit_sweep("bound", _points(curves))
    page = sweep_html(sweep, 8192, device)
    assert "<img" not in page and "&lt;img" in page and "\x1b" not in page and "<script" not in page
    assert page.count("<svg") == 2 and "ESTIMATE, not a measurement" in page and "dots each point&#x27;s bound" in page
    rows = [r for r in page.split("<tr>") if r.startswith("<td>")]
    assert len(rows) == 2 * 3  # two layers and the step, measured and bounded
    # the hostile layer's row: 2 us base, 1 per sequence, 50 per 1k cached, at 8192 x 8 in ms
    row = next(r for r in rows if "onerror" in r)
    cells = [c.split("</td>")[0] for c in row.split("<td>")[1:]]
    assert cells[1:4] == ["2", "1", "50"] and float(cells[-1]) == pytest.approx(
        (2 + 8 * (1 + 0.05 * 8192)) / 1e3, rel=1e-3
    )
    assert "at context" not in sweep_html(sweep, None)
