"""The code's provenance as data other tools read (``provenance.json``), and as text.

``provenance(lineage)`` is the sidecar (``model.provenance.Provenance``: for each
kernel, its blocks, its scheduled blocks and, for each call site, the Relax line that
calls it and each block's op, layer, kind and source line); ``layer_text`` prints what
``relaytrace query --code LAYER`` shows. Both read a lineage that carries its code
(``Lineage.code``) and compute nothing the records do not hold.
"""

from __future__ import annotations

from ..model.code import Code, code_sites
from ..model.provenance import (
    BlockProvenance,
    BuiltBlockProvenance,
    KernelProvenance,
    Owner,
    Provenance,
    SiteProvenance,
)
from .safe_text import terminal


def provenance(lineage) -> Provenance:
    """The sidecar of a lineage that carries its code (see the module's docstring)."""
    code: Code = lineage.code
    sites: dict[str, list[SiteProvenance]] = {name: [] for name in code.kernels}
    for site in code_sites(lineage, code):
        if site.kernel in sites:
            sites[site.kernel].append(
                SiteProvenance(
                    site.label,
                    site.function,
                    site.line,
                    site.ambiguous,
                    {str(i): _owner(lineage.origins[o]) for i, o in site.owners},
                )
            )
    kernels = {}
    for name, kernel in code.kernels.items():
        index = {b.name: i for i, b in enumerate(kernel.blocks)}
        blocks = tuple(
            BlockProvenance(
                b.name,
                (b.line, b.end),
                kernel.members[b.member].prim_func if 0 <= b.member < len(kernel.members) else "",
                b.reads,
                b.writes,
                c.status,
                c.reasons,
            )
            for b, c in zip(kernel.blocks, code.checks[name])
        )
        built = tuple(
            BuiltBlockProvenance(
                b.name, (b.line, b.end), tuple(index[n] for n in b.sources if n in index), c.status, c.reasons
            )
            for b, c in zip(kernel.built_blocks, code.built_checks[name])
        )
        kernels[name] = KernelProvenance(blocks, bool(kernel.built), built, tuple(sites[name]))
    return Provenance(lineage.build.model, kernels, tuple(code.problems))


def _owner(origin) -> Owner:
    """What the sidecar says of the origin a block computes."""
    return Owner(origin.id, origin.op, origin.layer, origin.kind, origin.source)


def _whose(origin, mine: bool) -> str:
    """What a block computes, after its line: the layer's own op and its source line, or
    another layer's op; nothing for a block of no model op."""
    if origin is None:
        return ""
    if mine:
        return f"  ({origin.short_op}{' at ' + origin.source if origin.source else ''})"
    return f"  ({origin.short_op} of {origin.layer})"


def layer_text(lineage, layer: str) -> str:
    """The layer's Relax calls in run order and each kernel's TIR, the blocks that compute
    the layer marked ``>>`` with their op and source line, others ``..`` with the op and
    layer they compute there; each block's verdict."""
    found = lineage.code_of(layer)
    code: Code = lineage.code
    out = [f"{layer}: {len(found.sites)} call site(s) of origins {', '.join(found.origins)}"]
    for site in found.sites:
        function = code.functions.get(site.function)
        relax = function.text.splitlines()[site.line - 1].strip() if function and site.line else "(line not found)"
        out += ["", f"== {site.label}: Relax {site.function}:{site.line or '?'}", f"   {relax}"]
        kernel = code.kernels.get(site.kernel)
        if kernel is None:
            out.append("   (no TIR: a library call or a kernel not compiled by TVM)")
            continue
        built = " (a schedule changed it when built)" if kernel.built else ""
        out.append(f"-- TIR of {site.kernel} as fusion left it{built}")
        if site.ambiguous:
            out.append("   (two ops of one kind here that data flow does not tell apart: the first way was taken)")
        marks = dict.fromkeys(site.blocks, ">>")
        owners = dict(site.owners)
        text = kernel.fused.splitlines()
        starts = {b.line: (i, b) for i, b in enumerate(kernel.blocks)}
        for number, line in enumerate(text, 1):
            if number in starts:
                i, b = starts[number]
                check = site.checks[i] if i < len(site.checks) else None
                why = ": " + "; ".join(check.reasons) if check is not None and check.reasons else ""
                verdict = f"  [{check.status}{why}]" if check is not None else ""
                whose = _whose(lineage.origins.get(owners.get(i, "")), i in marks)
                out.append(f"{marks.get(i, '..')} {number:4d} {line}{verdict}{whose}")
            else:
                inside = any(b.line < number <= b.end for j, b in enumerate(kernel.blocks) if j in marks)
                out.append(f"{'>>' if inside else '  '} {number:4d} {line}")
    return "\n".join(map(terminal, out))
