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
from pathlib import Path

import numpy as np

from .errors import RelaytraceError, describe
from .layer_outputs import layer_outputs
from .model.lineage import Lineage
from .model.numerics import NOT_COMPARABLE, Comparison, LayerError, error_of
from .model.origin import ONNX_VALUE


def compare(executable, lineage: Lineage, reference, inputs, atol: float = 1e-4, rtol: float = 1e-4,
            entry: str | None = None, precision: str = "as built", device=None, progress=None) -> Comparison:
    """Every layer of ``lineage``'s entry (default ``main``) compared: the compiled
    ``executable`` against ``reference``, the torch module or ONNX model (or path) it
    was imported from, both run on ``inputs`` (arrays or tensors, in the entry's
    order). ``precision`` says how the build was made, for the report. Each is run
    once; neither is changed."""
    import tvm
    from tvm import relax

    from .profiler import check_inputs, device_here

    if atol < 0 or rtol < 0 or not np.isfinite(atol + rtol):
        raise RelaytraceError(f"atol and rtol must be finite and at least 0, not {atol} and {rtol}")
    entry = lineage.entry(entry)
    arrays = check_inputs(lineage, inputs, entry)
    plan = layer_outputs(lineage, entry)
    say = progress or (lambda message: None)
    wanted = {p.node for p in plan if not p.status}
    results: dict[str, LayerError] = {}
    with tempfile.TemporaryDirectory(prefix="relaytrace-compare-") as folder:
        say(f"running the reference ({len(wanted)} layer outputs kept)")
        onnx = {n for n in wanted if n.startswith(ONNX_VALUE)}
        if onnx and onnx != wanted:
            raise RelaytraceError("the lineage mixes torch and ONNX ops: compare one model's build")
        saved = (_onnx_outputs if onnx else _torch_outputs)(reference, arrays, wanted, Path(folder))
        by_site: dict[tuple[str, int], list] = {}
        for p in plan:
            if not p.status and p.node in saved:
                by_site.setdefault((p.kernel, p.call), []).append(p)
        device = device or device_here(lineage.target)
        vm = relax.VirtualMachine(executable, device)
        counts: dict[str, int] = {}
        pending: list[tuple] = []

        def note(func, name, before, ret, *call_args):
            if before:
                k = counts.get(name, 0)
                counts[name] = k + 1
                pending.append((name, k))
                return relax.VMInstrumentReturnKind.NO_OP
            name_k = pending.pop()  # calls nest (a Relax subfunction holds kernel calls): last in, first out
            for p in by_site.get(name_k, ()):
                tensors = [a for a in call_args if hasattr(a, "shape")]
                results[p.layer] = _judge(p, tensors[-1].numpy() if tensors else None, saved[p.node], atol, rtol)
                Path(saved[p.node]).unlink()
            return relax.VMInstrumentReturnKind.NO_OP

        say("running the compiled model")
        vm.set_instrument(note)
        try:
            vm[entry](*[tvm.runtime.tensor(a, device) for a in arrays])
        except Exception as exc:
            raise RelaytraceError(f"the compiled model failed to run on these inputs: {describe(exc)}") from exc
        finally:
            vm.set_instrument(lambda *_: relax.VMInstrumentReturnKind.NO_OP)
    layers = tuple(results.get(p.layer) or LayerError(
        p.layer, p.status or NOT_COMPARABLE, p.site,
        p.note or (f"the reference has no value for node {p.node!r}" if p.node not in saved
                   else f"{p.site} did not run")) for p in plan)
    return Comparison(model=lineage.model, entry=entry, atol=atol, rtol=rtol, precision=precision, layers=layers)


def _judge(p, got, ref_path: str, atol: float, rtol: float) -> LayerError:
    ref = np.load(ref_path)
    if got is None or got.shape != ref.shape:
        shape = "nothing" if got is None else f"shape {list(got.shape)}"
        return LayerError(p.layer, NOT_COMPARABLE, p.site, f"{p.site} wrote {shape}, the reference "
                                                           f"{list(ref.shape)} (another layout)")
    return error_of(p.layer, p.site, got, ref, atol, rtol)


def _onnx_outputs(model, arrays, wanted: set[str], folder: Path) -> dict[str, str]:
    """Run the ONNX ``model`` (a ModelProto or path) with ``onnx.reference`` on
    ``arrays`` (its graph inputs in order) and save each value in ``wanted``
    (``onnx:NAME``): node -> .npy path."""
    from .frontends.common import require

    onnx = require("onnx", "onnx")
    from onnx.reference import ReferenceEvaluator

    if not (hasattr(model, "graph") or str(model).endswith(".onnx")):
        raise RelaytraceError(f"the reference of an ONNX build must be its ONNX model, not {type(model).__name__}")
    proto = model if hasattr(model, "graph") else onnx.load(str(model))
    initialized = {t.name for t in proto.graph.initializer}
    feeds = dict(zip([i.name for i in proto.graph.input if i.name not in initialized], arrays))
    names = sorted(n[len(ONNX_VALUE):] for n in wanted)
    try:
        values = ReferenceEvaluator(proto).run(names, feeds)
    except Exception as exc:
        raise RelaytraceError(f"onnx.reference could not run the reference: {describe(exc)}") from exc
    saved = {}
    for i, (name, value) in enumerate(zip(names, values)):
        np.save(folder / f"{i}.npy", np.asarray(value))
        saved[ONNX_VALUE + name] = str(folder / f"{i}.npy")
    return saved


def _torch_outputs(module, arrays, wanted: set[str], folder: Path) -> dict[str, str]:
    """Run ``module`` (exported as ``torch.export.export`` gives it, the program whose
    node names the lineage keeps) on ``arrays`` and save the value of each node in
    ``wanted`` to ``folder``: node name -> .npy path. A node with several outputs gives
    its first tensor."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise RelaytraceError(f"the reference must be the torch module the build was imported from, not "
                              f"{type(module).__name__}")
    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)
    try:
        program = torch.export.export(module.eval(), args)
    except Exception as exc:
        raise RelaytraceError(f"torch.export could not export the reference: {describe(exc)}") from exc
    saved: dict[str, str] = {}

    class Keeper(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if node.name in wanted:
                tensor = value if isinstance(value, torch.Tensor) else next(
                    (v for v in value if isinstance(v, torch.Tensor)), None) if isinstance(value, (tuple, list)) else None
                if tensor is not None:
                    path = folder / f"{len(saved)}.npy"
                    np.save(path, tensor.detach().cpu().numpy())
                    saved[node.name] = str(path)
            return value

    with torch.no_grad():
        Keeper(program.module()).run(*args)
    return saved
