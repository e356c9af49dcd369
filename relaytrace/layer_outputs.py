"""Where each layer's output can be read in a run of the compiled model: pure
functions over a Lineage (no TVM).

A layer's output is the output of its last op (the op of the layer that comes last in
the entry function, an op dead code elimination removed not counted). It is written out by the kernel call site that runs that op when
no op of the model comes after it in that kernel: destination-passing kernels write
their result into their last argument. Otherwise the value lives only inside the
kernel (fused into the next layer's ops) and cannot be compared; the site that holds
it is named. Ops eliminated by a pass, or run by VM builtins, have no kernel output.
"""

from __future__ import annotations

from attrs import define

from .model.lineage import Lineage
from .model.numerics import FUSED, NO_OUTPUT, NOT_COMPARABLE
from .model.origin import OP


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
    end = len(lineage.call_sites) + 1
    return tuple(sorted(out, key=lambda x: (x.position if x.site else end, lineage.origins[x.origin].index)))


def _output(lineage, layer, op, sites, builtin) -> LayerOutput:
    base = dict(layer=layer, origin=op.id, node=op.node, site="", kernel="", call=0, position=-1)
    if op.id in lineage.eliminated_by:
        return LayerOutput(**base, status=NO_OUTPUT,
                           note=f"its last op ({op.short_op}) was eliminated by {lineage.eliminated_by[op.id]}")
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
        return LayerOutput(**base, status=FUSED, note=f"kept inside {site.label}, which writes {host.layer}'s output")
    if not op.node:
        return LayerOutput(**base, status=NOT_COMPARABLE, note="its op names no node of a source program "
                                                                "(not imported from torch)")
    if site.arguments and op.output_shapes and _known(site.arguments[-1][0]) and _known(op.output_shapes[0]) \
            and tuple(site.arguments[-1][0]) != tuple(op.output_shapes[0]):
        return LayerOutput(**base, status=NOT_COMPARABLE,
                           note=f"{site.label} writes shape {list(site.arguments[-1][0])}, the op's output is "
                                f"{list(op.output_shapes[0])} (another layout)")
    return LayerOutput(**base)


def _dead(lineage, origin) -> bool:
    """An op whose value nothing used (dead code elimination removed it): not a
    layer's output, e.g. the indices a max-pool decomposition makes."""
    return "DeadCode" in lineage.eliminated_by.get(origin.id, "")


def _known(shape) -> bool:
    return all(isinstance(d, int) for d in shape)
