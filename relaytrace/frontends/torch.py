"""PyTorch → Relax with torch module paths as layers.

torch.export records, for every fx node, the stack of modules it ran in
(``nn_module_stack``); the innermost entry is the layer (``layer1.0.conv1``), and a
module called twice is told apart as ``relu@1``. An op of the root module's own
``forward`` (``x.permute(...)``, ``x + y``, ``torch.cat``) has no module: its layer is
named after the user's program, the one ``torch.export.export`` gives before
decompositions, and all ops one line of the user's code made (the same chain of user
frames in torch's stack trace) are one layer, named after the line's last node there
(``h @ w.T`` is one layer ``matmul``, not ``permute_5``, ``view_6``, ``mm``, ``view_7``).
Symbolic dims keep the names the user gave them (``torch.export.Dim("seq")`` is ``seq``
in the Relax module, so in every output, not torch's ``s27``). The Relax importer translates nodes
in order and every binding it emits for node i precedes node i's result, so the
bindings up to node i's result var belong to node i. Each node's stack trace gives
the line of the user's ``forward`` that made it (``Origin.source``), and each op keeps
the name of its node in the program ``torch.export.export`` gives before decompositions
(``Origin.node``): the node ids Model Explorer's ExportedProgram adapter shows.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import re

from ..errors import RelaytraceError, describe, require
from ..model.frontend import TORCH, Program, SourceNode
from ..model.layer_name import layer_name
from .common import ImportedModel

# torch logs a failed shape check as a traceback (``E1205 ... fake_tensor.py``) before it
# raises the same error, which relaytrace says in one line
FAKE_TENSOR_LOG = "torch._subclasses.fake_tensor"


@contextlib.contextmanager
def _quiet(logger: str):
    """``logger`` (a ``logging`` name) silent inside the block, as it was after."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        log.setLevel(level)


def from_torch(module, example_args, name: str | None = None, dynamic_shapes=None) -> ImportedModel:
    """A torch module through ``torch.export`` into Relax, each op named after the
    innermost ``nn.Module`` path it ran in. ``dynamic_shapes`` (as ``torch.export``
    takes it, e.g. ``{"x": {0: torch.export.Dim("batch")}}``) keeps those dims
    symbolic: the build then runs for any size in their range."""
    torch = require("torch", "torch")
    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    label = name or type(module).__name__
    try:
        with _quiet(FAKE_TENSOR_LOG):
            original = torch.export.export(module.eval(), example_args, dynamic_shapes=dynamic_shapes)
            exported = original.run_decompositions()
    except Exception as exc:
        raise RelaytraceError(
            f"torch.export could not export {label} ({type(module).__name__}): {describe(exc)}"
        ) from exc

    importer = _recording_importer(_dim_names(original))
    try:
        with torch.no_grad():
            mod = importer.from_exported_program(
                exported,
                keep_params_as_input=False,
                unwrap_unit_return_tuple=True,
                no_bind_return_tuple=False,
                custom_convert_map=None,
            )
    except Exception as exc:  # an op TVM's importer lacks, dtypes it cannot mix
        raise RelaytraceError(
            f"TVM's torch importer could not import {label} ({type(module).__name__}): {describe(exc)}"
        ) from exc
    layers, nodes = _assign(mod, importer.order, original.graph, _root_layers(original.graph))
    return ImportedModel(mod=mod, name=label, layers=layers, program=Program(TORCH, nodes))


def _layer(node, exported: str, root_layers: dict[str, str]) -> str:
    """The layer of ``node`` (of the decomposed program): the innermost module it ran
    in, or for an op of the root module's own forward, the layer ``root_layers`` gives
    ``exported``, the node of the user's program it was decomposed from (its own name
    when none is recorded)."""
    stack = node.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    if not path:
        return root_layers.get(exported, exported or node.name)  # an op in the root module's own forward
    return layer_name(path, _call(list(stack)[-1], path))


def _call(key: str, path: str) -> int:
    """Which call of the module at ``path`` a node of ``nn_module_stack`` entry ``key``
    ran in: torch keys the first call by a name ending in the path (``L__self__a@b``)
    and the N-th after it by that name and ``@N``. The path itself may hold ``@`` and
    digits (a module named ``c@1``): only a suffix after the whole path is a call."""
    head, sep, call = key.rpartition("@")
    return int(call) if sep and call.isascii() and call.isdigit() and head.endswith(path) else 0


def _root_layers(graph) -> dict[str, str]:
    """Node of ``graph`` (the user's program) -> its layer, for the ops of the root
    module's own forward: the nodes one line of the user's code made (the same chain
    of user frames) are one layer, named after the last of them; a node without a
    recorded line is a layer of its own, named after itself."""
    import torch

    torch_dir = os.path.dirname(torch.__file__)
    lines: dict[tuple, list[str]] = {}
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        if node.op == "call_function" and not (stack and list(stack.values())[-1][0]):
            frames = tuple(_user_frames(node, torch_dir))
            lines.setdefault(frames or (node.name,), []).append(node.name)
    return {name: names[-1] for names in lines.values() for name in names}


def _dim_names(exported) -> dict[str, str]:
    """torch's symbol (``s27``) -> the name the user gave its dim (``Dim("seq")``), read
    from the shape environment of the program's inputs: which input dims each symbol
    stands for (``var_to_sources``) and the name given to such a dim
    (``source_name_to_debug_name``). A symbol without a given name keeps torch's; a
    name that another symbol has, or that two symbols would share, is not given."""
    names: dict[str, str] = {}
    symbols: set[str] = set()
    for node in exported.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        for size in getattr(value, "shape", ()):
            env = getattr(getattr(size, "node", None), "shape_env", None)
            sources = getattr(env, "var_to_sources", {})
            given = getattr(env, "source_name_to_debug_name", {})
            for symbol in getattr(size.node.expr, "free_symbols", ()) if env is not None else ():
                symbols.add(str(symbol))
                for source in sources.get(symbol, ()):
                    name = given.get(source.name)
                    if isinstance(name, str) and name.isidentifier():
                        names.setdefault(str(symbol), name)
    taken = [*names.values(), *(s for s in symbols if s not in names)]
    return {s: n for s, n in names.items() if taken.count(n) == 1}


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _user_frames(node, torch_dir: str) -> list[str]:
    """The frames of the node's stack trace in the user's code (not torch's own: its
    package, or the relative ``torch/...`` paths of the passes it runs), outermost
    first, each ``file:line``."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    return [
        f"{path}:{line}"
        for path, line in frames
        if not (path.startswith(torch_dir) or path.startswith(f"torch{os.sep}"))
    ]


def _where(node, torch_dir: str) -> str:
    """``file:line`` of the user's code that made the node: the innermost frame of its
    stack trace outside torch itself ("" when torch recorded none)."""
    user = _user_frames(node, torch_dir)
    return user[-1] if user else ""


def _exported_name(node, graph, names: set[str]) -> str:
    """The name of the node of ``graph`` (the program before decompositions, whose node
    ``names`` these are) that ``node`` was decomposed from: the nearest ancestor in its
    ``from_node`` provenance made in ``graph`` ("" when none is recorded)."""
    pending = list(node.meta.get("from_node") or ())
    while pending:
        source = pending.pop(0)
        if getattr(source, "graph_id", None) == id(graph) and source.name in names:
            return source.name
        pending.extend(getattr(source, "from_node", None) or ())
    return ""  # a name alone could be another op's (mul_1 before and after decompositions)


def _source_op(node) -> str:
    target = node.target
    return str(getattr(target, "__name__", target)).split(".")[0]


def _assign(
    mod, order, graph, root_layers: dict[str, str]
) -> tuple[dict[int, tuple[str, str, str, str]], tuple[SourceNode, ...]]:
    """Bindings of main up to each node's result var belong to that node: its layer
    (``_layer``, by ``root_layers`` for an op of the root module's forward),
    source op, where in the user's code it was made and its node in ``graph``. A var
    belongs to the node that *produced* it, the first whose importer value it is: a
    later node that only passes it on (eval ``Dropout``, ``.to`` the same dtype,
    ``clone``, ``_assert_tensor_metadata``) computes nothing and owns nothing.

    Also returns the program's nodes as the importer saw them (``SourceNode``): what
    verification checks the origins against.

    BindParams rebuilds ``main`` after translation, so result vars are found again by
    name (the importer's names are unique within main)."""
    import torch

    from ..tracking import ir

    torch_dir = os.path.dirname(torch.__file__)
    boundary: dict[str, object] = {}  # a value's name -> the node that made it; None: an input
    made: dict = {}  # node -> the names of the values it made (a multi-output op: its projections too)
    for node, value in order:
        if node.op != "call_function":  # an input: no binding of main
            if ir.is_var(value):
                boundary.setdefault(value.name, None)
            continue
        if node.target is operator.getitem and node.args and hasattr(node.args[0], "meta"):
            node = node.args[0]  # a projection of a multi-output op belongs to that op
        else:
            made.setdefault(node, [])
        if ir.is_var(value) and value.name not in boundary:
            boundary[value.name] = node
            made.setdefault(node, []).append(value.name)
    layers: dict[int, tuple[str, str, str, str]] = {}
    pending = []
    bindings = ir.bindings(mod["main"])
    # a value folded to a constant computes nothing; an op's, or a projection of one, does
    bound = {b.var.name for b in bindings if ir.is_call(b.value) or ir.is_tuple_get_item(b.value)}
    in_graph = {n.name for n in graph.nodes}
    exported = {node: _exported_name(node, graph, in_graph) for node in made}  # every node a var belongs to
    program = tuple(
        SourceNode(
            exported[node], _source_op(node), _layer(node, exported[node], root_layers), bool(bound.intersection(names))
        )
        for node, names in made.items()
    )
    for binding in bindings:
        pending.append(binding.var)
        node = boundary.get(binding.var.name)
        if node is None:
            continue
        label = (_layer(node, exported[node], root_layers), _source_op(node), _where(node, torch_dir), exported[node])
        for var in pending:
            layers[var.__chandle__()] = label
        pending = []
    if pending and layers:
        last = list(layers.values())[-1]
        for var in pending:
            layers[var.__chandle__()] = last
    return layers, program


def _recording_importer(dim_names: dict[str, str]):
    """An ExportedProgramImporter that remembers each call_function node and its
    result, in translation order, and names each symbolic dim as ``dim_names`` says
    (torch's symbol -> the user's name): the importer makes a TIR var of every symbol,
    and of every symbol in a derived dim (``2*s27``), through ``_process_derived_symbol``,
    which is given the symbols renamed. Built lazily: torch is an optional dependency."""
    import sympy
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    class RecordingImporter(ExportedProgramImporter):
        order: list = []

        def _process_derived_symbol(self, symbol, torch_symbol_to_relax_var):
            if isinstance(symbol, sympy.Basic):
                symbol = symbol.xreplace(
                    {
                        s: sympy.Symbol(dim_names[str(s)], integer=True, positive=True)
                        for s in symbol.free_symbols
                        if str(s) in dim_names
                    }
                )
            return super()._process_derived_symbol(symbol, torch_symbol_to_relax_var)

        def _translate_fx_graph(self, graph_module, nodes, inputs_vars, custom_ops=None):
            result = super()._translate_fx_graph(graph_module, nodes, inputs_vars, custom_ops)
            self.order = list(self.env.items())
            return result

    return RecordingImporter()
