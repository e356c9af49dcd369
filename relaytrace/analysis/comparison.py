"""Which layer went wrong: run the compiled model and its source (torch or ONNX) on
the same inputs and compare every layer's output (``layer_outputs`` says where each is
read).

The reference runs first: a torch module through ``torch.export`` and an fx
interpreter that keeps the value of every node a layer's output is read from, each
saved to a temporary ``.npy`` file as soon as it is made; an ONNX model through
``onnx.reference.ReferenceEvaluator`` (which holds all its values until it returns,
then they are saved alike). The compiled model then runs once under a VM
instrument: after each kernel call that writes a layer's output, that output is copied,
compared with the reference's file (``model.numerics.error_of``) and both are dropped.
At most one layer's pair of arrays is in memory at a time, besides the models.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Collection
from pathlib import Path

import attrs
import numpy as np

from ..errors import RelaytraceError, UnknownNameError, describe
from ..model.frontend import ONNX, onnx_node_id
from ..model.lineage import Lineage
from ..model.numerics import NOT_COMPARABLE, Comparison, LayerError, default_tolerance, error_of
from ..model.sitekey import Calls, SiteKey
from .layer_outputs import layer_outputs


def compare(  # noqa: PLR0913 - public API: keyword options, checked and then held in records
    executable,
    lineage: Lineage,
    reference,
    inputs,
    atol: float | None = None,
    rtol: float | None = None,
    entry: str | None = None,
    precision: str | None = None,
    device=None,
    progress=None,
    dynamic_shapes=None,
    ops: Collection[str] = (),
) -> Comparison:
    """Every layer of ``lineage``'s entry (default ``main``) compared: the compiled
    ``executable`` against ``reference``, the torch module or ONNX model (or path) it
    was imported from, both run on ``inputs`` (arrays or tensors, in the entry's
    order). ``atol`` and ``rtol`` left out are the defaults for the build's precision
    (``numerics.default_tolerance`` of ``lineage.build.accumulate``); ``precision``
    (default: said from the build) says how it computes, for the report. A torch
    reference is exported with ``dynamic_shapes``, as the build's import was: its node
    names must be those the lineage keeps (a reference whose graph lacks one of them
    is refused, naming them). Each is run once; neither is changed (a torch module is
    put in eval mode, as its import did). ``ops`` (origin ids of the entry's ops)
    compares those ops' values instead of the layers', each row named by its op's id
    (``layer_outputs``); an id that is not an op of the entry is an
    ``UnknownNameError``."""
    from ..profiling.vm import check_inputs, device_here

    accumulate = lineage.build.accumulate
    atol, rtol, tolerance = _tolerances(accumulate, atol, rtol)
    if precision is None:
        precision = f"float16, accumulating in {accumulate}" if accumulate else "float32 as built"
    entry = lineage.entry(entry)
    arrays = check_inputs(lineage, inputs, entry)
    strays = [oid for oid in ops if oid not in lineage.origins or lineage.origins[oid].function != entry]
    if strays:
        raise UnknownNameError(
            f"op of {entry}", strays[0], [o.id for o in lineage.origins.values() if o.function == entry]
        )
    plan = layer_outputs(lineage, entry, ops)
    say = progress or (lambda message: None)
    wanted = {p.node for p in plan if not p.status}
    results: dict[str, LayerError] = {}
    with tempfile.TemporaryDirectory(prefix="relaytrace-compare-") as folder:
        say(f"running the reference ({len(wanted)} layer outputs kept)")
        onnx = lineage.program is not None and lineage.program.frontend == ONNX
        if onnx:
            saved = _onnx_outputs(reference, arrays, wanted, Path(folder))
        else:
            saved = _torch_outputs(reference, arrays, wanted, Path(folder), lineage.program, dynamic_shapes)
        by_site: dict[SiteKey, list] = {}
        uses: dict[str, int] = {}
        for p in plan:
            if not p.status and saved.get(p.node):
                by_site.setdefault(SiteKey(entry, p.kernel, p.call), []).append(p)
                uses[p.node] = uses.get(p.node, 0) + 1

        def judge(site: SiteKey, call_args) -> None:
            for p in by_site.get(site, ()):
                tensors = [a for a in call_args if hasattr(a, "shape")]
                got = [t.numpy() for t in tensors[-p.outputs :]] if len(tensors) >= p.outputs else []
                results[p.layer] = _judge(p, got, saved[p.node], atol, rtol)
                uses[p.node] -= 1
                if not uses[p.node]:  # two layers may be read from one node (one through data movement)
                    for path in saved[p.node]:
                        Path(path).unlink()

        say("running the compiled model")
        _run_watched(executable, device or device_here(lineage.build.target), entry, arrays, judge)
        say(f"{len(results)} layer outputs compared")
    layers = tuple(
        results.get(p.layer)
        or LayerError(
            p.layer,
            p.status or NOT_COMPARABLE,
            p.site,
            p.note
            or (
                f"the reference has no tensor for node {p.node!r}" if not saved.get(p.node) else f"{p.site} did not run"
            ),
        )
        for p in plan
    )
    return Comparison(
        model=lineage.build.model,
        entry=entry,
        atol=atol,
        rtol=rtol,
        precision=precision,
        layers=layers,
        tolerance=tolerance,
    )


def _tolerances(accumulate, atol: float | None, rtol: float | None) -> tuple[float, float, str]:
    """(atol, rtol, how they were set): each given, else the default for a build that
    accumulates in ``accumulate`` (``numerics.default_tolerance``); a negative or
    infinite one is an error."""
    default_atol, default_rtol, why = default_tolerance(accumulate)
    said = {
        (True, True): why,
        (False, False): "given",
        (False, True): f"atol given, rtol {why}",
        (True, False): f"rtol given, atol {why}",
    }[(atol is None, rtol is None)]
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    if atol < 0 or rtol < 0 or not np.isfinite(atol + rtol):
        raise RelaytraceError(f"atol and rtol must be finite and at least 0, not {atol} and {rtol}")
    return atol, rtol, said


def _run_watched(executable, device, entry: str, arrays, done: Callable[[SiteKey, tuple], None]) -> None:
    """One run of ``entry`` on ``arrays``, ``done(site, arguments)`` told as each call
    returns (its outputs are its last arguments); the VM's instrument taken off after."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, device)
    calls = Calls(entry)
    pending: list[SiteKey] = []

    def note(func, name, before, ret, *call_args):
        if before:
            pending.append(calls.key(name))
        else:  # calls nest (a Relax subfunction holds kernel calls): last in, first out
            done(pending.pop(), call_args)
        return relax.VMInstrumentReturnKind.NO_OP

    vm.set_instrument(note)
    try:
        vm[entry](*[tvm.runtime.tensor(a, device) for a in arrays])
    except Exception as exc:
        raise RelaytraceError(f"the compiled model failed to run on these inputs: {describe(exc)}") from exc
    finally:
        vm.set_instrument(lambda *_: relax.VMInstrumentReturnKind.NO_OP)


def _judge(p, got: list, ref_paths: list[str], atol: float, rtol: float) -> LayerError:
    """``got``: the kernel's last ``p.outputs`` arguments; the reference's tensors in
    order. Several outputs are compared as one (their elements together); a kernel that
    writes more outputs than the framework's op returns (batch norm in inference: its
    output, not the batch statistics) is compared on the first ones; a layer read
    through reshapes (``p.reshaped``) element for element."""
    ref = [np.load(path) for path in ref_paths]
    note = p.note
    if p.reshaped and len(got) == len(ref) == 1 and got[0].size == ref[0].size:
        got = [got[0].reshape(ref[0].shape)]
    elif len(got) > len(ref) >= 1 and (picked := _by_shape(got, ref)) is not None:
        note = _joined(note, f"{len(ref)} of the kernel's {len(got)} outputs: what the framework's op returns")
        got = picked
    if [g.shape for g in got] != [r.shape for r in ref]:
        return LayerError(
            p.layer,
            NOT_COMPARABLE,
            p.site,
            f"{p.site} wrote shapes {[list(g.shape) for g in got]}, the reference {[list(r.shape) for r in ref]}",
        )
    if len(ref) == 1:
        return attrs.evolve(error_of(p.layer, p.site, got[0], ref[0], atol, rtol), note=note, route=p.route)
    error = error_of(
        p.layer, p.site, np.concatenate([g.ravel() for g in got]), np.concatenate([r.ravel() for r in ref]), atol, rtol
    )
    return attrs.evolve(
        error,
        shape=ref[0].shape,
        route=p.route,
        note=_joined(note, f"{len(ref)} outputs compared together (shape: the first's)"),
    )


def _by_shape(got: list, ref: list) -> list | None:
    """The outputs of ``got`` the reference's tensors are, in the reference's order: the
    first ones when their shapes agree, else the one output of each reference tensor's
    shape (a fused kernel may write an op's outputs in another order); None when that
    is ambiguous."""
    if [g.shape for g in got[: len(ref)]] == [r.shape for r in ref]:
        return got[: len(ref)]
    picked = []
    for r in ref:
        same = [g for g in got if g.shape == r.shape]
        if len(same) != 1:
            return None
        picked.append(same[0])
    return picked


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _onnx_outputs(model, arrays, wanted: set[str], folder: Path) -> dict[str, list[str]]:
    """Run the ONNX ``model`` (a ModelProto or path) with ``onnx.reference`` on
    ``arrays`` (its graph inputs in order) and save each value in ``wanted``
    (ONNX node ids, ``onnx_node_id``: each node's first output is its value): node -> [.npy path]."""
    from ..errors import require

    onnx = require("onnx", "onnx")
    from onnx.reference import ReferenceEvaluator

    if not (hasattr(model, "graph") or str(model).endswith(".onnx")):
        raise RelaytraceError(f"the reference of an ONNX build must be its ONNX model, not {type(model).__name__}")
    proto = model if hasattr(model, "graph") else onnx.load(str(model))
    initialized = {t.name for t in proto.graph.initializer}
    feeds = dict(zip([i.name for i in proto.graph.input if i.name not in initialized], arrays))
    value_of = {onnx_node_id(n.name, i): n.output[0] for i, n in enumerate(proto.graph.node) if n.output}
    nodes = sorted(n for n in wanted if n in value_of)
    names = [value_of[n] for n in nodes]
    try:
        values = ReferenceEvaluator(proto).run(names, feeds)
    except Exception as exc:
        raise RelaytraceError(f"onnx.reference could not run the reference: {describe(exc)}") from exc
    saved = {}
    for i, (node, value) in enumerate(zip(nodes, values)):
        np.save(folder / f"{i}.npy", np.asarray(value))
        saved[node] = [str(folder / f"{i}.npy")]
    return saved


def _torch_outputs(
    module, arrays, wanted: set[str], folder: Path, program=None, dynamic_shapes=None
) -> dict[str, list[str]]:
    """Run ``module`` (exported as ``torch.export.export`` gives it with ``dynamic_shapes``,
    the program whose node names the lineage keeps) on ``arrays`` and save the value of
    each node in ``wanted`` to ``folder``: node name -> the .npy paths of its tensors (a
    node of several outputs, such as ``chunk``, has one per output, in order). Every
    node the frontend's ``program`` names must be in the exported graph: else its nodes
    are another program's, and the values would be compared against the wrong ops."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise RelaytraceError(
            f"the reference must be the torch module the build was imported from, not {type(module).__name__}"
        )
    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)
    try:
        exported = torch.export.export(module.eval(), args, dynamic_shapes=dynamic_shapes).module()
    except Exception as exc:
        raise RelaytraceError(f"torch.export could not export the reference: {describe(exc)}") from exc
    if program is not None:
        names = {n.name for n in exported.graph.nodes}
        strays = sorted({n.node for n in program.nodes if n.node and n.node not in names})
        if strays:
            raise RelaytraceError(
                f"the reference exports to another program than the build was imported from ({len(strays)} of its "
                f"nodes, e.g. {strays[0]!r}, are not in it): export both alike (give compare the dynamic_shapes "
                "the model was imported with; the CLI takes them from the factory)"
            )
    saved: dict[str, list[str]] = {}

    class Keeper(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if node.name in wanted:
                tensors = [
                    v for v in (value if isinstance(value, (tuple, list)) else [value]) if isinstance(v, torch.Tensor)
                ]
                saved[node.name] = []
                for tensor in tensors:
                    path = folder / f"{len(saved)}-{len(saved[node.name])}.npy"
                    np.save(path, tensor.detach().cpu().numpy())
                    saved[node.name].append(str(path))
            return value

    with torch.no_grad():
        Keeper(exported).run(*args)
    return saved
