"""Where each layer's output can be read in a run of the compiled model: pure
functions over a Lineage (no TVM).

A layer's output is the output of its last op: the op of the layer that comes last in
the entry function, not counting ops dead code elimination removed. It is read from
the kernel call site that runs that op, by one of these routes (``Route``):

- **direct**: no op of the model comes after it in that kernel, so the kernel writes
  its value into its last arguments (an op of k outputs: the last k; a framework op
  that returns fewer, as batch norm in inference returns its first, is compared on
  those);
- **through data movement**: the ops after it in that kernel only move data (a
  reshape, a transpose, a broadcast; not a cast): the kernel writes its value moved, so
  it is compared with the reference's value after the same ops (the reference's
  value of the last of them, the node the lineage names), or
- the layer's last op only reshapes (a reshape, view, flatten, squeeze or unsqueeze,
  e.g. the one a ``Linear`` on a 3-D input ends with) and runs as a VM builtin or is
  fused into a kernel that computes more: the value it reshapes is read where its
  kernel writes it, and compared with the layer's value element for element (a
  reshape keeps the order of the elements).

Otherwise the value lives only inside the kernel (fused into the next op) and cannot
be compared; the site that holds it is named. Ops eliminated by a pass, or run by VM
builtins that do more than reshape, have no kernel output. Whatever might not be the
op's value as the source computes it is not compared: an op ConvertLayout rewrote, a
kernel that also runs an inserted op other than a cast (a layout transform), a kernel
whose outputs have other shapes.
"""

from __future__ import annotations

from collections.abc import Collection

import attrs
from attrs import define

from ..model.lineage import Lineage
from ..model.numerics import DIRECT, FUSED, MOVED, NO_OUTPUT, NOT_COMPARABLE, Outcome, Route
from ..model.ops import is_data_movement
from ..model.origin import OP

# short ops that keep the order of the elements: the value after them is the value before, reshaped
RESHAPES = frozenset({"reshape", "flatten", "squeeze", "expand_dims"})


@define(frozen=True)
class LayerOutput:
    """Where one layer's output is read: ``kernel``'s ``call``-th call (its last
    ``outputs`` arguments), compared with the reference's value of ``node`` by ``route``
    (``reshaped``: element for element, the two differing only in shape); ``status`` None
    when it can be, else why not (``note``)."""

    layer: str
    origin: str  # the layer's last op
    node: str  # the node of the source program whose reference value is compared ("" when unknown)
    site: str  # the call site that writes or holds the output ("" when none does)
    kernel: str
    call: int
    position: int  # run order
    status: Outcome | None = None
    note: str = ""
    outputs: int = 1  # how many results the kernel writes for it: its last ``outputs`` arguments
    host: str = ""  # fused: the op whose value the kernel writes
    route: Route | str = ""  # how the value is read ("" when it is not)
    reshaped: bool = False


def layer_outputs(lineage: Lineage, entry: str = "main", ops: Collection[str] = ()) -> tuple[LayerOutput, ...]:
    """Every layer with ops in the function ``entry``, in the run order of the sites
    that write or hold their outputs (layers with none last). Ops of Relax functions
    the entry calls are not layers here: their values are not compared. With ``ops``
    (origin ids of the entry's ops), each of those ops instead, as if it were a layer
    of its own named by its id: where its value is read (``analysis.narrow`` compares
    ops of a rebuild that writes them out)."""
    lineage = lineage.for_entry(entry)
    last: dict[str, object] = {oid: lineage.origins[oid] for oid in ops}
    for o in sorted(
        (o for o in lineage.origins.values() if o.kind == OP and o.function == entry and not ops),
        key=lambda o: (not _dead(lineage, o), o.index),
    ):
        last[o.layer] = o  # the latest live op, or the latest of a layer all dead
    sites_of: dict[str, list] = {}
    for s in lineage.call_sites:
        for oid in s.origin_ids:
            sites_of.setdefault(oid, []).append(s)
    builtin = {o: b.name for b in lineage.builtins for o in b.origins}
    inputs: dict[str, list[str]] = {}
    for a, b in lineage.edges:
        inputs.setdefault(b, []).append(a)
    last_of_node = {node: ops[-1].id for node, ops in node_ops(lineage.origins.values()).items()}
    look = _Lookup(lineage, sites_of, builtin, inputs, last_of_node)
    out = [_output(look, layer, op) for layer, op in last.items()]
    out = _name_hosts(lineage, out)
    end = len(lineage.call_sites) + 1
    return tuple(sorted(out, key=lambda x: (x.position if x.site else end, lineage.origins[x.origin].index)))


def node_ops(origins) -> dict[str, list]:
    """Node of the source program -> the model ops among ``origins`` it was translated
    into, in op order; the node's value is that of the last (a Linear's bias add, after
    its matmul)."""
    out: dict[str, list] = {}
    for o in sorted((o for o in origins if o.kind == OP and o.node), key=lambda o: o.index):
        out.setdefault(o.node, []).append(o)
    return out


@define(frozen=True)
class _Lookup:
    lineage: Lineage
    sites_of: dict  # origin id -> the call sites that run it
    builtin: dict  # origin id -> the VM builtin that runs it
    inputs: dict  # origin id -> the origins whose values flow into it
    last_of_node: dict  # node of the source program -> the last op it was translated into


def _name_hosts(lineage, out: list[LayerOutput]) -> list[LayerOutput]:
    """A fused layer's note says what its kernel writes: a layer's output compared
    there (the latest, when it writes one through data movement of the next), or else
    the op it is (an intermediate of its layer)."""
    written = {}
    for x in sorted((x for x in out if not x.status), key=lambda x: lineage.origins[x.origin].index):
        written[x.site] = x.layer

    def writes(x):
        if x.site in written:
            return f", which writes {written[x.site]}'s output"
        host = lineage.origins[x.host]
        return f", which writes a {host.short_op} inside {host.layer} (not a layer's output compared there)"

    return [attrs.evolve(x, note=x.note + writes(x)) if x.status == FUSED else x for x in out]


def _output(look: _Lookup, layer, op) -> LayerOutput:
    lineage = look.lineage
    base = dict(layer=layer, origin=op.id, node=op.node, site="", kernel="", call=0, position=-1)
    if op.id in lineage.journal.eliminated_by:
        return LayerOutput(
            **base,
            status=NO_OUTPUT,
            note=f"its last op ({op.short_op}) was eliminated by {lineage.journal.eliminated_by[op.id]}",
        )
    read = _read(look, base, op)
    if not read.status:
        return read
    moved, value = [], op  # the last ops only reshape: read the value they reshape
    while _reshapes(value) and len(look.inputs.get(value.id, ())) == 1 and op.node:
        moved.append(value.short_op)
        value = lineage.origins[look.inputs[value.id][0]]
        if value.kind != OP or value.id in lineage.journal.eliminated_by:
            break
        before = _read(look, base, value, moved_after=False)
        if not before.status and before.outputs == 1:
            what = f"its {value.short_op}" if value.layer == layer else f"the {value.short_op} of {value.layer}"
            ops = ", ".join(reversed(moved))
            return attrs.evolve(
                before,
                node=op.node,
                reshaped=True,
                route=MOVED,
                note=f"its last op{'s' if len(moved) > 1 else ''} ({ops}) only reshape"
                f"{'' if len(moved) > 1 else 's'} {what}, which {before.site} writes: "
                "compared element for element",
            )
    return read


def _read(look: _Lookup, base: dict, op, moved_after: bool = True) -> LayerOutput:
    """Where ``op``'s value is read (``status`` "") or why it is not. ``moved_after``:
    the kernel may run ops that only move data after it (read through them)."""
    lineage = look.lineage
    sites = look.sites_of.get(op.id, [])
    builtin = look.builtin.get(op.id)
    if not sites:
        return LayerOutput(
            **base,
            status=NOT_COMPARABLE if builtin else NO_OUTPUT,
            note=f"its last op ({op.short_op}) runs as the VM builtin {builtin}: not compared"
            if builtin
            else f"its last op ({op.short_op}) runs in no kernel",
        )
    site = max(sites, key=lambda s: s.position)
    base = {**base, "site": site.label, "kernel": site.kernel, "call": site.call, "position": site.position}
    after = sorted(
        (
            lineage.origins[o]
            for o in site.origin_ids
            if lineage.origins[o].kind == OP and lineage.origins[o].index > op.index
        ),
        key=lambda o: o.index,
    )
    if after and not (moved_after and all(map(_moves, after))):
        return LayerOutput(**base, status=FUSED, note=f"kept inside {site.label}", host=after[-1].id)
    ops = ", ".join(dict.fromkeys(o.short_op for o in after))
    movers = [o for o in after if not _reshapes(o)]  # the ops after it that reorder elements
    written = movers[-1] if movers else op  # the value the kernel writes, reshaped by the ops after it
    reshaped = written is not (after[-1] if after else op)
    if movers and look.last_of_node.get(written.node) != written.id:
        return LayerOutput(
            **base,
            status=NOT_COMPARABLE,
            note=f"{site.label} writes it after {ops}, a value the source program does not hold",
        )
    k = 1 if reshaped else max(len(written.output_shapes), 1)
    why = _not_comparable(lineage, op, written, site, k, check_shapes=not reshaped)
    if why:
        return LayerOutput(**base, status=NOT_COMPARABLE, note=why, outputs=k)
    if not after:
        return LayerOutput(**base, outputs=k, route=DIRECT)
    if written is op:
        return LayerOutput(
            **base,
            outputs=1,
            route=MOVED,
            reshaped=True,
            note=f"{site.label} writes it after {ops}: compared element for element",
        )
    return LayerOutput(
        **{**base, "node": written.node},
        outputs=k,
        route=MOVED,
        reshaped=reshaped,
        note=f"{site.label} writes it after {ops}: compared with the reference after them "
        f"({written.layer}'s {written.short_op})",
    )


def _not_comparable(lineage, op, written, site, k: int, check_shapes: bool = True) -> str:
    """Why what ``site`` writes may not be ``written``'s value as the source computes it
    (``op``: the layer's op it carries; "" when nothing says so). ``check_shapes``: its
    last ``k`` arguments must have ``written``'s shapes, in some order (a fused kernel
    of an op of several outputs may write them in another; not for a value read
    reshaped)."""
    if not op.node:
        return "its op names no node of a source program (not imported from torch or ONNX)"
    if any(c.pass_name == "ConvertLayout" for c in lineage.journal.history_by_origin.get(op.id, ())):
        return f"ConvertLayout changed its op's layout: {site.label} writes it in another"
    moved = [
        lineage.origins[o].short_op
        for o in site.origin_ids
        if lineage.origins[o].kind != OP and lineage.origins[o].short_op != "astype"
    ]
    if moved:
        return (
            f"{site.label} also runs inserted {', '.join(dict.fromkeys(moved))}: what it writes may be laid "
            "out otherwise"
        )
    if not check_shapes:
        return ""
    shapes = [tuple(shape) for shape, _ in site.arguments[-k:]] if len(site.arguments) >= k else []
    wanted = [tuple(shape) for shape in written.output_shapes]
    if shapes and wanted and all(map(_known, shapes + wanted)) and sorted(shapes) != sorted(wanted):
        return (
            f"{site.label} writes shapes {[list(x) for x in shapes]}, the op's {k} output(s) are "
            f"{[list(x) for x in wanted]}"
        )
    return ""


def _moves(origin) -> bool:
    """An op that only moves data, read through: not a cast (a cast to another
    precision rounds or truncates both sides alike, hiding the error or adding its
    own)."""
    return is_data_movement(origin.op) and origin.short_op != "astype"


def _reshapes(origin) -> bool:
    """An op whose value holds its input's elements in their order: a reshape (view,
    flatten, squeeze, unsqueeze), or a broadcast to the shape the input has."""
    if origin.short_op in RESHAPES:
        return True
    return (
        origin.short_op == "broadcast_to"
        and bool(origin.input_shapes)
        and tuple(origin.input_shapes[0]) == tuple(origin.output_shapes[0] if origin.output_shapes else ())
    )


def _dead(lineage, origin) -> bool:
    """An op whose value nothing used (dead code elimination removed it): not a
    layer's output, e.g. the indices a max-pool decomposition makes."""
    return "DeadCode" in lineage.journal.eliminated_by.get(origin.id, "")


def _known(shape) -> bool:
    return all(isinstance(d, int) for d in shape)
