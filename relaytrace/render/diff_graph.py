"""The layer graph of a diff, coloured by speedup (green: B faster, red: B slower),
with a legend of the colour steps."""

from __future__ import annotations

import graphviz

from ..model.origin import OP
from .graphviz import _node_names

_FASTER = ("#edf8e9", "#bae4b3", "#74c476", "#31a354", "#006d2c")
_SLOWER = ("#fee5d9", "#fcae91", "#fb6a4a", "#de2d26", "#a50f15")


def _fill(ratio: float | None) -> dict:
    if ratio is None:
        return {"fillcolor": "#e0e0e0"}
    scale, amount = (_FASTER, 1 / ratio) if ratio < 1 else (_SLOWER, ratio)
    step = min(int((amount - 1) * 4), len(scale) - 1)  # each +25% one step darker
    return {"fillcolor": scale[step], "fontcolor": "white" if step >= 3 else "black"}


def diff_graph(lineage, rows):
    by_layer = {r.layer: r for r in rows}
    layer_of = {o.id: o.layer for o in lineage.origins.values() if o.kind == OP}
    node = _node_names(dict.fromkeys(layer_of.values()))
    g = graphviz.Digraph(f"{lineage.model}_diff",
                         graph_attr={"label": f"{lineage.model}: B / A per layer (green = B faster)",
                                     "labelloc": "t", "fontname": "Helvetica"},
                         node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                    "fontsize": "10"})
    for layer, name in node.items():
        row = by_layer.get(layer)
        ratio = row.ratio if row else None
        text = "no time" if ratio is None else f"x{ratio:.2f}"
        g.node(name, f"{layer}\n{text}", **_fill(ratio))
    _legend(g)
    edges = {(layer_of[a], layer_of[b]) for a, b in lineage.edges
             if a in layer_of and b in layer_of and layer_of[a] != layer_of[b]}
    for a, b in sorted(edges):
        g.edge(node[a], node[b])
    return g


def _legend(graph) -> None:
    """One box per colour step: each 25% of speedup or slowdown is one step darker."""
    ratios = [None] + [1 / (1 + i / 4) for i in range(4, 0, -1)] + [1 + i / 4 for i in range(5)]
    with graph.subgraph(name="cluster_legend") as legend:
        legend.attr(label="B / A (green: B faster)", fontsize="10", style="rounded")
        for i, ratio in enumerate(ratios):
            legend.node(f"legend{i}", "no time on a side" if ratio is None else f"x{ratio:.2f}", fontsize="9",
                        **_fill(ratio))
            if i:
                legend.edge(f"legend{i - 1}", f"legend{i}", style="invis")
