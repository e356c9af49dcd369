"""One model loader for every form a model comes in, for build(), the CLI and tools.

``load(source)`` takes a ``tvm.IRModule``, an ``ImportedModel``, a ``torch.nn.Module``
(with ``example_args``), a ``tvm.relax.frontend.nn.Module`` (with its export spec as
``example_args``), an ONNX ``ModelProto`` or ``.onnx`` path,
``"path/to/file.py:factory"`` (a function returning what ``load`` takes: an
``ImportedModel``, a torch module with its example inputs and optionally its
``dynamic_shapes``, or an nn module and its spec) or ``"demo:NAME"`` (a built-in
model), and returns a ``LoadedModel``: the model with its layer names, and inputs to
run it with. An input given a size (``shapes``) is seeded random data of that size;
one not given is the source's example input where it has one, else seeded random data
of the entry's shape and dtype (integer inputs are zeros, valid as indices); a
symbolic dim that gets no size either way is refused, naming the input.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from attrs import define

from ..errors import RelaytraceError, UsageError, describe
from .common import ImportedModel, match_input_names

DEMO_MODELS = ("resnet50", "resnet18", "vgg16", "mobilenet_v2", "resnet_style")


@define(frozen=True)
class LoadedModel:
    model: ImportedModel
    inputs: tuple  # numpy arrays, one per input of the entry function they are for
    source: object = None  # the torch module or ONNX model (or path) it came from: `compare`'s reference


def load(source, example_args=None, shapes=(), dtype: str | None = None, name: str | None = None,
         seed: int = 0, with_inputs: bool = True, entry: str | None = None, dynamic_shapes=None) -> LoadedModel:
    """The model ``source`` names (see the module docstring). ``shapes`` (``(input
    name, shape)`` or ``(input name, shape, dtype)``) fix an ONNX model's input shapes
    and size the random inputs of any model (of a torch module only with
    ``dynamic_shapes``: its other dims are fixed); ``dtype`` is the dtype of the inputs
    given a shape without one (default: the model's). ``entry`` names the entry function
    the inputs are for (default ``main``, or the only one); ``dynamic_shapes`` goes to
    ``torch.export``. Without ``with_inputs`` no inputs are made (build() needs none)."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    given = _given_shapes(shapes, dtype)
    if isinstance(source, ImportedModel):
        return LoadedModel(source, _inputs(source, seed, given, entry) if with_inputs else ())
    if isinstance(source, str) and source.startswith("demo:"):
        return _demo(source[len("demo:"):], name, seed, with_inputs)
    if isinstance(source, str) and not source.endswith(".onnx"):
        return _factory(source, name, shapes=shapes, dtype=dtype, seed=seed, with_inputs=with_inputs, entry=entry)
    if _is_onnx(source):
        from .onnx import from_onnx

        if isinstance(source, str) and not Path(source).is_file():
            raise RelaytraceError(f"no ONNX file at {source}")
        imported = from_onnx(source, shape_dict={n: shape for n, (shape, _) in given.items()} or None, name=name)
        return LoadedModel(imported, _inputs(imported, seed, given, entry) if with_inputs else (), source)
    if _is_nn_module(source):  # tvm.relax.frontend.nn: example_args is the export spec
        from .nn import from_nn

        if not isinstance(example_args, dict):
            raise RelaytraceError("a tvm.relax.frontend.nn module needs its export spec: "
                                  "{method: {argument: nn.spec.Tensor(shape, dtype)}}")
        imported = from_nn(source, example_args, name=name)
        return LoadedModel(imported, _inputs(imported, seed, given, entry) if with_inputs else ())
    if _is_torch_module(source):
        if example_args is None:
            raise RelaytraceError("a torch module needs example_args=(tensor, ...) to be exported")
        from .torch import from_torch

        if entry not in (None, "main"):
            raise UsageError("a torch model runs through main: --entry does not apply")
        if given and dynamic_shapes is None:
            raise UsageError("a torch model exported without dynamic_shapes runs at its example inputs' sizes: "
                             "--input-shape and --dtype do not apply (return (module, example inputs, "
                             "dynamic_shapes) from the factory to run it at other sizes)")
        example = example_args if isinstance(example_args, tuple) else (example_args,)
        imported = from_torch(source, example, name=name, dynamic_shapes=dynamic_shapes)
        arrays = tuple(e.detach().numpy() for e in example)
        return LoadedModel(imported, _inputs(imported, seed, given, entry, arrays) if with_inputs else arrays, source)
    import tvm

    if isinstance(source, tvm.IRModule):
        imported = ImportedModel(source, name or "model", {})
        return LoadedModel(imported, _inputs(imported, seed, given, entry) if with_inputs else ())
    raise RelaytraceError(
        "a model is a tvm.IRModule, an ImportedModel, a torch.nn.Module (with example inputs), an ONNX model "
        f"or .onnx path, path/to/file.py:factory or demo:NAME; not {type(source).__name__}"
    )


def _demo(demo: str, name: str | None, seed: int, with_inputs: bool) -> LoadedModel:
    """A built-in model: a zoo model imported from torch, or the small ResNet-style
    model written in Relax (no torch needed)."""
    if demo not in DEMO_MODELS:
        raise UsageError(f"unknown demo model {demo!r}: choose one of {', '.join(DEMO_MODELS)}")
    if demo == "resnet_style":
        from ..relax_models import resnet_style

        return load(resnet_style(blocks=3), name=name or demo, seed=seed, with_inputs=with_inputs)
    from .. import zoo

    module, example = zoo.get(demo, seed=seed)
    return load(module, (example,), name=name or demo)


FACTORY_RESULTS = ("(torch module, example inputs), (torch module, example inputs, dynamic_shapes), "
                   "(nn module, spec) or an ImportedModel (from_torch, from_onnx, from_nn)")


def _factory(spec: str, name: str | None, **options) -> LoadedModel:
    """The model ``path/to/file.py:factory`` makes. Whatever the file does wrong while
    imported or while its factory runs (raises, calls ``sys.exit``, returns something
    else) is a one-line ``RelaytraceError`` naming the file and the factory."""
    path, sep, factory = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise UsageError(f"MODEL must be an .onnx file or path/to/file.py:factory, not {spec!r}")
    if not Path(path).is_file():
        raise RelaytraceError(f"no Python file at {path}")
    loader = importlib.util.spec_from_file_location(f"relaytrace_user_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(loader)
    folder = str(Path(path).resolve().parent)
    sys.path.insert(0, folder)  # as `python file.py` has it: the file's own imports (from net import make) work
    try:
        try:
            loader.loader.exec_module(module)
        except Exception as exc:
            raise RelaytraceError(f"{path} failed to import: {type(exc).__name__}: {exc}") from exc
        except SystemExit as exc:
            raise RelaytraceError(f"{path} called {_exit_call(exc)} while relaytrace imported it: keep a script's "
                                  "own run under `if __name__ == \"__main__\":`") from None
        if not hasattr(module, factory):
            raise RelaytraceError(f"{path} has no function {factory!r}")
        try:
            made = _call_factory(getattr(module, factory), f"{path}:{factory}")
        except SystemExit as exc:
            raise RelaytraceError(f"the factory {factory} in {path} called {_exit_call(exc)}: a factory returns "
                                  f"{FACTORY_RESULTS}, it does not exit") from None
    finally:
        sys.path.remove(folder)
    if isinstance(made, ImportedModel):
        return load(made, **options)  # named as its frontend named it
    if isinstance(made, tuple) and len(made) == 3 and _is_torch_module(made[0]):
        made_module, example, dynamic_shapes = made
        return load(made_module, example, name=name or Path(path).stem, dynamic_shapes=dynamic_shapes, **options)
    if not (isinstance(made, tuple) and len(made) == 2):
        raise RelaytraceError(f"{factory}() must return {FACTORY_RESULTS}, not {_kind(made)}")
    made_module, example = made
    return load(made_module, example, name=name or Path(path).stem, **options)


def _exit_call(exc: SystemExit) -> str:
    """The ``sys.exit(...)`` call a user's code made, as it would read in the code."""
    return f"sys.exit({'' if exc.code is None else repr(exc.code)})"


def _kind(value) -> str:
    """What a factory returned, in words: ``a tuple of 4``, ``a str``."""
    return f"a tuple of {len(value)}" if isinstance(value, tuple) else f"a {type(value).__name__}"


def _call_factory(factory, where: str):
    """The user's factory called with no arguments; whatever it raises is said as its own."""
    import inspect

    if not callable(factory):
        raise RelaytraceError(f"{where} is of type {type(factory).__name__}, not a function returning (model, inputs)")
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise RelaytraceError(f"{where} takes arguments; relaytrace calls the factory with none") from None
    except ValueError:
        pass  # no signature to read (a builtin): call it and see
    try:
        return factory()
    except Exception as exc:
        raise RelaytraceError(f"{where}() raised {describe(exc)}") from exc


def _given_shapes(shapes, dtype: str | None) -> dict[str, tuple[tuple[int, ...], str | None]]:
    """input name -> (shape, dtype or None) from ``(name, shape[, dtype])`` entries."""
    out = {}
    for item in shapes:
        name, shape, *rest = item
        out[name] = (tuple(shape), (rest[0] if rest and rest[0] else None) or dtype)
    return out


def _inputs(imported: ImportedModel, seed: int, given=None, entry: str | None = None, example: tuple = ()) -> tuple:
    """Inputs for one entry of the model: seeded random data sized by ``given``
    (``_given_shapes``) for an input named there, the ``example`` array (one per input,
    when the source has them) for one that is not, else seeded random data of the
    model's shape; a symbolic dim left without a size is a UsageError naming the input,
    its symbolic dims and the ``--input-shape`` to give. The sizes must fit the
    signature together (``shapes.bind``: one value per symbol)."""
    from ..model.lineage import choose_entry
    from ..model.shapes import bind
    from ..tracking import ir
    from ..tracking.origins import entry_inputs

    entries = entry_inputs(ir.function_map(imported.mod))
    signature = entries.get(choose_entry(entries, entry), ())
    given = match_input_names(given or {}, [n for n, _, _ in signature], imported.name)
    examples = dict(zip((n for n, _, _ in signature), example))
    chosen = []
    for pname, shape, declared in signature:
        default = examples[pname].shape if pname in examples else shape
        size, dtype = given.get(pname, (default, None))
        symbolic = [str(d) for d in size if not isinstance(d, int)]  # "?" and "...": open shapes too
        if symbolic:
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in size)
            raise UsageError(f"input {pname} of {imported.name} has symbolic dims ({', '.join(symbolic)}): "
                             f"give its size, e.g. --input-shape {pname}:{example}")
        chosen.append((tuple(size), dtype or declared))
    bind(signature, chosen, imported.name)
    import numpy as np  # here: the CLI's reading commands import this module, and need no numpy

    rng = np.random.default_rng(seed)
    return tuple(examples[pname] if pname in examples and pname not in given
                 else rng.standard_normal(shape).astype(dtype) if np.issubdtype(np.dtype(dtype), np.floating)
                 else np.zeros(shape, dtype) for (pname, _, _), (shape, dtype) in zip(signature, chosen))


def _is_nn_module(obj) -> bool:
    return any(c.__module__ == "tvm.relax.frontend.nn.core" and c.__name__ == "Module" for c in type(obj).__mro__)


def _is_torch_module(obj) -> bool:
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(obj).__mro__)


def _is_onnx(obj) -> bool:
    return (isinstance(obj, str) and obj.endswith(".onnx")) or type(obj).__name__ == "ModelProto"
