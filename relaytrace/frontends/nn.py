"""TVM's own frontend, ``tvm.relax.frontend.nn`` (what LLM deployments build with),
into an ``ImportedModel`` whose ops are named after the ``nn.Module`` path they ran in.

``from_nn(module, spec)`` exports as ``module.export_tvm(spec)`` does, with two
observers that live only for the export: each submodule's ``forward`` and other
methods (a tied head's ``lm_head_forward``), and the model's own methods that are no
entry, are wrapped (attributes of that instance, put back as they were afterwards) to
keep a stack of module paths, and
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


def from_nn(module, spec, name: str | None = None) -> ImportedModel:
    """``module`` (a ``tvm.relax.frontend.nn.Module``) exported for ``spec`` (as
    ``export_tvm`` takes it: method name -> argument specs), each op named after the
    innermost module whose ``forward`` or other method emitted it
    (``layers.0.self_attn.qkv_proj``; a tied head's ``embed_tokens.lm_head_forward`` is
    ``embed_tokens``), ops of a method of ``module`` that is no entry after that method
    (``index_last_token``); ops an entry emits itself keep their Relax names. ``spec``
    may be an ``nn.spec.ModuleSpec`` (what MLC-LLM's ``get_default_spec()`` returns)."""
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
    wrapped = []  # (module, method name, what it had as an instance attribute, if any)
    try:
        module_spec = nn_spec.ModuleSpec.from_raw(spec, module)
    except Exception as exc:
        raise RelaytraceError(
            f"the export spec of {label} is not one tvm.relax.frontend.nn takes: {describe(exc)}"
        ) from exc
    observed = [(path, sub, method) for path, sub in _submodules(module, nn) for method in _methods(sub, nn)]
    observed += [(method, module, method) for method in _methods(module, nn) if method not in module_spec.method_names]
    for path, sub, method in observed:
        wrapped.append((sub, method, vars(sub).get(method, _NONE)))
        setattr(sub, method, _observed(sub, getattr(sub, method), path, stack, _current, made))
    builder.emit, builder.function = noting_emit, noting_function
    try:
        mod, _, ext_mods = exporter.build(module_spec)
    except Exception as exc:
        raise RelaytraceError(f"tvm.relax.frontend.nn could not export {label}: {describe(exc)}") from exc
    finally:
        del builder.emit, builder.function
        for sub, method, own in wrapped:  # the module as it was: its own attribute back, or none
            if own is _NONE:
                delattr(sub, method)
            else:
                setattr(sub, method, own)
    if ext_mods:
        raise RelaytraceError(f"{label} uses ExternModules, which relaytrace cannot trace")
    program = Program(NN, sizes=_declared_sizes(module, nn))
    return ImportedModel(mod=mod, name=label, layers=owner, keep=tuple(emitted), program=program)


def _declared_sizes(module, nn) -> dict[str, int]:
    """The value ``module`` gives each symbolic dim of its parameters: its attribute of
    that name (``vocab_size``) or its ``config``'s, when an int (MLC-LLM's models keep
    both); a dim it gives none is left out (a served step then asks for ``--bind``)."""
    from tvm import tirx

    shapes = [p.shape for _, p in module.named_parameters()]
    dims = {d if isinstance(d, str) else d.name for s in shapes for d in s if isinstance(d, (str, tirx.Var))}
    config = getattr(module, "config", None)
    out = {}
    for dim in sorted(dims):
        value = next((v for v in (getattr(module, dim, None), getattr(config, dim, None)) if isinstance(v, int)), None)
        if value is not None and not isinstance(value, bool) and value > 0:
            out[dim] = value
    return out


_NONE = object()


def _methods(module, nn) -> list[str]:
    """The methods of ``module`` that may emit ops: ``forward`` and every public method
    its class adds to ``nn.Module``'s (MLC-LLM's ``lm_head_forward``,
    ``index_last_token``), by name."""
    cls = type(module)
    return [
        name
        for name in dir(cls)
        if (name == "forward" or not (name.startswith("_") or hasattr(nn.Module, name)))
        and callable(getattr(cls, name, None))
        and not isinstance(getattr(cls, name), (type, staticmethod, classmethod))
    ]


def _observed(sub, forward, path: str, stack: list[str], current: list, made: dict[str, int]):
    """``forward`` (or another method of ``sub``) with ``path`` on the stack while it
    runs; the second call of a module in one exported function is ``path@1``, as
    ``from_torch`` names it. A method that ``sub``'s own method calls runs as part of
    that call."""

    def observed(*args, **kwargs):
        if current and current[-1] is sub:
            return forward(*args, **kwargs)
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
