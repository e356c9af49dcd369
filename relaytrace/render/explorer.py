"""Per-node data for Google's Model Explorer, keyed by the node ids its adapters give:
for a torch model the ExportedProgram adapter's, the fx node names of
``torch.export.export(model, args)`` (``Origin.node``); for an ONNX model the
model-explorer-onnx adapter's, the ONNX node names (``Origin.source``).

A user opens their own exported program (or ONNX file) in Model Explorer and adds these files as
node data ("Add per-node data" in its UI, or ``node_data_path`` in its Python API):
our times coloured onto their graph. Model Explorer shows one value per node per
file, so each figure is its own file, in its ``GraphNodeData`` form (``results``
keyed by node id), which applies to whichever graph is open.
"""

from __future__ import annotations

from ..analysis.attribution import Category
from ..model.origin import OP

FILES = ("explorer-time.json", "explorer-kernels.json", "explorer-category.json", "explorer-efficiency.json")
_GRADIENT = [{"stop": 0, "bgColor": "#fff5f0"}, {"stop": 0.5, "bgColor": "#fb6a4a"}, {"stop": 1, "bgColor": "#99000d"}]


def node_data(report) -> dict[str, dict]:
    """file name -> its node data, for the entry the report's profile ran:

    - time: µs per run billed to the node's ops (the report's shares; an inserted op's
      time goes to the node it serves in the layer it was billed to), as a gradient;
    - kernels: the kernel call sites that run the node's ops;
    - category: ``compute``, ``inserted ops serving it`` (its only time: layout
      transforms or casts done for it), ``fused into LAYER (SITE)`` (its kernel's time
      is billed to that layer's op), ``VM builtin``, ``eliminated by PASS`` or
      ``no kernel``;
    - efficiency: the node's layer's roofline efficiency in percent (its lower bound
      over its time: ``analysis.roofline``), for the nodes whose layer has one.

    Nodes with no op of ours (inputs, parameters, the output) are left out. Empty when
    the lineage names no nodes (a Relax module of your own, a TVM nn model)."""
    lineage = report.lineage
    node_of = {o.id: o.node for o in lineage.origins.values() if o.kind == OP and o.node}
    if not node_of:
        return {}
    time, computed = _node_times(report, node_of)
    sites, anchors = _node_sites(lineage, node_of)
    category = _categories(lineage, node_of, time, computed, anchors)
    name = f"{lineage.build.model}.{report.profile.entry}"
    return {
        FILES[0]: {
            "name": f"{name}: time (us per run, billed by the {report.policy} policy)",
            "results": {n: {"value": round(us, 3)} for n, us in time.items()},
            "gradient": _GRADIENT,
        },
        FILES[1]: {
            "name": f"{name}: kernel call sites",
            "results": {n: {"value": " ".join(s)} for n, s in sites.items() if s},
        },
        FILES[2]: {"name": f"{name}: category", "results": {n: {"value": category[n]} for n in time}},
        FILES[3]: {
            "name": f"{name}: roofline efficiency (% of the lower bound's speed)",
            "results": {n: {"value": round(100 * e, 2)} for n, e in _efficiency(report, node_of).items()},
            "gradient": _GRADIENT[::-1],
        },
    }


def _node_times(report, node_of: dict[str, str]) -> tuple[dict[str, float], set[str]]:
    """(node -> µs per run billed to its ops, the nodes billed compute time and not only
    the inserted ops that serve them)."""
    time = dict.fromkeys(node_of.values(), 0.0)
    computed = set()
    for share in report.shares:
        node = node_of.get(share.origin) or _served_node(report.lineage, share, node_of)
        if node:
            time[node] += share.us
            if share.category == Category.COMPUTE:
                computed.add(node)
    return time, computed


def _node_sites(lineage, node_of: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(node -> the kernel call sites that run its ops, node -> ``fused into LAYER (SITE)``
    for a node whose op runs in a kernel anchored by another node's op)."""
    sites: dict[str, list[str]] = {n: [] for n in node_of.values()}
    anchors: dict[str, str] = {}
    for site in lineage.call_sites:
        anchor = lineage.origins[site.anchor] if site.anchor else None
        for oid in site.origin_ids:
            runs_in = node_of.get(oid)
            if runs_in and site.label not in sites[runs_in]:
                sites[runs_in].append(site.label)
                if anchor is not None and node_of.get(anchor.id) != runs_in:
                    anchors.setdefault(runs_in, f"fused into {anchor.layer} ({site.label})")
    return sites, anchors


def _categories(lineage, node_of, time, computed, anchors) -> dict[str, str]:
    """node -> its category (``node_data``'s list), the first that holds."""
    builtin = {node_of[o] for b in lineage.builtins for o in b.origins if o in node_of}
    eliminated: dict[str, str] = {}
    for oid, node in node_of.items():
        if oid in lineage.journal.eliminated_by:
            eliminated.setdefault(node, lineage.journal.eliminated_by[oid])

    def category(node):
        if node in computed:
            return "compute"
        if time[node] > 0:
            return "inserted ops serving it"
        if node in anchors:
            return anchors[node]
        if node in builtin:
            return "VM builtin"
        return f"eliminated by {eliminated[node]}" if node in eliminated else "no kernel"

    return {node: category(node) for node in time}


def _efficiency(report, node_of: dict[str, str]) -> dict[str, float]:
    """node -> its layer's roofline efficiency, for layers that have one."""
    roofs = {r.name: r.efficiency for r in report.roofline.layers if r.efficiency is not None}
    lineage = report.lineage
    return {
        node: roofs[lineage.origins[oid].layer] for oid, node in node_of.items() if lineage.origins[oid].layer in roofs
    }


def _served_node(lineage, share, node_of) -> str:
    """The node an inserted op's share goes to: the first op it serves in the layer the
    share was billed to."""
    for served in lineage.origins[share.origin].serves:
        if lineage.origins[served].layer == share.layer and served in node_of:
            return node_of[served]
    return ""
