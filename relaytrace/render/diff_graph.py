"""Layer graphs coloured by a per-layer figure: a diff's speedup (green: B faster,
red: B slower, with a legend of the colour steps), a comparison's numerical error."""

from __future__ import annotations

import graphviz

from ..analysis import attribution
from ..model.numerics import BEYOND, FUSED
from .graphviz import _label, _node_names

_FASTER = ("#edf8e9", "#bae4b3", "#74c476", "#31a354", "#006d2c")
_SLOWER = ("#fee5d9", "#fcae91", "#fb6a4a", "#de2d26", "#a50f15")


def _fill(ratio: float | None) -> dict:
    if ratio is None:
        return {"fillcolor": "#e0e0e0"}
    scale, amount = (_FASTER, 1 / ratio) if ratio < 1 else (_SLOWER, ratio)
    step = min(int((amount - 1) * 4), len(scale) - 1)  # each +25% one step darker
    return {"fillcolor": scale[step], "fontcolor": "white" if step >= 3 else "black"}


def diff_graph(lineage, rows):
    """The layer graph coloured by each layer's time difference (``LayerDiff`` rows of ``diff``)."""
    by_layer = {r.layer: r for r in rows}

    def describe(layer):
        ratio = by_layer[layer].ratio if layer in by_layer else None
        return ("no time" if ratio is None else f"x{ratio:.2f}"), _fill(ratio)

    g = _layers(lineage, "diff", f"{lineage.build.model}: B / A per layer (green = B faster)", describe)
    _legend(g)
    return g


_ERROR = ("#f7fbff", "#c6dbef", "#6baed6", "#2171b5", "#08306b")  # tolerance ratio: <0.01, <0.1, <1, <10, above


def error_graph(lineage, comparison):
    """The layer graph of a ``Comparison``: compared layers coloured by how close to
    the tolerance their output is (red: beyond), fused layers dashed and naming the
    kernel call that holds them, the rest grey with the reason."""
    by_layer = {e.layer: e for e in comparison.layers}

    def describe(layer):
        e = by_layer.get(layer)
        if e is None or not e.compared:
            note = _not_compared(e) if e else "not in the comparison"
            return note, {"fillcolor": "#eeeeee", "style": "rounded,filled,dashed", "fontcolor": "#555555"}
        text = f"max abs {e.max_abs:.3g}" if e.max_abs is not None else f"{e.nan} NaN, {e.inf} Inf"
        if e.status == BEYOND:
            return f"BEYOND: {text}", {"fillcolor": "#d7301f", "fontcolor": "white"}
        ratio = e.tolerance_ratio or 0.0
        step = sum(ratio >= limit for limit in (0.01, 0.1, 1, 10))
        return text, {"fillcolor": _ERROR[step], "fontcolor": "white" if step >= 3 else "black"}

    return _layers(
        lineage,
        "errors",
        f"{lineage.build.model}: each layer's output against the reference (atol {comparison.atol:g}, rtol "
        f"{comparison.rtol:g}; darker: closer to the tolerance; red: beyond)",
        describe,
    )


def _not_compared(e) -> str:
    """Why a layer's node shows no error: its outcome, and for a fused layer the call
    that holds its value (the full reason is the comparison's note)."""
    return f"{e.status.value}: {e.site}" if e.status == FUSED and e.site else e.status.value


def _layers(lineage, name: str, title: str, describe):
    """One node per layer (``describe(layer)`` -> second label line, node attributes)
    and the dataflow edges between layers; labels through ``graphviz._label``."""
    layer_of = attribution.layer_of_ops(lineage)
    node = _node_names(dict.fromkeys(layer_of.values()))
    g = graphviz.Digraph(
        name,
        graph_attr={"label": _label(title), "labelloc": "t", "fontname": "Helvetica"},
        node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica", "fontsize": "10"},
    )
    for layer, dot_name in node.items():
        text, attrs = describe(layer)
        g.node(dot_name, _label(layer, text), **attrs)
    for a, b in attribution.edges_between(lineage, layer_of):
        g.edge(node[a], node[b])
    return g


def _legend(graph) -> None:
    """One box per colour step: each 25% of speedup or slowdown is one step darker."""
    ratios = [None] + [1 / (1 + i / 4) for i in range(4, 0, -1)] + [1 + i / 4 for i in range(5)]
    with graph.subgraph(name="cluster_legend") as legend:
        legend.attr(label="B / A (green: B faster)", fontsize="10", style="rounded")
        for i, ratio in enumerate(ratios):
            legend.node(
                f"legend{i}", "no time on a side" if ratio is None else f"x{ratio:.2f}", fontsize="9", **_fill(ratio)
            )
            if i:
                legend.edge(f"legend{i - 1}", f"legend{i}", style="invis")
