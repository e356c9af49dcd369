"""`relaytrace query`: what a kernel, layer or origin became, from a saved lineage (no TVM)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UsageError
from ..jobs import echo, load_lineage
from ..model.sitekey import SiteKey, builtin_keys
from ..render.safe_text import terminal
from .base import Command


def add_arguments(p) -> None:
    """`relaytrace query`'s arguments and options (docs/cli.md#query)."""
    p.add_argument("lineage", metavar="DIR|lineage.json")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--kernel", metavar="[ENTRY:]NAME[#CALL]")
    which.add_argument("--layer", metavar="NAME")
    which.add_argument("--history", metavar="LAYER")
    which.add_argument("--code", metavar="LAYER", help="the layer's Relax calls and its kernels' TIR, blocks marked")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    """`relaytrace query DIR|lineage.json`: what a layer, kernel or origin became, from a
    saved lineage (no TVM)."""
    from ..model.lineage import Lineage

    path = Path(args.lineage) / "lineage.json" if Path(args.lineage).is_dir() else Path(args.lineage)
    lineage = load_lineage(path) if args.code else Lineage.load(path)
    result: dict | list
    if args.code:
        result, text = _code(lineage, path, args.code)
    elif args.kernel:
        result, text = _kernel(lineage, args.kernel)
    elif args.layer:
        result, text = _layer(lineage, args.layer)
    else:
        result, text = _history(lineage, args.history)
    echo(json.dumps(result, indent=1) if args.json else text)
    return 0


def _kernel(lineage, name: str) -> tuple[list[dict], str]:
    """``--kernel``: each call of the kernel (or the one named), its verdict and the
    origins it computes, as JSON and as text."""
    result = []
    for s in _sites(lineage, name):
        check = lineage.check(s)
        result.append(
            {
                "site": s.label,
                "library": s.library,
                "verification": check.status,
                "reasons": list(check.reasons),
                "shared": list(check.shared),
                "origins": [
                    {
                        "origin": r.origin,
                        "role": r.role,
                        "layer": lineage.origins[r.origin].layer,
                        "op": lineage.origins[r.origin].short_op,
                        "source": lineage.origins[r.origin].source,
                    }
                    for r in s.roles
                ],
            }
        )
    text = "\n".join(
        f"{terminal(s['site'])}: {s['verification'].upper()}"
        + (f" (library call: {terminal(s['library'])})" if s["library"] else "")
        + "\n"
        + "".join(f"  ! {terminal(reason)}\n" for reason in s["reasons"])
        + "".join(f"  (rests on a fact the tracker relies on too: {terminal(fact)})\n" for fact in s["shared"])
        + "\n".join(
            f"  {o['role']:<10} {terminal(o['layer'])}  ({terminal(o['op'])}, {terminal(o['origin'])})"
            + (f"  at {terminal(o['source'])}" if o["source"] else "")
            for o in s["origins"]
        )
        for s in result
    )
    return result, text


def _layer(lineage, layer: str) -> tuple[dict, str]:
    """``--layer``: the kernel calls the layer runs in, its verdict, its source, the KV
    cache's kernels it is billed, and its ops that were eliminated, as JSON and as text."""
    sites = lineage.kernels_of(layer)
    verdict = lineage.verification.by_layer().get(layer) if lineage.verification is not None else None
    calls = [s.label for s in sites]
    sources = list(lineage.sources().get(layer, ()))
    reasons = list(verdict.reasons) if verdict else ["this lineage has no layer verdicts"]
    result: dict = {
        "layer": layer,
        "kernel_calls": calls,
        "source": sources,
        "verification": verdict.status if verdict else "unverified",
        "reasons": reasons,
    }
    text = (
        f"{terminal(layer)} runs in: "
        + (", ".join(map(terminal, calls)) or "no kernel")
        + f"\nverification: {result['verification'].upper()}"
        + "".join(f"\n  ! {terminal(r)}" for r in reasons)
    )
    cache = cache_builtins(lineage, layer)
    if cache and lineage.build.kv_cache is not None:
        kernels = list(lineage.build.kv_cache.kernels)
        result["kv_cache"] = {"builtins": cache, "kernels": kernels}
        text += (
            f"\nand inside {', '.join(map(terminal, cache))}: the KV cache's kernels "
            f"({', '.join(map(terminal, kernels))}); a served profile times those "
            "that ran and bills them to this layer"
        )
    if sources:
        text += "\nmade at: " + ", ".join(map(terminal, sources))
    gone = [f"{o} (eliminated by {p})" for o, p in lineage.eliminated().items() if o in lineage.resolve(layer)]
    if gone:
        result["eliminated"] = gone
        text += "\n" + "\n".join(map(terminal, gone))
    return result, text


def _history(lineage, name: str) -> tuple[list[dict], str]:
    """``--history``: each op of the layer (or origin) with the passes that rewrote it and
    its end, as JSON and as a table."""
    from ..render.table import format_table

    result = histories(lineage, name)
    gone = sum(1 for h in result if h["eliminated_by"])
    text = (
        f"history of {terminal(name)}: {len(result)} op(s)"
        + (f", {gone} eliminated" if gone else "")
        + ", each with the passes that rewrote it and its end\n"
        + format_table(
            ["op", "passes (rule where not identity)", "carried by"],
            [row for h in result for row in history_rows(h)],
        )
    )
    return result, text


def _code(lineage, path: Path, layer: str) -> tuple[dict, str]:
    """``--code``: the layer's code (``Lineage.code_of``) as JSON and as text; ``path``
    is the lineage's file, the code saved beside it (``jobs.load_lineage``)."""
    from ..render.provenance import layer_text

    if lineage.code is None:
        raise UsageError(
            f"no code.json beside {path}: profile the model with this version of "
            "relaytrace (it saves the code with the lineage)"
        )
    found = lineage.code_of(layer)
    result = {
        "layer": found.layer,
        "origins": list(found.origins),
        "sites": [
            {
                "site": s.label,
                "kernel": s.kernel,
                "function": s.function,
                "relax_line": s.line,
                "ambiguous": s.ambiguous,
                "blocks": [
                    {
                        "index": i,
                        "name": lineage.code.kernels[s.kernel].blocks[i].name,
                        "op": lineage.origins[dict(s.owners)[i]].op,
                        "source": lineage.origins[dict(s.owners)[i]].source,
                        "status": str(s.checks[i].status),
                        "reasons": list(s.checks[i].reasons),
                    }
                    for i in s.blocks
                ],
            }
            for s in found.sites
        ],
    }
    return result, layer_text(lineage, layer)


def cache_builtins(lineage, layer: str) -> list[str]:
    """The builtin call sites (``entry:builtin``) of ``layer``'s ops that run the KV
    cache's kernels: its attention (``vm.builtin.attention_kv_cache_*``); none in a
    build without a KV cache."""
    from ..model.entry import runs_attention

    if lineage.build.kv_cache is None:
        return []
    ops = lineage.resolve(layer)
    return list(
        dict.fromkeys(
            f"{b.function}:{b.name}" for b in lineage.builtins if runs_attention(b.name) and set(b.origins) & ops
        )
    )


def histories(lineage, name: str) -> list[dict]:
    """Each op of layer (or origin) ``name`` in run order, with each pass that rewrote it
    (pass index and name, function, the callee that carried it after, the rule that
    followed it, and where that callee is a group handed to an external codegen, the
    codegen and its patterns: ``offloaded``) and how it ended: the pass that eliminated it, or the kernel call sites
    and VM builtins it runs in."""
    builtins: dict[str, list[str]] = {}
    keys = builtin_keys(lineage.builtins)
    for b in lineage.builtins:
        for o in b.origins:
            builtins.setdefault(o, []).append(keys[b.position].label)
    index = lineage.index()
    out = []
    for oid in sorted(lineage.resolve(name), key=lambda o: (lineage.origins[o].function, lineage.origins[o].index, o)):
        origin = lineage.origins[oid]
        out.append(
            {
                "origin": oid,
                "op": origin.short_op,
                "layer": origin.layer,
                "changes": [
                    {
                        "pass_index": c.index,
                        "pass": c.pass_name,
                        "function": c.function,
                        "callee": c.callee,
                        "rule": c.rule,
                        "offloaded": _offloaded(lineage, c.callee),
                    }
                    for c in lineage.journal.history_by_origin.get(oid, ())
                ],
                "eliminated_by": lineage.eliminated().get(oid),
                "kernel_calls": [index.at_position[p].label for p in index.sites_of_origin.get(oid, ())],
                "builtins": builtins.get(oid, []),
            }
        )
    return out


def _offloaded(lineage, callee: str) -> str:
    """``codegen: pattern, ...`` of an offloaded group (``BuildFacts.offloads``), else ""."""
    offload = lineage.build.offloads.get(callee)
    return f"{offload.codegen}: {', '.join(offload.patterns)}" if offload is not None else ""


def history_rows(h: dict) -> list[list[str]]:
    """One op's history as rows of ``query --history``'s table (op, passes, carried by):
    the passes that left it in one callee together (``#2191 FuseOps (replay), #2199
    FuseTIRInner``, a rule named where it is not identity), then how it ended."""
    origin = h["origin"]
    own = origin[len(h["layer"]) + 1 :] if origin.startswith(h["layer"] + "/") else origin
    rows: list[list[str]] = []
    for c in h["changes"]:
        step = f"#{c['pass_index']} {c['pass']}" + (f" ({c['rule']})" if c["rule"] != "identity" else "")
        callee = c["callee"] + (f" (offloaded to {c['offloaded']})" if c.get("offloaded") else "")
        if rows and rows[-1][2] == callee:
            rows[-1][1] += ", " + step
        else:
            rows.append(["", step, callee])
    if not rows:
        rows.append(["", "no pass rewrote it", ""])
    if h["eliminated_by"]:
        rows.append(["", f"END: eliminated by {h['eliminated_by']}", ""])
    else:
        runs = ", ".join(h["kernel_calls"] + h["builtins"])
        rows.append(["", "END: runs in", runs or "no kernel call or VM builtin"])
    rows[0][0] = own
    return rows


def _sites(lineage, text: str) -> list:
    """The call sites ``--kernel TEXT`` names: every call of a kernel (``NAME``; with
    ``ENTRY:NAME``, those in that entry) or one call (``[ENTRY:]NAME#CALL``, a
    ``SiteKey``'s label)."""
    if text in lineage.kernels:
        return list(lineage.sites(text))
    if "#" not in text:
        entry, colon, kernel = text.rpartition(":")
        if colon and entry and kernel in lineage.kernels:
            return [s for s in lineage.sites(kernel) if s.function == entry] or [lineage.site(kernel, 0, entry)]
        return list(lineage.sites(text))  # no such kernel: the error lists those there are
    try:
        key = SiteKey.parse(text)
    except ValueError as exc:
        raise UsageError(f"--kernel {exc}; a kernel's NAME alone shows all its calls") from None
    return [lineage.site_by_label(key.label)]


COMMAND = Command("query", "ask a saved lineage which layers a kernel runs, and more", add_arguments, run)
