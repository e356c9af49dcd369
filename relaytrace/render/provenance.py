"""The code's provenance as data other tools read (``provenance.json``), and as text.

``provenance(lineage)`` is the sidecar: for each kernel, its blocks (name, lines in its
TIR, member PrimFunc, verdict), the blocks of its scheduled TIR when a schedule changed
it (each with the index of the fused block it was made from) and, for each call site, the Relax function and line
that call it and each block's op, layer, kind and source line. Versioned
(``SCHEMA``) and documented in docs/api.md ("provenance.json"): the contract a
profiler, a viewer or a test can hold a build to. ``layer_text`` prints what
``relaytrace query --code LAYER`` shows. Both read a lineage that carries its code
(``Lineage.code``) and compute nothing the records do not hold.
"""

from __future__ import annotations

from ..model.code import Code, code_sites
from .safe_text import terminal

SCHEMA = "relaytrace.provenance/1"


def provenance(lineage) -> dict:
    """The sidecar's JSON object (see the module's docstring)."""
    code: Code = lineage.code
    kernels: dict[str, dict] = {}
    for name, kernel in code.kernels.items():
        index = {b.name: i for i, b in enumerate(kernel.blocks)}
        kernels[name] = {
            "blocks": [
                {
                    "name": b.name,
                    "lines": [b.line, b.end],
                    "member": kernel.members[b.member].prim_func if 0 <= b.member < len(kernel.members) else "",
                    "reads": list(b.reads),
                    "writes": list(b.writes),
                    "status": str(c.status),
                    "reasons": list(c.reasons),
                }
                for b, c in zip(kernel.blocks, code.checks[name])
            ],
            "scheduled": bool(kernel.built),
            "built_blocks": [
                {
                    "name": b.name,
                    "lines": [b.line, b.end],
                    "sources": [index[n] for n in b.sources if n in index],
                    "status": str(c.status),
                    "reasons": list(c.reasons),
                }
                for b, c in zip(kernel.built_blocks, code.built_checks[name])
            ],
            "sites": [],
        }
    for site in code_sites(lineage, code):
        if site.kernel in kernels:
            kernels[site.kernel]["sites"].append(
                {
                    "label": site.label,
                    "function": site.function,
                    "relax_line": site.line,
                    "ambiguous": site.ambiguous,
                    "blocks": {str(i): _owner(lineage.origins[o]) for i, o in site.owners},
                }
            )
    return {"schema": SCHEMA, "model": lineage.build.model, "kernels": kernels, "problems": list(code.problems)}


def _owner(origin) -> dict:
    """What the sidecar says of the origin a block computes."""
    return {
        "origin": origin.id,
        "op": origin.op,
        "layer": origin.layer,
        "kind": str(origin.kind),
        "source": origin.source,
    }


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
