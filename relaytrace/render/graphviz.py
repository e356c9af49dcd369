"""Graphviz pictures of a lineage, coloured by time when a ``Report`` is given.

Layer graph: one node per model op, coloured by the op's own time (a reshape fused
into a hot convolution's kernel is not drawn hot), dataflow edges, one cluster per
kernel call site (kernel name, time, percent). Inserted ops are dashed and name their
pass; eliminated ops are grey; ops the VM runs as a builtin say which. ``collapse=depth``
merges layers by module prefix so big models stay readable; a model of more than
``MAX_OPS`` ops is drawn so by default (``default_collapse``). Kernel graph: one node
per kernel call site.

Every label, id and tooltip goes through ``safe_text.dot_text`` (``_label``): names
are shown as the terminal shows them, and the SVG stays well-formed XML whatever they
hold. Graphs and nodes have DOT names of our own (``layers``, ``n0``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import graphviz

from ..analysis import attribution  # module_prefix
from ..errors import RelaytraceError
from ..model.jsonio import write_atomic
from ..model.lineage import Lineage
from ..model.origin import OP
from .safe_text import dot_text

FORMATS = ("dot", "svg", "png", "pdf")
MAX_OPS = 400
_SCALE = ("#fff5f0", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#99000d")


def _label(*lines: str) -> str:
    """A graphviz label (or id, tooltip) of these lines, each through
    ``safe_text.dot_text``: a line break inside a name is escaped, not drawn."""
    return "\n".join(dot_text(line) for line in lines)


def _index(fraction: float) -> int:
    return min(int(fraction * (len(_SCALE) - 1) + 0.5), len(_SCALE) - 1)


def _colour(fraction: float) -> str:
    """Colour for a share of the hottest item's time (0..1)."""
    return _SCALE[_index(fraction)]


def _fill(fraction: float) -> dict:
    """Fill and a text colour that stays readable on it."""
    return {"fillcolor": _colour(fraction), "fontcolor": "white" if _index(fraction) >= 5 else "black"}


def _site_times(report) -> dict[str, float]:
    return dict(report.site_us) if report is not None else {}


def _layer_times(report) -> dict[str, float]:
    return {r.layer: r.us for r in report.layers} if report is not None else {}


def _shape(origin) -> str:
    return "x".join(str(d) for d in origin.output_shapes[0]) if origin.output_shapes else ""


def _legend(graph, hottest_us: float, policy: str | None = None) -> None:
    """The colour scale; ``policy``: the attribution policy that billed the layers' time
    (None for call sites, whose time no policy cuts)."""
    billed = f", billed to layers by the {policy} policy" if policy else ""
    with graph.subgraph(name="cluster_legend") as legend:
        legend.attr(label=f"time{billed} (share of the hottest)", fontsize="10", style="rounded")
        previous = None
        for i in range(len(_SCALE)):
            name = f"legend{i}"
            pct = int(100 * i / (len(_SCALE) - 1))
            legend.node(
                name,
                f"{pct}% ({hottest_us * i / (len(_SCALE) - 1) / 1e3:.2f} ms)",
                shape="box",
                style="filled",
                fontsize="9",
                **_fill(i / (len(_SCALE) - 1)),
            )
            if previous:
                legend.edge(previous, name, style="invis")
            previous = name


def default_collapse(lineage: Lineage) -> int | None:
    """The module depth a layer graph is drawn at when none is asked for: None (every
    op) up to ``MAX_OPS`` ops, else the deepest depth whose groups number at most a
    quarter of that, and at least depth 1."""
    ops = [o.layer for o in lineage.origins.values() if o.kind == OP]
    if len(ops) <= MAX_OPS:
        return None
    depth = 1
    while len({attribution.module_prefix(layer, depth + 1) for layer in ops}) <= MAX_OPS // 4 and depth < 8:
        depth += 1
    return depth


def _op_times(report) -> dict[str, float]:
    """origin id -> the time billed to that op itself (its shares)."""
    out: dict[str, float] = defaultdict(float)
    for share in report.shares if report is not None else ():
        out[share.origin] += share.us
    return out


def layer_graph(lineage: Lineage, report=None, collapse: int | None = None):
    """The layer graph; coloured by each op's own time when a ``Report`` of a profile
    is given. ``collapse`` None draws every op up to ``MAX_OPS``; 0 every op always."""
    note: tuple[str, ...] = ()
    if collapse is None and default_collapse(lineage):
        collapse = default_collapse(lineage)
        note = (
            f"(grouped by module depth {collapse}: the model has more than {MAX_OPS} ops; "
            f"render --collapse N for another depth, 0 for every op)",
        )
    if collapse:
        return _collapsed_graph(lineage, report, collapse, note)
    site_us = _site_times(report)
    op_us = _op_times(report)
    total = sum(site_us.values()) or 1.0
    hottest = max(op_us.values(), default=0.0) or 1.0
    builtin = {o: b.name for b in lineage.builtins for o in b.origins}
    g = graphviz.Digraph(
        "layers",
        graph_attr={
            "rankdir": "TB",
            "fontname": "Helvetica",
            "fontsize": "11",
            "label": _label(f"{lineage.build.model}: layers and kernels"),
            "labelloc": "t",
        },
        node_attr={
            "fontname": "Helvetica",
            "fontsize": "10",
            "shape": "box",
            "style": "rounded,filled",
            "fillcolor": "white",
        },
    )
    placed: set[str] = set()
    node = _node_names(lineage.origins)

    heat = {oid: op_us.get(oid, 0.0) / hottest for oid in lineage.origins} if report is not None else {}
    for site in lineage.call_sites:
        us = site_us.get(site.label)
        timing = (f"{us / 1e3:.3f} ms ({100 * us / total:.1f}%)",) if us is not None else ()
        with g.subgraph(name=f"cluster_{site.position}") as cluster:
            cluster.attr(
                label=_label(site.label, *timing),
                style="rounded",
                color="#4a6fa5",
                fontsize="10",
                id=_label(f"site:{site.label}"),
            )
            for oid in site.origin_ids:
                if oid not in placed:
                    placed.add(oid)
                    _origin_node(cluster, node[oid], lineage.origins[oid], heat.get(oid))
    for origin in lineage.origins.values():
        if origin.id not in placed and (origin.kind == OP or origin.id in lineage.journal.eliminated_by):
            _origin_node(
                g,
                node[origin.id],
                origin,
                heat.get(origin.id),
                eliminated=lineage.journal.eliminated_by.get(origin.id),
                builtin=builtin.get(origin.id),
            )
            placed.add(origin.id)
    for a, b in lineage.edges:
        if a in placed and b in placed:
            g.edge(node[a], node[b])
    for origin in lineage.origins.values():
        if origin.kind != OP and origin.id in placed:
            for served in origin.serves:
                if served in placed:
                    g.edge(node[origin.id], node[served], style="dashed", color="#7a7a7a", arrowhead="empty")
    if report is not None:
        _legend(g, hottest, report.policy)
    return g


def _node_names(items) -> dict[str, str]:
    """Plain DOT names; the real names (which hold ':' and '@') go in labels and ids."""
    return {name: f"n{i}" for i, name in enumerate(items)}


def _origin_node(
    graph, name, origin, heat: float | None, eliminated: str | None = None, builtin: str | None = None
) -> None:
    """One origin's node: an eliminated op greyed (and the pass named), an inserted op
    dashed, a VM builtin's op dotted, else filled by ``heat`` (its time over the
    hottest op's; None: not timed)."""
    label = [origin.layer, f"{origin.short_op} {_shape(origin)}"]
    attrs = {"id": _label(f"origin:{origin.id}"), "tooltip": _label(origin.id)}
    if eliminated:
        attrs.update(fillcolor="#e0e0e0", fontcolor="#777777", color="#aaaaaa")
        label.append(f"(eliminated by {eliminated})")
    elif origin.kind != OP:
        attrs.update(style="rounded,dashed,filled", fillcolor="#eef3ff", color="#3a5fcd")
        label = [f"{origin.short_op} {_shape(origin)}", f"{origin.kind} by {origin.pass_name}", f"for {origin.layer}"]
    elif builtin:
        attrs.update(style="rounded,dotted,filled", fillcolor="#f4efe9", color="#9c755f")
        label.append(f"VM builtin {builtin}")
    elif heat is not None:
        attrs.update(_fill(heat))
    graph.node(name, _label(*label), **attrs)


def _collapsed_graph(lineage, report, depth, note: tuple[str, ...] = ()):
    layer_us = _layer_times(report)
    group_us: dict[str, float] = defaultdict(float)
    for layer, layer_time in layer_us.items():
        group_us[attribution.module_prefix(layer, depth)] += layer_time
    hottest = max(group_us.values(), default=0.0) or 1.0
    members: dict[str, set[str]] = defaultdict(set)
    group_of = {}
    for o in lineage.origins.values():
        if o.kind == OP:
            group_of[o.id] = attribution.module_prefix(o.layer, depth)
            members[group_of[o.id]].add(o.layer)
    kernels: dict[str, set[str]] = defaultdict(set)
    for site in lineage.call_sites:
        for oid in site.origin_ids:
            if oid in group_of:
                kernels[group_of[oid]].add(site.kernel)
    g = graphviz.Digraph(
        "layers",
        graph_attr={
            "rankdir": "TB",
            "labelloc": "t",
            "fontname": "Helvetica",
            "label": _label(f"{lineage.build.model} (depth {depth})", *note),
        },
        node_attr={
            "fontname": "Helvetica",
            "fontsize": "10",
            "shape": "box",
            "style": "rounded,filled",
            "fillcolor": "white",
        },
    )
    node = _node_names(dict.fromkeys(group_of.values()))
    for group in node:
        us = group_us.get(group)
        timing = (f"{us / 1e3:.3f} ms",) if us is not None else ()
        g.node(
            node[group],
            _label(group, f"{len(members[group])} layers, {len(kernels[group])} kernels", *timing),
            id=_label(f"group:{group}"),
            **(_fill(us / hottest) if us is not None else {}),
        )
    for a, b in attribution.edges_between(lineage, group_of):
        g.edge(node[a], node[b])
    if report is not None:
        _legend(g, hottest, report.policy)
    return g


def kernel_graph(lineage: Lineage, report=None):
    """The kernel call-site graph; coloured by time when a ``Report`` is given; a
    library call's node says what runs it (``library cublas``) and is drawn dashed."""
    site_us = _site_times(report)
    hottest = max(site_us.values(), default=0.0) or 1.0
    total = sum(site_us.values()) or 1.0
    g = graphviz.Digraph(
        "kernels",
        graph_attr={
            "rankdir": "TB",
            "label": _label(f"{lineage.build.model}: kernel call sites"),
            "labelloc": "t",
            "fontname": "Helvetica",
        },
        node_attr={
            "fontname": "Helvetica",
            "fontsize": "10",
            "shape": "box",
            "style": "rounded,filled",
            "fillcolor": "white",
        },
    )
    by_position = {}
    node = _node_names(s.label for s in lineage.call_sites)
    for site in lineage.call_sites:
        by_position[site.position] = site
        layers = list(dict.fromkeys(lineage.origins[o].layer for o in site.origin_ids))
        shown = ", ".join(layers[:3]) + (f" +{len(layers) - 3}" if len(layers) > 3 else "")
        us = site_us.get(site.label)
        timing = (f"{us / 1e3:.3f} ms ({100 * us / total:.1f}%)",) if us is not None else ()
        library = (f"library {site.library}",) if site.library else ()
        g.node(
            node[site.label],
            _label(site.label, *library, shown, *timing),
            id=_label(f"site:{site.label}"),
            **(_fill(us / hottest) if us is not None else {}),
            **({"style": "rounded,filled,dashed"} if library else {}),
        )
    for a, b in lineage.site_edges:
        g.edge(node[by_position[a].label], node[by_position[b].label])
    if report is not None:
        _legend(g, hottest)
    return g


def render(graph, path, fmt: str | None = None, overwrite: bool = False) -> Path:
    """Write ``graph`` as dot, svg, png or pdf; an existing file is kept unless asked."""
    path = Path(path)
    fmt = fmt or path.suffix.lstrip(".")
    if fmt not in FORMATS:
        raise RelaytraceError(f"unknown graph format {fmt!r}: use one of {', '.join(FORMATS)}")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; replace it with --force (API: overwrite=True)")
    return write_atomic(path, graph.source if fmt == "dot" else _drawn(graph, fmt, path), overwrite)


def _drawn(graph, fmt: str, path: Path) -> bytes:
    """``graph`` drawn by graphviz's ``dot`` in ``fmt``; dot's refusal is a
    ``RelaytraceError`` naming ``path`` and dot's own first line, never a broken pipe
    (which the CLI would take for a reader that stopped, and end quietly)."""
    try:
        return graph.pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound as exc:
        raise RelaytraceError(f"cannot draw {path}: graphviz's dot is not installed (apt install graphviz)") from exc
    except (graphviz.CalledProcessError, BrokenPipeError) as exc:
        said = (getattr(exc, "stderr", None) or b"").decode(errors="replace").strip().splitlines()
        why = f": dot said {said[0]!r}" if said else ""
        raise RelaytraceError(f"graphviz's dot could not draw {path}{why}; write the .dot file instead") from exc
