"""Where each layer's output can be read in a run of the compiled model: pure
functions over a Lineage (no TVM).

A layer's output is the output of its last op: the op of the layer that comes last in
the entry function, not counting ops dead code elimination removed. It is written out
by the kernel call site that runs that op when no op of the model comes after it in
that kernel: a destination-passing kernel writes its results into its last arguments
(an op of k outputs: the last k, which must have the op's k shapes). Otherwise the
value lives only inside the kernel (fused into the next op) and cannot be compared;
the site that holds it is named. Ops eliminated by a pass, or run by VM builtins, have
no kernel output. Whatever might not be the op's value as the source computes it is
not compared: an op ConvertLayout rewrote, a kernel that also runs an inserted op
other than a cast (a layout transform), a kernel whose outputs have other shapes.
"""

from __future__ import annotations

import attrs
from attrs import define

from ..model.lineage import Lineage
from ..model.numerics import FUSED, NO_OUTPUT, NOT_COMPARABLE
from ..model.origin import OP


@define(frozen=True)
class LayerOutput:
    """Where one layer's output is read: ``kernel``'s ``call``-th call (its last
    argument), compared with the reference's value of ``node``; ``status`` "" when it
    can be, else why not (``note``)."""

    layer: str
    origin: str  # the layer's last op
    node: str  # that op's node in the source framework's program ("" when unknown)
    site: str  # the call site that writes or holds the output ("" when none does)
    kernel: str
    call: int
    position: int  # run order
    status: str = ""
    note: str = ""
    outputs: int = 1  # how many results the op makes: the kernel's last ``outputs`` arguments
    host: str = ""  # fused: the op whose value the kernel writes


def layer_outputs(lineage: Lineage, entry: str = "main") -> tuple[LayerOutput, ...]:
    """Every layer with ops in the function ``entry``, in the run order of the sites
    that write or hold their outputs (layers with none last). Ops of Relax functions
    the entry calls are not layers here: their values are not compared."""
    lineage = lineage.for_entry(entry)
    last: dict[str, object] = {}
    for o in sorted((o for o in lineage.origins.values() if o.kind == OP and o.function == entry),
                    key=lambda o: (not _dead(lineage, o), o.index)):
        last[o.layer] = o  # the latest live op, or the latest of a layer all dead
    sites_of: dict[str, list] = {}
    for s in lineage.call_sites:
        for oid in s.origin_ids:
            sites_of.setdefault(oid, []).append(s)
    builtin = {o: b.name for b in lineage.builtins for o in b.origins}
    out = [_output(lineage, layer, op, sites_of.get(op.id, []), builtin.get(op.id)) for layer, op in last.items()]
    out = _name_hosts(lineage, out)
    end = len(lineage.call_sites) + 1
    return tuple(sorted(out, key=lambda x: (x.position if x.site else end, lineage.origins[x.origin].index)))


def _name_hosts(lineage, out: list[LayerOutput]) -> list[LayerOutput]:
    """A fused layer's note says what its kernel writes: a layer's output compared
    there, or else the op it is (an intermediate of its layer)."""
    written = {(x.origin, x.site): x.layer for x in out if not x.status}

    def writes(x):
        if (x.host, x.site) in written:
            return f", which writes {written[(x.host, x.site)]}'s output"
        host = lineage.origins[x.host]
        return f", which writes a {host.short_op} inside {host.layer} (not a layer's output compared there)"

    return [attrs.evolve(x, note=x.note + writes(x)) if x.status == FUSED else x for x in out]


def _output(lineage, layer, op, sites, builtin) -> LayerOutput:
    base = dict(layer=layer, origin=op.id, node=op.node, site="", kernel="", call=0, position=-1)
    if op.id in lineage.journal.eliminated_by:
        return LayerOutput(**base, status=NO_OUTPUT,
                           note=f"its last op ({op.short_op}) was eliminated by {lineage.journal.eliminated_by[op.id]}")
    if not sites:
        return LayerOutput(**base, status=NOT_COMPARABLE if builtin else NO_OUTPUT,
                           note=f"its last op ({op.short_op}) runs as the VM builtin {builtin}: not compared"
                           if builtin else f"its last op ({op.short_op}) runs in no kernel")
    site = max(sites, key=lambda s: s.position)
    base.update(site=site.label, kernel=site.kernel, call=site.call, position=site.position)
    after = [lineage.origins[o] for o in site.origin_ids
             if lineage.origins[o].kind == OP and lineage.origins[o].index > op.index]
    if after:
        host = max(after, key=lambda o: o.index)
        return LayerOutput(**base, status=FUSED, note=f"kept inside {site.label}", host=host.id)
    base["outputs"] = k = max(len(op.output_shapes), 1)
    why = _not_comparable(lineage, op, site, k)
    return LayerOutput(**base, status=NOT_COMPARABLE, note=why) if why else LayerOutput(**base)


def _not_comparable(lineage, op, site, k: int) -> str:
    """Why what ``site`` writes may not be ``op``'s value as the source computes it
    ("" when nothing says so)."""
    if not op.node:
        return "its op names no node of a source program (not imported from torch or ONNX)"
    if any(c.pass_name == "ConvertLayout" for c in lineage.journal.history_by_origin.get(op.id, ())):
        return f"ConvertLayout changed its op's layout: {site.label} writes it in another"
    moved = [lineage.origins[o].short_op for o in site.origin_ids
             if lineage.origins[o].kind != OP and lineage.origins[o].short_op != "astype"]
    if moved:
        return (f"{site.label} also runs inserted {', '.join(dict.fromkeys(moved))}: what it writes may be laid "
                "out otherwise")
    written = [tuple(shape) for shape, _ in site.arguments[-k:]] if len(site.arguments) >= k else []
    wanted = [tuple(shape) for shape in op.output_shapes]
    if written and wanted and all(map(_known, written + wanted)) and written != wanted:
        return (f"{site.label} writes shapes {[list(x) for x in written]}, the op's {k} output(s) are "
                f"{[list(x) for x in wanted]}")
    return ""


def _dead(lineage, origin) -> bool:
    """An op whose value nothing used (dead code elimination removed it): not a
    layer's output, e.g. the indices a max-pool decomposition makes."""
    return "DeadCode" in lineage.journal.eliminated_by.get(origin.id, "")


def _known(shape) -> bool:
    return all(isinstance(d, int) for d in shape)
