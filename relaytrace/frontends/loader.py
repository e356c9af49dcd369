"""One model loader for every form a model comes in, for build(), the CLI and tools.

``load(source)`` takes a ``tvm.IRModule``, an ``ImportedModel``, a ``torch.nn.Module``
(with ``example_args``), an ONNX ``ModelProto`` or ``.onnx`` path,
``"path/to/file.py:factory"`` (a function returning a torch module and its example
inputs) or ``"demo:NAME"`` (a built-in model), and returns a ``LoadedModel``: the
model with its layer names, and inputs to run it with (the example inputs where the
source has them, else seeded random ones of main's shapes and dtypes).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
from attrs import define

from ..errors import RelaytraceError, UsageError
from .common import ImportedModel

DEMO_MODELS = ("resnet50", "resnet18", "vgg16", "mobilenet_v2", "resnet_style")


@define(frozen=True)
class LoadedModel:
    model: ImportedModel
    inputs: tuple  # numpy arrays, one per input of main


def load(source, example_args=None, shapes=(), dtype: str = "float32", name: str | None = None,
         seed: int = 0, with_inputs: bool = True) -> LoadedModel:
    """The model ``source`` names (see the module docstring). ``shapes`` (``(input
    name, shape)`` pairs) and ``dtype`` fix an ONNX model's inputs; without
    ``with_inputs`` no random inputs are made (build() needs none)."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if isinstance(source, ImportedModel):
        return LoadedModel(source, _random_inputs(source, seed) if with_inputs else ())
    if isinstance(source, str) and source.startswith("demo:"):
        return _demo(source[len("demo:"):], name, seed, with_inputs)
    if isinstance(source, str) and not source.endswith(".onnx"):
        return _factory(source, name)
    if _is_onnx(source):
        from .onnx import from_onnx

        if isinstance(source, str) and not Path(source).is_file():
            raise RelaytraceError(f"no ONNX file at {source}")
        shape_dict = dict(shapes)
        imported = from_onnx(source, shape_dict=shape_dict or None, name=name)
        return LoadedModel(imported, _random_inputs(imported, seed, dtype if shape_dict else None)
                           if with_inputs else ())
    if _is_torch_module(source):
        if example_args is None:
            raise RelaytraceError("a torch module needs example_args=(tensor, ...) to be exported")
        from .torch import from_torch

        example = example_args if isinstance(example_args, tuple) else (example_args,)
        return LoadedModel(from_torch(source, example, name=name), tuple(e.detach().numpy() for e in example))
    import tvm

    if isinstance(source, tvm.IRModule):
        imported = ImportedModel(source, name or "model", {})
        return LoadedModel(imported, _random_inputs(imported, seed) if with_inputs else ())
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


def _factory(spec: str, name: str | None) -> LoadedModel:
    path, sep, factory = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise UsageError(f"MODEL must be an .onnx file or path/to/file.py:factory, not {spec!r}")
    if not Path(path).is_file():
        raise RelaytraceError(f"no Python file at {path}")
    loader = importlib.util.spec_from_file_location(f"relaytrace_user_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(loader)
    try:
        loader.loader.exec_module(module)
    except Exception as exc:
        raise RelaytraceError(f"{path} failed to import: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, factory):
        raise RelaytraceError(f"{path} has no function {factory!r}")
    made = getattr(module, factory)()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise RelaytraceError(f"{factory}() must return (torch module, example inputs)")
    torch_module, example = made
    return load(torch_module, example, name=name or Path(path).stem)


def _random_inputs(imported: ImportedModel, seed: int, dtype: str | None = None) -> tuple:
    from ..tracking.origins import main_inputs

    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype or d) for _, shape, d in main_inputs(imported.mod))


def _is_torch_module(obj) -> bool:
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(obj).__mro__)


def _is_onnx(obj) -> bool:
    return (isinstance(obj, str) and obj.endswith(".onnx")) or type(obj).__name__ == "ModelProto"
