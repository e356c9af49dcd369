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
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attrs import define

from ..errors import RelaytraceError, UsageError, describe
from ..model.shapes import match_input_names
from .common import ImportedModel

DEMO_MODELS = ("resnet50", "resnet18", "vgg16", "mobilenet_v2", "resnet_style")


@define(frozen=True)
class LoadedModel:
    """A model spec loaded: the imported model, its example inputs, and what it came from."""

    model: ImportedModel
    inputs: tuple  # numpy arrays, one per input of the entry function they are for
    source: object = None  # the torch module or ONNX model (or path) it came from: `compare`'s reference
    dynamic_shapes: object = None  # a torch source's, which compare exports the reference with too


@define(frozen=True)
class Request:
    """What ``load`` was asked besides the source (see ``load``); ``given`` is ``shapes``
    and ``dtype`` read by ``given_shapes``."""

    example_args: object
    shapes: tuple
    dtype: str | None
    name: str | None
    seed: int
    with_inputs: bool
    entry: str | None
    dynamic_shapes: object
    given: dict

    def loaded(self, imported: ImportedModel, source=None, example: tuple = ()) -> LoadedModel:
        """``imported`` with its inputs (``_inputs``; without ``with_inputs``, the
        source's own ``example`` arrays, or none)."""
        arrays = _inputs(imported, self.seed, self.given, self.entry, example) if self.with_inputs else example
        return LoadedModel(imported, arrays, source, self.dynamic_shapes)


@define(frozen=True)
class Frontend:
    """One form a model comes in: ``accepts(source)`` says whether a source is of it,
    ``load(source, request)`` makes the ``LoadedModel``, ``what`` names the form in the
    error that lists them. ``FRONTENDS`` is asked in order; the first that accepts
    loads. A new frontend is a module beside this one, returning an ``ImportedModel``
    whose ``layer_of`` names every op, and one line in ``FRONTENDS``."""

    name: str
    accepts: Callable[[Any], bool]
    load: Callable[[Any, Request], LoadedModel]
    what: str


def load(  # noqa: PLR0913 - public API: keyword options, checked and then held in records
    source,
    example_args=None,
    shapes=(),
    dtype: str | None = None,
    name: str | None = None,
    seed: int = 0,
    with_inputs: bool = True,
    entry: str | None = None,
    dynamic_shapes=None,
) -> LoadedModel:
    """The model ``source`` names (see the module docstring). ``shapes`` (``(input
    name, shape)`` or ``(input name, shape, dtype)``) fix an ONNX model's input shapes
    and size the random inputs of any model (of a torch module only with
    ``dynamic_shapes``: its other dims are fixed); ``dtype`` is the dtype of the inputs
    given a shape without one (default: the model's). ``entry`` names the entry function
    the inputs are for (default ``main``, or the only one); ``dynamic_shapes`` goes to
    ``torch.export``. Without ``with_inputs`` no inputs are made (build() needs none).
    The first of ``FRONTENDS`` that accepts ``source`` loads it."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    request = Request(
        example_args, shapes, dtype, name, seed, with_inputs, entry, dynamic_shapes, given_shapes(shapes, dtype)
    )
    for frontend in FRONTENDS:
        if frontend.accepts(source):
            return frontend.load(source, request)
    kinds = [f.what for f in FRONTENDS]
    raise RelaytraceError(f"a model is {', '.join(kinds[:-1])} or {kinds[-1]}; not {type(source).__name__}")


def _load_onnx(source, request: Request) -> LoadedModel:
    from .onnx import from_onnx

    if isinstance(source, str) and not Path(source).is_file():
        raise RelaytraceError(f"no ONNX file at {source}")
    shape_dict = {n: shape for n, (shape, _) in request.given.items()} or None
    return request.loaded(from_onnx(source, shape_dict=shape_dict, name=request.name), source)


def _load_nn(source, request: Request) -> LoadedModel:  # tvm.relax.frontend.nn: example_args is the export spec
    from tvm.relax.frontend.nn.spec import ModuleSpec

    from .nn import from_nn

    if not isinstance(request.example_args, (dict, ModuleSpec)):
        raise RelaytraceError(
            "a tvm.relax.frontend.nn module needs its export spec: {method: {argument: nn.spec.Tensor(shape, dtype)}} "
            "or an nn.spec.ModuleSpec (what get_default_spec() returns)"
        )
    return request.loaded(from_nn(source, request.example_args, name=request.name))


def _load_torch(source, request: Request) -> LoadedModel:
    if request.example_args is None:
        raise RelaytraceError("a torch module needs example_args=(tensor, ...) to be exported")
    from .torch import from_torch

    if request.entry not in (None, "main"):
        raise UsageError("a torch model runs through main: --entry does not apply")
    if request.given and request.dynamic_shapes is None:
        raise UsageError(
            "a torch model exported without dynamic_shapes runs at its example inputs' sizes: "
            "--input-shape and --dtype do not apply (return (module, example inputs, "
            "dynamic_shapes) from the factory to run it at other sizes)"
        )
    example = request.example_args if isinstance(request.example_args, tuple) else (request.example_args,)
    imported = from_torch(source, example, name=request.name, dynamic_shapes=request.dynamic_shapes)
    return request.loaded(imported, source, tuple(e.detach().numpy() for e in example))


def _is_ir_module(obj) -> bool:
    import tvm

    return isinstance(obj, tvm.IRModule)


FRONTENDS: tuple[Frontend, ...] = (
    Frontend("imported", lambda s: isinstance(s, ImportedModel), lambda s, r: r.loaded(s), "an ImportedModel"),
    Frontend(
        "demo",
        lambda s: isinstance(s, str) and s.startswith("demo:"),
        lambda s, r: _demo(s[len("demo:") :], r.name, r.seed, r.with_inputs),
        "demo:NAME",
    ),
    Frontend(
        "factory",
        lambda s: isinstance(s, str) and not s.endswith(".onnx"),
        lambda s, r: _factory(
            s, r.name, shapes=r.shapes, dtype=r.dtype, seed=r.seed, with_inputs=r.with_inputs, entry=r.entry
        ),
        "path/to/file.py:factory",
    ),
    Frontend("onnx", lambda s: _is_onnx(s), _load_onnx, "an ONNX model or .onnx path"),
    Frontend("nn", lambda s: _is_nn_module(s), _load_nn, "a tvm.relax.frontend.nn module (with its export spec)"),
    Frontend("torch", lambda s: _is_torch_module(s), _load_torch, "a torch.nn.Module (with example inputs)"),
    Frontend("relax", _is_ir_module, lambda s, r: r.loaded(ImportedModel(s, r.name or "model", {})), "a tvm.IRModule"),
)


def _demo(demo: str, name: str | None, seed: int, with_inputs: bool) -> LoadedModel:
    """A built-in model: a zoo model imported from torch, or the small ResNet-style
    model written in Relax (no torch needed)."""
    if demo not in DEMO_MODELS:
        raise UsageError(f"unknown demo model {demo!r}: choose one of {', '.join(DEMO_MODELS)}")
    if demo == "resnet_style":
        from ..zoo.relax_models import resnet_style

        return load(resnet_style(blocks=3), name=name or demo, seed=seed, with_inputs=with_inputs)
    from .. import zoo

    module, example = zoo.get(demo, seed=seed)
    return load(module, (example,), name=name or demo)


FACTORY_RESULTS = (
    "(torch module, example inputs), (torch module, example inputs, dynamic_shapes), "
    "(nn module, spec), a tvm.IRModule (TVMScript) or an ImportedModel (from_torch, from_onnx, from_nn)"
)


def _factory(spec: str, name: str | None, **options) -> LoadedModel:
    """The model ``path/to/file.py:factory`` makes. Whatever the file does wrong while
    imported or while its factory runs (raises, a ``BaseException`` of its own too, calls
    ``sys.exit``, returns something else) is a one-line ``RelaytraceError`` naming the
    file and the factory. The working directory is put back as it was: a file that
    ``os.chdir()``s moves no relative path of the command (``--out``, ``--db``). The
    module stays importable (``sys.modules``, as ``relaytrace_user_STEM``), as a script's
    own module does while it runs."""
    path, sep, factory = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise UsageError(f"MODEL must be an .onnx file or path/to/file.py:factory, not {spec!r}")
    if not Path(path).is_file():
        raise RelaytraceError(f"no Python file at {path}")
    loader = importlib.util.spec_from_file_location(f"relaytrace_user_{Path(path).stem}", path)
    if loader is None or loader.loader is None:
        raise RelaytraceError(f"{path} cannot be imported as a Python module: give a .py file")
    module = importlib.util.module_from_spec(loader)
    folder = str(Path(path).resolve().parent)
    sys.path.insert(0, folder)  # as `python file.py` has it: the file's own imports (from net import make) work
    # TVMScript (@I.ir_module) reads a class's source through its module, at import and in
    # a pass the file defines while the build runs: the module stays for the whole command
    sys.modules[loader.name] = module
    here = os.getcwd()
    try:
        try:
            loader.loader.exec_module(module)
        except SystemExit as exc:
            raise RelaytraceError(
                f"{path} called {_exit_call(exc)} while relaytrace imported it: keep a script's "
                'own run under `if __name__ == "__main__":`'
            ) from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - the file's own failure, said as its own
            raise RelaytraceError(f"{path} failed to import: {type(exc).__name__}: {exc}") from exc
        if not hasattr(module, factory):
            own = [n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == loader.name]
            raise RelaytraceError(
                f"{path} has no function {factory!r}"
                + (f" (it defines {', '.join(n for n in own if not n.startswith('_')) or 'none'})" if own else "")
            )
        try:
            made = _call_factory(getattr(module, factory), f"{path}:{factory}")
        except SystemExit as exc:
            raise RelaytraceError(
                f"the factory {factory} in {path} called {_exit_call(exc)}: a factory returns "
                f"{FACTORY_RESULTS}, it does not exit"
            ) from None
    finally:
        sys.path.remove(folder)
        _back_to(here, path)
    if isinstance(made, ImportedModel):
        return load(made, **options)  # named as its frontend named it
    if _is_ir_module(made):  # TVMScript, as TVM's own tutorials write models
        return load(made, name=name or model_name(path, factory), **options)
    if isinstance(made, tuple) and len(made) == 3 and _is_torch_module(made[0]):
        made_module, example, dynamic_shapes = made
        return load(
            made_module, example, name=name or model_name(path, factory), dynamic_shapes=dynamic_shapes, **options
        )
    if not (
        isinstance(made, tuple)
        and len(made) == 2
        and any(f(made[0]) for f in (_is_torch_module, _is_nn_module, _is_onnx))
    ):
        what = (
            f"({', '.join(_kind(v)[2:] for v in made)})" if isinstance(made, tuple) and len(made) == 2 else _kind(made)
        )
        raise RelaytraceError(f"{factory}() must return {FACTORY_RESULTS}, not {what}")
    made_module, example = made
    return load(made_module, example, name=name or model_name(path, factory), **options)


# factory names that say nothing of the model: such a factory's model is named by its file
GENERIC_FACTORIES = frozenset(
    {
        "make",
        "build",
        "create",
        "get",
        "load",
        "model",
        "main",
        "factory",
        "make_model",
        "build_model",
        "create_model",
        "get_model",
        "load_model",
        "model_fn",
    }
)


def model_name(path: str, factory: str) -> str:
    """The name of the model ``path:factory`` makes: the factory's (``hf_models.py:llama``
    is ``llama``, ``zoo.py:resnet50`` is ``resnet50``), or the file's stem when the
    factory's name says nothing of the model (``mymodel.py:make`` is ``mymodel``:
    ``GENERIC_FACTORIES``). A factory returning an ``ImportedModel`` keeps the name its
    frontend gave it."""
    return Path(path).stem if factory.lower() in GENERIC_FACTORIES else factory


def _exit_call(exc: SystemExit) -> str:
    """The ``sys.exit(...)`` call a user's code made, as it would read in the code."""
    return f"sys.exit({'' if exc.code is None else repr(exc.code)})"


def _kind(value) -> str:
    """What a factory returned, in words: ``a tuple of 4``, ``a str``."""
    return f"a tuple of {len(value)}" if isinstance(value, tuple) else f"a {type(value).__name__}"


def _call_factory(factory, where: str):
    """The user's factory called with no arguments; whatever it raises is said as its own."""
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
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - a BaseException of the user's own is the factory's failure too
        raise RelaytraceError(f"{where}() raised {describe(exc)}") from exc


def _back_to(directory: str, path: str) -> None:
    """The working directory back to ``directory`` if the file at ``path`` changed it."""
    try:
        if os.getcwd() == directory:
            return
    except FileNotFoundError:  # the directory it went to is gone
        pass
    try:
        os.chdir(directory)
    except OSError as exc:
        raise RelaytraceError(
            f"{path} changed the working directory, and {directory} cannot be entered again "
            f"({describe(exc)}): run relaytrace with absolute paths"
        ) from None


def given_shapes(shapes, dtype: str | None) -> dict[str, tuple[tuple[int, ...], str | None]]:
    """input name -> (shape, dtype or None) from ``(name, shape[, dtype])`` entries; an
    input named twice is a UsageError (which would win is no answer)."""
    out: dict[str, tuple[tuple[int, ...], str | None]] = {}
    for item in shapes:
        name, shape, *rest = item
        if name in out:
            raise UsageError(
                f"input {name} is given a shape twice ({'x'.join(map(str, out[name][0]))} and "
                f"{'x'.join(map(str, shape))}): give each input once"
            )
        out[name] = (tuple(shape), (rest[0] if rest and rest[0] else None) or dtype)
    return out


def _inputs(imported: ImportedModel, seed: int, given=None, entry: str | None = None, example: tuple = ()) -> tuple:
    """Inputs for one entry of the model: seeded random data sized by ``given``
    (``given_shapes``) for an input named there, the ``example`` array (one per input,
    when the source has them) for one that is not, else seeded random data of the
    model's shape; a symbolic dim left without a size is a UsageError naming the input,
    its symbolic dims and the ``--input-shape`` to give. The sizes must fit the
    signature together (``shapes.bind``: one value per symbol)."""
    from ..model.entry import cache_param, grouped, served_steps
    from ..model.entry import signature as tensors_of
    from ..model.lineage import choose_entry
    from ..model.shapes import bind
    from ..tracking import ir
    from ..tracking.entries import entry_params

    every = entry_params(ir.function_map(imported.mod))
    if entry is None and "main" not in every and served_steps(every) is not None:
        return ()  # an LLM served as a prefill and decode steps, each through its KV cache (profiling.serve)
    params = every[choose_entry(every, entry)]
    if cache_param(params) is not None:
        return ()  # it takes a KV cache: served, its inputs made by the profiler (profiling.serve)
    signature = tensors_of(params)  # a tuple parameter (packed weights) field by field
    given = match_input_names(given or {}, [n for n, _, _ in signature], imported.name)
    examples = dict(zip((n for n, _, _ in signature), example))
    chosen = []
    for pname, shape, declared in signature:
        default = examples[pname].shape if pname in examples else shape
        size, dtype = given.get(pname, (default, None))
        symbolic = [str(d) for d in size if not isinstance(d, int)]  # "?" and "...": open shapes too
        if symbolic:
            fixed = "x".join(str(d) if isinstance(d, int) else "1" for d in size)
            raise UsageError(
                f"input {pname} of {imported.name} has symbolic dims ({', '.join(symbolic)}): "
                f"give its size, e.g. --input-shape {pname}:{fixed}"
            )
        chosen.append((tuple(size), dtype or declared))
    bind(signature, chosen, imported.name)
    import numpy as np  # here: the CLI's reading commands import this module, and need no numpy

    rng = np.random.default_rng(seed)
    return tuple(
        grouped(
            params,
            [
                examples[pname]
                if pname in examples and pname not in given
                else rng.standard_normal(shape).astype(dtype)
                if np.issubdtype(np.dtype(dtype), np.floating)
                else np.zeros(shape, dtype)
                for (pname, _, _), (shape, dtype) in zip(signature, chosen)
            ],
        )
    )


def _is_nn_module(obj) -> bool:
    return any(c.__module__ == "tvm.relax.frontend.nn.core" and c.__name__ == "Module" for c in type(obj).__mro__)


def _is_torch_module(obj) -> bool:
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(obj).__mro__)


def _is_onnx(obj) -> bool:
    return (isinstance(obj, str) and obj.endswith(".onnx")) or type(obj).__name__ == "ModelProto"
