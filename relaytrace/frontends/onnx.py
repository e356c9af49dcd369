"""ONNX → Relax, layers named by torch module path for models torch exported, else by
ONNX node name.

The ONNX importer normalizes each node's result but binds it only when a consumer
uses it, so bindings of different nodes interleave. A node owns the binding of its
own result and, walking its dataflow backwards, every binding not owned by another
node: what its converter emitted along the way.
"""

from __future__ import annotations

import ast
import os
import tempfile
import warnings

from ..errors import RelaytraceError, UsageError, describe, require
from ..model.frontend import ONNX, Program, SourceNode, onnx_node_id
from ..model.jsonio import current_umask
from ..model.layer_name import layer_name
from ..model.origin import ONNX_SOURCE
from ..model.shapes import check_rank, match_input_names
from .common import ImportedModel


def from_onnx(model_or_path, shape_dict=None, name: str | None = None, layer_names: str = "torch") -> ImportedModel:
    """An ONNX model into Relax. ``layer_names="torch"`` names the layers of a model
    torch exported by their torch module paths, as ``from_torch`` does
    (``layer_names``), so a torch run and an ONNX run of one model compare layer by
    layer; ``"onnx"`` keeps the node names."""
    if layer_names not in ("torch", "onnx"):
        raise UsageError(f"layer_names must be 'torch' or 'onnx', not {layer_names!r}")
    onnx = require("onnx", "onnx")
    model, label = _load(onnx, model_or_path, name)
    inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    shape_dict = match_input_names(shape_dict or {}, inputs, f"ONNX model {label}") or None
    declared = {i.name: _declared_shape(i) for i in model.graph.input}
    for input_name, shape in (shape_dict or {}).items():
        if (dims := declared[input_name]) is not None:
            check_rank(input_name, dims, tuple(shape), f"ONNX model {label}")
            _check_fixed_dims(input_name, dims, tuple(shape), f"ONNX model {label}")
    _check_zero_dims(inputs, declared, shape_dict or {}, f"ONNX model {label}")
    torch_names = layer_names == "torch" and model.producer_name == "pytorch"
    importer = _recording_importer(shape_dict, torch_names)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    try:
        with warnings.catch_warnings():  # "Renaming name input.1 to input_1": either name is taken (match_input_names)
            warnings.filterwarnings("ignore", message="Renaming name", category=UserWarning)
            mod = importer.from_onnx(model.graph, opset)
    except Exception as exc:
        raise RelaytraceError(
            f"TVM could not import ONNX model {label}: {describe(exc)}{_symbolic_hint(model, shape_dict or {})}"
        ) from exc
    layers, nodes = _assign(mod, importer.records)
    return ImportedModel(mod=mod, name=label, layers=layers, program=Program(ONNX, nodes))


def _declared_shape(value_info) -> tuple | None:
    """An ONNX graph input's shape (ints, symbol names, ``?``), or None when the model
    does not say its rank."""
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim)


def _check_fixed_dims(name: str, declared: tuple, given: tuple, what: str) -> None:
    """A shape given for an input keeps the dims the model fixes (TVM would import the
    model at the given size and fail later, in its own words, where the graph's
    constants assume the declared one): a ``UsageError`` naming the dim otherwise."""
    for axis, (fixed, size) in enumerate(zip(declared, given)):
        if isinstance(fixed, int) and fixed > 0 and fixed != size:
            dims = "x".join(str(d) for d in declared)
            raise UsageError(
                f"input {name} of {what} fixes dim {axis} at {fixed} ({dims}); the shape given has "
                f"{size}: size only its symbolic dims, or export the model with that dim dynamic"
            )


def _check_zero_dims(inputs: list, declared: dict, given: dict, what: str) -> None:
    """An input declared with a dim of 0 (an exporter's 'unknown', which TVM reads as a
    symbolic dim) and given no shape: a ``UsageError`` asking for its size."""
    for name in inputs:
        dims = declared.get(name)
        if name not in given and dims and 0 in dims:
            example = "x".join("1" if d == 0 or not isinstance(d, int) else str(d) for d in dims)
            raise UsageError(
                f"input {name} of {what} declares a dim of 0 ({'x'.join(map(str, dims))}: an unknown "
                f"size to TVM, not an empty tensor): give its size, e.g. --input-shape {name}:{example}"
            )


def _symbolic_hint(model, shape_dict: dict) -> str:
    """What to pass when the import failed on inputs with symbolic dims no shape fixed."""
    hints = []
    for i in model.graph.input:
        dims = i.type.tensor_type.shape.dim
        if i.name not in shape_dict and any(not d.HasField("dim_value") for d in dims):
            example = "x".join(str(d.dim_value) if d.HasField("dim_value") else "1" for d in dims)
            hints.append(f"--input-shape {i.name}:{example}")
    return f" (its inputs have symbolic dims: fix them with {' '.join(hints)})" if hints else ""


def _load(onnx, model_or_path, name):
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if not os.path.isfile(path):
            raise RelaytraceError(f"no ONNX file at {path}")
        try:
            model = onnx.load(path)
            onnx.checker.check_model(model)
        except Exception as exc:
            raise RelaytraceError(f"{path} is not a valid ONNX model: {type(exc).__name__}: {exc}") from exc
        return model, name or os.path.splitext(os.path.basename(path))[0]
    if not hasattr(model_or_path, "graph"):
        raise RelaytraceError(f"from_onnx takes an onnx.ModelProto or a path, not {type(model_or_path).__name__}")
    return model_or_path, name or (model_or_path.graph.name or "onnx_model")


def _onnx_name(node, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def layer_names(nodes, torch_names: bool, parameters=frozenset()) -> list[str]:
    """The layer of each node, in graph order: its ONNX name, or for a model torch
    exported its torch module path, as ``from_torch`` names it. From the dynamo
    exporter's ``pkg.torch.onnx.name_scopes`` metadata (``['', 'layer1', 'layer1.0',
    'layer1.0.conv1', 'conv2d']`` -> ``layer1.0.conv1``; a module entered again after
    another of its parent's is its next call, ``layer1.0.relu@1``; an op of the root
    module keeps its fx name), else from the legacy exporter's scoped node name
    (``scope_path``; a trailing ``_N`` read by ``_legacy_layers``, with ``parameters``:
    the graph's initializer names). The exporter may fuse ops across modules (Conv and
    the BatchNorm after it, under the BatchNorm's scope): the metadata is read as it is."""
    out: list[str] = []
    calls: dict[tuple[str, ...], int] = {}
    previous: tuple[str, ...] = ()
    legacy = _legacy_layers(nodes, parameters) if torch_names else {}
    for index, node in enumerate(nodes):
        scopes = _name_scopes(node) if torch_names else None
        if scopes is None:
            out.append(legacy.get(node.name) or _onnx_name(node, index))
            continue
        path = tuple(s for s in scopes if s)
        module = path[:-1]  # the last scope is the op's own fx name
        if not module:
            out.append(path[-1] if path else _onnx_name(node, index))
            continue
        if module not in calls:
            calls[module] = 0
        elif module != previous[: len(module)]:  # entered again after another module
            calls[module] += 1
        previous = module
        out.append(layer_name(module[-1], calls[module]))
    return out


def _legacy_layers(nodes, parameters) -> dict[str, str]:
    """Each legacy-exported node's layer (``/…`` node names): its ``scope_path``, whose
    trailing ``_N`` is the N-th call of the module before it only where the model says
    so. The exporter scopes a module's N-th call ``name_N``, but a module may be named
    so too (``conv_1``, ``conv_2``): a scope ``head_N`` is a repeated call of ``head``
    when its ops use ``head``'s parameters (initializers ``head.…``), or, using none of
    its own (``head_N.…``), when the scope ``head`` came before it in the graph. A
    module ``relu_1`` without parameters beside a ``relu`` called twice cannot be told
    from ``relu``'s second call: the exporter names both ``relu_1``."""
    paths = {n.name: scope_path(n.name) for n in nodes if n.name.startswith("/")}
    first: dict[str, int] = {}
    uses: dict[str, set[str]] = {}
    for index, node in enumerate(nodes):
        path = paths.get(node.name)
        if path:
            first.setdefault(path, index)
            uses.setdefault(path, set()).update(name.rpartition(".")[0] for name in node.input if name in parameters)
    out = {}
    for name, path in paths.items():
        head, call = _numbered(path)
        used = uses.get(path, set())
        repeated = call and path not in used and (head in used or first.get(head, len(nodes)) < first[path])
        out[name] = layer_name(head, call) if repeated else layer_name(path) if path else _root_op(name)
    return out


def _numbered(path: str) -> tuple[str, int]:
    """``(head, N)`` of a scope path ending in ``_N`` as the exporter numbers a module's
    later calls (N from 1, no leading zero); ``(path, 0)`` for any other."""
    head, _, tail = path.rpartition("_")
    if head and tail.isascii() and tail.isdigit() and not tail.startswith("0"):
        return head, int(tail)
    return path, 0


def _name_scopes(node) -> list[str] | None:
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return None
            return [str(s) for s in scopes] if isinstance(scopes, list) else None
    return None


def _recording_importer(shape_dict, torch_names: bool):
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    class RecordingImporter(ONNXGraphImporter):
        records: list

        def _construct_nodes(self, graph):
            self.records = []
            self._names = layer_names(graph.node, torch_names, frozenset(t.name for t in graph.initializer))
            self._types = [n.op_type for n in graph.node]
            self._node_names = [n.name for n in graph.node]
            return super()._construct_nodes(graph)

        def _convert_operator(self, op_name, inputs, attrs, opset):
            sym = super()._convert_operator(op_name, inputs, attrs, opset)
            k = len(self.records)
            self.records.append(
                (
                    self._names[k],
                    self._types[k],
                    ONNX_SOURCE + self._node_names[k],
                    onnx_node_id(self._node_names[k], k),
                    sym,
                )
            )
            return sym

    return RecordingImporter(shape_dict or {}, {}, keep_params_in_input=False, sanitize=True)


def _assign(mod, records) -> tuple[dict[int, tuple[str, str, str, str]], tuple[SourceNode, ...]]:
    """Each binding of main: (layer, ONNX op type, ``onnx node NAME``, node id) of the node whose
    converter emitted it (or, left over, of the next node's); and the graph's nodes
    (``SourceNode``), each computing when its converter's result is a binding no
    earlier node's was (a Constant, an Identity or a shape folded to a constant: not)."""
    from ..tracking import ir

    binds = ir.bindings(mod["main"])
    by_var = {b.var.__chandle__(): i for i, b in enumerate(binds)}
    by_value = {b.value.__chandle__(): i for i, b in enumerate(binds)}
    owner: dict[int, tuple[str, str, str, str]] = {}
    roots = []
    nodes = []
    for layer, op_type, where, value, sym in records:
        made = False
        for expr in sym.fields[:] if ir.is_tuple(sym) else [sym]:
            index = by_var.get(expr.__chandle__()) if ir.is_var(expr) else by_value.get(expr.__chandle__())
            if index is not None and index not in owner:
                owner[index] = (layer, op_type, where, value)
                roots.append(index)
                made = True
        nodes.append(SourceNode(value, op_type, layer, made))
    for root in roots:  # claim what each node's converter emitted on its way
        stack = [root]
        while stack:
            value = binds[stack.pop()].value
            for arg in _var_args(value, ir):
                index = by_var.get(arg.__chandle__())
                if index is not None and index not in owner:
                    owner[index] = owner[root]
                    stack.append(index)
    layers: dict[int, tuple[str, str, str, str]] = {}
    following = None
    for index in range(len(binds) - 1, -1, -1):  # leftovers: the next owned binding's node
        following = owner.get(index, following)
        if following is not None:
            layers[binds[index].var.__chandle__()] = following
    return layers, tuple(nodes)


def _var_args(value, ir):
    if ir.is_call(value):
        for arg in value.args[:]:
            yield from _var_args(arg, ir) if ir.is_tuple(arg) else ([arg] if ir.is_var(arg) else [])
    elif ir.is_tuple(value):
        for field in value.fields[:]:
            if ir.is_var(field):
                yield field
    elif ir.is_tuple_get_item(value) and ir.is_var(value.tuple_value):
        yield value.tuple_value
    elif ir.is_var(value):
        yield value


def export_torch_to_onnx(
    module, example_args, path, opset: int = 17, fold_batch_norm: bool = True, dynamic_shapes=None
) -> str:
    """Write an ONNX file from a torch module (legacy exporter, no network), atomically.
    ``fold_batch_norm=False`` keeps each BatchNorm a node of its own (training mode
    PRESERVE, no constant folding), so every torch layer has its ONNX counterpart.
    ``dynamic_shapes`` keeps dims symbolic, in ``from_torch``'s form: forward's argument
    name -> {dim index: a ``torch.export.Dim`` or a name} (``{"x": {1: "seq"}}``); the
    inputs are then named as forward names them, and each such dim of the ONNX graph is
    named (``seq``), so ``from_onnx`` gives one build for every size."""
    torch = require("torch", "torch")
    require("onnx", "onnx")
    options = {} if fold_batch_norm else {"training": torch.onnx.TrainingMode.PRESERVE, "do_constant_folding": False}
    if dynamic_shapes:
        options.update(_dynamic_axes(module, example_args, dynamic_shapes))
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=directory)
    os.close(fd)
    try:
        torch.onnx.export(module.eval(), example_args, tmp, dynamo=False, opset_version=opset, **options)
        os.chmod(tmp, 0o666 & ~current_umask())  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _dynamic_axes(module, example_args, dynamic_shapes) -> dict:
    """The legacy exporter's ``input_names`` and ``dynamic_axes`` for ``dynamic_shapes``
    (``export_torch_to_onnx``); a name forward does not take is refused, naming those it does."""
    import inspect

    count = len(example_args) if isinstance(example_args, tuple) else 1
    names = [p for p in inspect.signature(module.forward).parameters][:count]
    unknown = [n for n in dynamic_shapes if n not in names]
    if unknown:
        raise UsageError(
            f"dynamic_shapes names {', '.join(map(repr, unknown))}, which forward does not take "
            f"(its inputs: {', '.join(names)})"
        )
    axes = {
        name: {int(d): getattr(dim, "__name__", None) or str(dim) for d, dim in dims.items()}
        for name, dims in dynamic_shapes.items()
        if dims
    }
    return {"input_names": names, "dynamic_axes": axes}


def scope_path(onnx_name: str) -> str:
    """The module path of the scopes of a node ``torch.onnx.export`` named, each scope
    as written ("" for an op of the root module).

    ``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``;
    ``/layer2/layer2.0/downsample/downsample.0/Conv`` -> ``layer2.0.downsample.0``;
    ``/layer1/layer1.0/relu_1/Relu`` -> ``layer1.0.relu_1``. A scope is either a name
    relative to the scope above, or ``attr.index`` under ``attr``."""
    scopes = [p for p in onnx_name.split("/") if p][:-1]
    path, prev = "", None
    for seg in scopes:
        if prev is not None and seg.startswith(prev + "."):
            path += seg[len(prev) :]  # "conv.0" under "conv": one level down
        else:
            path = f"{path}.{seg}" if path else seg
        prev = seg
    return path


def _root_op(onnx_name: str) -> str:
    parts = [p for p in onnx_name.split("/") if p]
    return parts[-1] if parts else onnx_name


def torch_layer_name(onnx_name: str, known=None) -> str:
    """The torch layer of a node exported by ``torch.onnx.export`` (``scope_path``;
    ``/Flatten`` -> ``Flatten``, an op of the root module). A trailing ``_N`` is the
    N-th call of the module before it (``/layer1/layer1.0/relu_1/Relu`` ->
    ``layer1.0.relu@1``) only when ``known`` (the model's module paths or torch layer
    names) holds that module and not the name as written; without ``known`` the name
    is as written (a module may be named ``conv_1``). ``from_onnx`` reads the whole
    graph instead (``layer_names``)."""
    path = scope_path(onnx_name)
    if not path:
        return _root_op(onnx_name)
    head, call = _numbered(path)
    if known is not None and call and path not in known and head in known:
        return layer_name(head, call)
    return layer_name(path)
