"""The versions of ``lineage.json`` and the migrations that read an older file as the
current one: each a pure function from one version's JSON data to the next's.

- ``/1``: one object of flat fields; each origin's history a list of change records;
  files before entries existed name the main function's ``inputs``.
- ``/2``: the history as indices into one table of distinct changes (a build records
  one per rewritten binding per pass, and most are alike).
- ``/3``: the fields grouped by job, as ``Lineage`` holds them: ``build``
  (``BuildFacts``), the lineage proper, ``journal`` (``Journal``), ``verification``;
  an ONNX op's ``node`` is its node's id (Model Explorer's), where /2 wrote ``onnx:``
  and the node's first output.
- ``/4``: ``build.work``, each kernel's work (``model.work.KernelWork``); a /3 file has
  none, and its figures of work are unknown. Added within /4, read as absent from a
  file without them: a kernel's ``dtype`` and ``accumulate``, ``build.policies``
  (``ToMixedPrecision``'s policy per op).
- ``/5``: ``build.memory``, each entry's memory plan (``model.memory.MemoryPlan``); a
  /4 file has none, and its memory is unknown. Added within /5, read as absent from a
  file without them: ``build.params`` (each entry's parameters as compiled, with their
  kinds), ``build.kv_cache`` (the KV cache the entries share, its kernels),
  ``build.offloads`` (the groups handed to external codegens), a call site's
  ``library`` and ``journal.explained`` (the eliminations the IR bears out).

- ``/6``: ``build.options`` (``BuildOptions``: the pipeline, tuning database, layout
  conversion, mixed precision and batch-norm folding as fields), where /5 wrote one
  string, ``build.pipeline`` (``fused+tuned(DB)+convert_layout(...)+...``), which the
  migration reads apart once.
- ``/7``: ``build.entries`` is each entry's tensors as compiled, ``model.entry.signature``
  of its ``build.params`` (a tuple parameter field by field: ``packed_params[3]``), the
  one signature of an entry; /6 wrote the input module's parameters, a tuple by its
  first field alone under the tuple's name, which the migration replaces with the
  signature of the entry's params where the file has them.

A profile saved with a served LLM step (``profile.step``, records ``within`` a builtin,
calls of kind ``cache``) is still ``relaytrace.profile/3``: an older file has none."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import FileFormatError
from . import jsonio
from .frontend import onnx_node_id
from .journal import Change, _history_json
from .jsonio import make_record

SCHEMA = "relaytrace.lineage/7"

_BUILD = ("model", "target", "pipeline", "entries", "calls", "tuned", "shape_consumers", "kernel_members")
_JOURNAL = {
    "events": "events",
    "history": "history_by_origin",
    "eliminated": "eliminated_by",
    "degraded": "degraded",
    "explained": "explained",
}  # /2 name -> Journal field


def _v1_to_v2(data: dict, where: str) -> dict:
    """/1's history (origin -> [change object, ...]) as /2's table of distinct changes."""
    history = data.get("history", {})
    if not isinstance(history, dict):
        raise FileFormatError(f"{where}: history must be an object")
    steps = {}
    for oid, listed in history.items():
        if not isinstance(listed, list):
            raise FileFormatError(f"{where}: history[{oid!r}] must be a list")
        steps[oid] = tuple(make_record(Change, c, f"{where}: history[{oid!r}][{i}]") for i, c in enumerate(listed))
    return {**data, "schema": "relaytrace.lineage/2", "history": _history_json(steps)}


def _v2_to_v3(data: dict, where: str) -> dict:
    """/2's flat fields grouped into ``build`` and ``journal``; a file with ``inputs``
    and no ``entries`` (written before entries existed) has them as main's."""
    flat = dict(data)
    if "entries" not in flat and flat.get("inputs"):
        flat["entries"] = {"main": flat["inputs"]}
    flat.pop("inputs", None)
    flat.pop("subfunctions", None)  # written by some /1 versions; the lineage derives it from calls
    build = {key: flat.pop(key) for key in _BUILD if key in flat}
    journal = {field: flat.pop(key) for key, field in _JOURNAL.items() if key in flat}
    return _onnx_node_ids({**flat, "schema": "relaytrace.lineage/3", "build": build, "journal": journal})


def _v3_to_v4(data: dict, where: str) -> dict:
    """/3 had no work: the same data under /4 (``build.work`` is empty)."""
    return {**data, "schema": "relaytrace.lineage/4"}


def _v4_to_v5(data: dict, where: str) -> dict:
    """/4 had no memory plans: the same data under /5 (``build.memory`` is empty)."""
    return {**data, "schema": "relaytrace.lineage/5"}


_PARTS = re.compile(r"\+(?=tuned\(|convert_layout\(|mixed_precision\(|fold_batch_norm$)")


def _v5_to_v6(data: dict, where: str) -> dict:
    """/5's ``build.pipeline`` label read apart into /6's ``build.options``: the
    pipeline, then ``+tuned(DB)``, ``+convert_layout(op=[layouts], ...)``,
    ``+mixed_precision(float16, accumulate DTYPE)``, ``+fold_batch_norm`` as
    ``relaytrace.build`` wrote them; a part it cannot read stays in the pipeline's
    name (a user's pipeline named so). Data not as /5 wrote it is left for the reader
    to refuse."""
    build = data.get("build")
    if not isinstance(build, dict) or not isinstance(build.get("pipeline"), str):
        return {**data, "schema": "relaytrace.lineage/6"}
    head, *parts = _PARTS.split(build["pipeline"])
    options: dict = {"pipeline": head}
    for part in parts:
        if part.startswith("tuned(") and part.endswith(")"):
            options["database"] = part[len("tuned(") : -1]
        elif part.startswith("convert_layout(") and part.endswith(")"):
            layouts = _layouts(part[len("convert_layout(") : -1])
            if layouts is None:
                options["pipeline"] += f"+{part}"
            else:
                options["convert_layout"] = layouts
        elif part.startswith("mixed_precision(") and part.endswith(")"):
            options["mixed_precision"] = part[:-1].rsplit(" ", 1)[-1]
        elif part == "fold_batch_norm":
            options["fold_batch_norm"] = True
        else:
            options["pipeline"] += f"+{part}"
    rest = {k: v for k, v in build.items() if k != "pipeline"}
    return {**data, "schema": "relaytrace.lineage/6", "build": {**rest, "options": options}}


def _v6_to_v7(data: dict, where: str) -> dict:
    """/6's ``build.entries`` of an entry whose ``build.params`` the file has, as /7
    derives them: every tensor its parameters pass, ``[name, shape, dtype]``, a tuple's
    fields one by one (``model.entry.signature``). Data not as /6 wrote it is left for
    the reader to refuse."""
    build = data.get("build")
    if not isinstance(build, dict) or not isinstance(build.get("params"), dict):
        return {**data, "schema": SCHEMA}
    entries = dict(build.get("entries") or {})
    for entry, params in build["params"].items():
        try:
            entries[entry] = [[t["name"], t["shape"], t["dtype"]] for p in params for t in p["tensors"]]
        except (TypeError, KeyError):
            return {**data, "schema": SCHEMA}
    return {**data, "schema": SCHEMA, "build": {**build, "entries": entries}}


def _layouts(text: str) -> dict | None:
    """``relax.nn.conv2d=['NHWC', 'OHWI'], ...`` (an op's name and the list or tuple of
    layouts ``build`` was given) as {op: [layouts]}, None when it is not that."""
    import ast

    try:
        value = ast.literal_eval("{" + re.sub(r"([\w.]+)=", r"'\1': ", text) + "}")
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, dict) and all(
        isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v) for v in value.values()
    ):
        return {op: list(layouts) for op, layouts in value.items()}
    return None


_ONNX_VALUE, _ONNX_SOURCE = "onnx:", "onnx node "  # /2's Origin.node and Origin.source of an ONNX op


def _onnx_node_ids(data: dict) -> dict:
    """/2's ONNX ``node`` (``onnx:`` + the node's first output) as the node's id: its
    name, from the op's ``source`` (``onnx node NAME``), or ``<node_I>`` for the I-th
    node of the frontend's program when unnamed. What the file cannot say stays
    unknown: a named node no op came from (an Identity, a folded Constant) gets
    ``<node_I>`` in the program (no op is matched against it), and an op of a file
    without a program gets its name or, unnamed, no node (""). Data that is not as /2
    wrote it is left for the reader to refuse."""
    origins = data.get("origins")
    if not isinstance(origins, list):
        return data
    named = {
        o["node"]: o["source"][len(_ONNX_SOURCE) :]
        for o in origins
        if _onnx_value(o)
        and isinstance(o.get("source"), str)
        and o["source"].startswith(_ONNX_SOURCE)
        and len(o["source"]) > len(_ONNX_SOURCE)
    }
    program = data.get("program")
    nodes = program.get("nodes") if isinstance(program, dict) else None
    if isinstance(nodes, list):
        ids = {n["node"]: named.get(n["node"]) or onnx_node_id("", i) for i, n in enumerate(nodes) if _onnx_value(n)}
    else:
        ids = dict(named)
    out = {**data, "origins": [{**o, "node": ids.get(o["node"], "")} if _onnx_value(o) else o for o in origins]}
    if isinstance(nodes, list) and isinstance(program, dict):
        out["program"] = {**program, "nodes": [{**n, "node": ids[n["node"]]} if _onnx_value(n) else n for n in nodes]}
    return out


def _onnx_value(record) -> bool:
    """A /2 record (an origin, a program node) whose ``node`` is ``onnx:`` + a value."""
    return isinstance(record, dict) and isinstance(record.get("node"), str) and record["node"].startswith(_ONNX_VALUE)


_MIGRATIONS: dict[str, Callable[[dict, str], dict]] = {
    "relaytrace.lineage/1": _v1_to_v2,
    "relaytrace.lineage/2": _v2_to_v3,
    "relaytrace.lineage/3": _v3_to_v4,
    "relaytrace.lineage/4": _v4_to_v5,
    "relaytrace.lineage/5": _v5_to_v6,
    "relaytrace.lineage/6": _v6_to_v7,
}


def migrate(data, where: str) -> dict:
    """``data`` (a ``lineage.json``'s JSON) as the current schema's data, through each
    migration from its version on (``jsonio.migrate``)."""
    return jsonio.migrate(data, _MIGRATIONS, SCHEMA, "lineage", where)
