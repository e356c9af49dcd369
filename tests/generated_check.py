"""Builds of the seeded models of ``relaytrace.zoo.generated``, each checked by evidence
the mapping did not produce.

``check(seed)`` builds a model through each frontend and pipeline, runs it against
torch, verifies every call site, holds the origin ids equal across pipelines, and
checks its layers by evidence of their own (``layer_problems``): for the torch
frontend, each op's layer is the innermost ``nn_module_stack`` path torch.export gives
the node that produced it. Used by tests/test_verify.py and tools/check_generated.py;
it lives with the tests because it is an oracle over the whole package (it builds,
runs and verifies), not a model definition.
"""

from __future__ import annotations

from attrs import define

from relaytrace.build import BUILD_CONFIGS
from relaytrace.zoo.generated import generate

PIPELINES = BUILD_CONFIGS  # every generated model is built in each


@define(frozen=True)
class BuildCheck:
    """One generated model built one way, run and verified."""

    seed: int
    frontend: str  # torch | onnx
    pipeline: str  # unfused | fused | nhwc
    sites: int
    verified: int
    suspect: tuple[str, ...]  # "site: reason"
    unverified: tuple[str, ...]
    problems: tuple[str, ...]  # broken invariants, wrong outputs, unstable ids
    seconds: float
    skipped: str = ""  # why there is no build: TVM itself cannot build this model this way

    @property
    def ok(self) -> bool:
        """No suspect or unverified site and no broken invariant."""
        return not (self.suspect or self.unverified or self.problems)


def check(seed: int, frontends=("torch", "onnx"), pipelines=tuple(PIPELINES), workdir=None) -> list[BuildCheck]:
    """Build generated model ``seed`` through each frontend and pipeline; each build's
    outputs must equal torch's, every call site must verify, and the model's origin
    ids must be the same in every pipeline of a frontend."""
    import tempfile
    import time
    from pathlib import Path

    import numpy as np
    import tvm
    from tvm import relax

    from relaytrace.build import build
    from relaytrace.frontends.onnx import export_torch_to_onnx, from_onnx
    from relaytrace.frontends.torch import from_torch

    module, example = generate(seed)
    expected = module(example).detach().numpy()
    program = exported_program(module, example)
    out = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for frontend in frontends:
            if frontend == "torch":
                model = from_torch(module, (example,), name=f"generated{seed}")
            else:
                path = export_torch_to_onnx(module, (example,), str(Path(tmp) / f"generated{seed}.onnx"))
                model = from_onnx(path, name=f"generated{seed}")
            ids = None
            for name in pipelines:
                start = time.perf_counter()
                pipeline, layout = PIPELINES[name]
                try:
                    executable, lineage = build(model, "llvm", pipeline=pipeline, convert_layout=layout)
                except Exception as exc:
                    out.append(_failed_build(seed, frontend, name, model, exc, time.perf_counter() - start))
                    continue
                vm = relax.VirtualMachine(executable, tvm.cpu())
                got = vm["main"](tvm.runtime.tensor(example.numpy()))
                got = (got if hasattr(got, "numpy") else got[0]).numpy()  # from_torch returns a tuple
                problems = list(lineage.verification.problems) + list(lineage.journal.degraded)
                if ids is None:  # the same origins in every pipeline (checked below): their layers once
                    problems += layer_problems(module, lineage.origins.values(), frontend, program)
                if not np.allclose(got, expected, rtol=1e-3, atol=1e-4):
                    problems.append(f"output differs from torch's by {np.abs(got - expected).max():.3g}")
                op_ids = sorted(o.id for o in lineage.origins.values() if o.kind == "op")
                if ids is not None and op_ids != ids:
                    problems.append(
                        f"origin ids differ from the {pipelines[0]} build's: {sorted(set(op_ids) ^ set(ids))[:4]}"
                    )
                ids = ids if ids is not None else op_ids
                labels = {s.position: s.label for s in lineage.call_sites}
                verdicts = lineage.verification.sites
                out.append(
                    BuildCheck(
                        seed,
                        frontend,
                        name,
                        len(verdicts),
                        sum(1 for v in verdicts if v.status == "verified"),
                        tuple(
                            f"{labels[v.position]}: {'; '.join(v.reasons)}" for v in verdicts if v.status == "suspect"
                        ),
                        tuple(
                            f"{labels[v.position]}: {'; '.join(v.reasons)}"
                            for v in verdicts
                            if v.status == "unverified"
                        ),
                        tuple(problems),
                        time.perf_counter() - start,
                    )
                )
    return out


# torch.export nodes (before decompositions) that compute nothing: an op billed to one
# was made by an earlier node whose value only passes through it.
_NOOP_TARGETS = {
    "dropout",
    "_assert_tensor_metadata",
    "contiguous",
    "clone",
    "alias",
    "detach",
    "lift_fresh_copy",
    "getitem",
}
_CASTS = {"to", "_to_copy", "type_as"}
# nodes that may import to no op at all (a view or reshape of the shape it has, a full slice)
_SHAPE_TARGETS = {
    "view",
    "reshape",
    "unsqueeze",
    "squeeze",
    "expand",
    "slice",
    "transpose",
    "permute",
    "flatten",
    "select",
    "split",
    "split_with_sizes",
    "t",
    "unflatten",
    "chunk",
}
# the Relax ops a layer of each kind of module may hold (after the frontend's import)
_MODULE_OPS = {
    # a linear on 3-d input may decompose to expand + bmm
    "Linear": {
        "relax.matmul",
        "relax.permute_dims",
        "relax.add",
        "relax.reshape",
        "relax.linear",
        "relax.broadcast_to",
    },
    "Embedding": {"relax.take", "relax.reshape", "relax.astype"},
}
# TVM's ONNX Gather wraps negative indices: where(less(i, 0), i + n, i)
_MODULE_OPS_ONNX = {"Embedding": {"relax.shape_to_tensor", "relax.less", "relax.add", "relax.where"}}


def exported_program(module, example):
    """torch.export's own program of ``module`` (before decompositions): the module paths
    the layers must equal, read independently of the frontend's import."""
    import torch

    return torch.export.export(module, (example,))


def _target(node) -> str:
    target = node.target
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _computes_nothing(node) -> bool:
    target = _target(node)
    if target in _NOOP_TARGETS:
        return True
    if target in _CASTS:  # a cast to the dtype the value has
        src, val = getattr(node.args[0], "meta", {}).get("val"), node.meta.get("val")
        return src is not None and val is not None and src.dtype == val.dtype
    return False


def _stack_layer(node) -> str:
    """The innermost module path torch.export recorded for ``node`` ("" in the root's
    own forward), with ``@N`` for the N-th further call of a module."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    key, (path, _) = list(stack.items())[-1]
    call = key.rsplit("@", 1)[1] if "@" in key else ""
    return f"{path}@{call}" if path and call else path


def layer_problems(module, origins, frontend, program) -> list[str]:
    """What is wrong with the layers of a build's op origins (from ``frontend``, torch
    or onnx), by evidence of its own.

    ``program`` is torch.export's program of ``module``. For either frontend (its layers
    are torch module paths): every Linear and Embedding module that runs is a layer (for
    ONNX, one whose output depends on the inputs: the exporter folds the others),
    each holding only the ops such a module makes (an embedding's ``take`` among them);
    no origin is billed to a Dropout. For torch: each origin's node is a node of
    ``program`` that computes something, the origin's layer is that node's innermost
    ``nn_module_stack`` path, and every node that computes has an origin."""
    import torch

    origins = [o for o in origins if o.kind == "op"]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "call_function"}
    ran = {path for n in nodes.values() for path, _ in (n.meta.get("nn_module_stack") or {}).values()}
    modules = {path: m for path, m in module.named_modules() if path in ran}
    if frontend == "onnx":  # torch.onnx folds what does not depend on the inputs (wpe(arange(T)))
        inputs = set(program.graph_signature.user_inputs)
        live = {n.name for n in program.graph.nodes if n.op == "placeholder" and n.name in inputs}
        for n in program.graph.nodes:
            if n.op == "call_function" and any(getattr(a, "name", None) in live for a in n.all_input_nodes):
                live.add(n.name)
        varying = {
            path
            for name in live
            if name in nodes
            for path, _ in (nodes[name].meta.get("nn_module_stack") or {}).values()
        }
    else:
        varying = set(modules)
    by_layer: dict[str, set[str]] = {}
    for o in origins:
        by_layer.setdefault(o.layer.split("@")[0], set()).add(o.op)
    problems = []
    for path, m in modules.items():
        kind = type(m).__name__
        if isinstance(m, torch.nn.Dropout) and path in by_layer:
            problems.append(f"layer {path} is a Dropout, yet holds {', '.join(sorted(by_layer[path]))}")
        if kind not in _MODULE_OPS:
            continue
        if path not in by_layer:
            if path in varying:
                problems.append(f"{kind} {path} is no layer")
            continue
        allowed = _MODULE_OPS[kind] | (_MODULE_OPS_ONNX.get(kind, set()) if frontend == "onnx" else set())
        foreign = by_layer[path] - allowed
        if foreign:
            problems.append(f"{kind} {path} holds {', '.join(sorted(foreign))}, which no {kind} makes")
        if kind == "Embedding" and "relax.take" not in by_layer[path]:
            problems.append(f"Embedding {path} holds no take")
    if frontend != "torch":
        return problems
    billed: dict[str, list] = {}
    for o in origins:
        node = nodes.get(o.node)
        if node is None:
            problems.append(f"{o.id} ({o.op}) names no node of torch.export's program: {o.node!r}")
            continue
        billed.setdefault(o.node, []).append(o)
        if _computes_nothing(node):
            problems.append(f"{o.id} ({o.op}) is billed to {o.node} ({_target(node)}), which computes nothing")
        layer = _stack_layer(node)
        if layer and o.layer != layer:
            problems.append(f"{o.id} ({o.op}) is in {o.layer}; torch.export puts its node {o.node} in {layer}")
        if not layer and o.layer.split("@")[0] in modules and o.layer:
            problems.append(
                f"{o.id} ({o.op}) is in {o.layer}; torch.export puts its node {o.node} in the root module's forward"
            )
    for name, node in nodes.items():
        if name not in billed and not _computes_nothing(node) and _target(node) not in _SHAPE_TARGETS:
            problems.append(f"node {name} ({_target(node)}, in {_stack_layer(node) or 'the root'}) has no origin")
    return problems


def _failed_build(seed, frontend, name, model, exc, seconds) -> BuildCheck:
    """A traced build that raised: skipped when plain ``tvm.compile`` fails alike (a TVM
    limit), a problem when it does not (tracing must never break a build)."""
    import tvm

    from relaytrace.build import build_pipeline

    pipeline, layout = PIPELINES[name]
    target = tvm.target.Target("llvm")
    try:
        tvm.compile(model.mod, target, relax_pipeline=build_pipeline(pipeline, target, layout))
    except Exception as plain:
        return BuildCheck(
            seed,
            frontend,
            name,
            0,
            0,
            (),
            (),
            (),
            seconds,
            skipped=f"TVM cannot build it: {str(plain).strip().splitlines()[0][:120]}",
        )
    return BuildCheck(
        seed, frontend, name, 0, 0, (), (), (f"traced build failed, plain build did not: {exc}",), seconds
    )
