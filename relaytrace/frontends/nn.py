"""TVM's own frontend, ``tvm.relax.frontend.nn`` (what LLM deployments build with),
into an ``ImportedModel`` whose ops are named after the ``nn.Module`` path they ran in.

``from_nn(module, spec)`` exports as ``module.export_tvm(spec)`` does, with two
observers that live only for the export: each submodule's ``forward`` is wrapped (an
attribute of that instance, put back as it was afterwards) to keep a stack of module
paths, and
the exporter's own BlockBuilder (made by this function) notes the path on top of the
stack for every binding it emits. Every exported function (``prefill``, ``decode``) is
named this way; parameters stay inputs of each function, as ``export_tvm`` makes them
(the exporter itself leaves each ``Parameter``'s expression set, as ``export_tvm`` does).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import RelaytraceError, describe, require
from ..model.frontend import NN, Program
from ..model.layer_name import layer_name
from .common import ImportedModel


def from_nn(module, spec: dict, name: str | None = None) -> ImportedModel:
    """``module`` (a ``tvm.relax.frontend.nn.Module``) exported for ``spec`` (as
    ``export_tvm`` takes it: method name -> argument specs), each op named after the
    innermost module whose ``forward`` emitted it (``layers.0.self_attn.qkv_proj``);
    ops a method emits itself keep their Relax names."""
    require("tvm", "tvm")
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import spec as nn_spec
    from tvm.relax.frontend.nn.exporter import Exporter

    if not isinstance(module, nn.Module):
        raise RelaytraceError(f"from_nn takes a tvm.relax.frontend.nn.Module, not {type(module).__name__}")
    label = name or type(module).__name__
    exporter = Exporter(debug=False)
    builder = exporter.builder
    stack: list[str] = []
    owner: dict[int, tuple[str, str]] = {}
    emitted = []  # the vars noted, kept alive while their handles key ``owner``
    emit, function = builder.emit, builder.function
    made: dict[str, int] = {}  # module path -> its calls so far in the function being exported

    def noting_function(*args, **kwargs):  # each exported function numbers module calls anew
        made.clear()
        return function(*args, **kwargs)

    def noting_emit(expr, name_hint=""):
        var = emit(expr, name_hint)
        if stack:
            emitted.append(var)
            owner.setdefault(var.__chandle__(), (stack[-1], type(_current[-1]).__name__))
        return var

    _current: list = []
    wrapped = []  # (module, the forward it had as an instance attribute, if any)
    for path, sub in _submodules(module, nn):
        wrapped.append((sub, vars(sub).get("forward", _NONE)))
        sub.forward = _observed(sub, sub.forward, path, stack, _current, made)
    builder.emit, builder.function = noting_emit, noting_function
    try:
        mod, _, ext_mods = exporter.build(nn_spec.ModuleSpec.from_raw(spec, module))
    except Exception as exc:
        raise RelaytraceError(f"tvm.relax.frontend.nn could not export {label}: {describe(exc)}") from exc
    finally:
        del builder.emit, builder.function
        for sub, own in wrapped:  # the module as it was: its own forward back, or none
            if own is _NONE:
                del sub.forward
            else:
                sub.forward = own
    if ext_mods:
        raise RelaytraceError(f"{label} uses ExternModules, which relaytrace cannot trace")
    return ImportedModel(mod=mod, name=label, layers=owner, keep=tuple(emitted), program=Program(NN))


_NONE = object()


def _observed(sub, forward, path: str, stack: list[str], current: list, made: dict[str, int]):
    """``forward`` with ``path`` on the stack while it runs; the second call of a module
    in one exported function is ``path@1``, as ``from_torch`` names it."""

    def observed(*args, **kwargs):
        made[path] = made.get(path, -1) + 1
        stack.append(layer_name(path, made[path]))
        current.append(sub)
        try:
            return forward(*args, **kwargs)
        finally:
            stack.pop()
            current.pop()

    return observed


def _submodules(root, nn, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(path, module) of every submodule below ``root`` that has a ``forward``, by
    attribute name and list index (``layers.0.mlp``), each module once."""
    seen: set[int] = set()

    def walk(item, path):
        if isinstance(item, nn.ModuleList):
            children = [(str(i), m) for i, m in enumerate(item)]
        elif isinstance(item, nn.ModuleDict):
            children = list(item.items())
        elif isinstance(item, nn.Module):
            if path and id(item) not in seen and hasattr(item, "forward"):
                seen.add(id(item))
                yield path, item
            children = [(k, v) for k, v in vars(item).items() if isinstance(v, nn.Module)]
        else:
            return
        for key, child in children:
            yield from walk(child, f"{path}.{key}" if path else key)

    yield from walk(root, prefix)
