"""Shared fixtures. TVM, torch and numpy are imported inside the fixtures that need
them: the pure tests (tests/pure) run with TVM, torch and ONNX blocked."""

import os

import attrs
import pytest

from relaytrace.build import BUILD_CONFIGS as CONFIGS

# pytest-xdist's workers (make test runs two) set COLUMNS=80: the tests read tables as
# output into a pipe or a file gets them, each name whole on its line
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


@pytest.fixture(scope="session")
def resnet_mod():
    from relaytrace.zoo.relax_models import resnet_style

    return resnet_style(blocks=3)


@pytest.fixture(scope="session")
def builds(resnet_mod):
    """The ResNet-style model built three ways, traced: {name: (executable, lineage)}."""
    import relaytrace

    return {
        name: relaytrace.build(resnet_mod, "llvm", pipeline=pipe, convert_layout=layout, model="resnet_style")
        for name, (pipe, layout) in CONFIGS.items()
    }


def run_vm(executable, data):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(data)).numpy()


@pytest.fixture(scope="session")
def input_data():
    import numpy as np

    return np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")


@pytest.fixture(scope="session")
def resnet50():
    """zoo resnet50 imported from torch: (imported model, example input as numpy)."""
    pytest.importorskip("torch")
    from relaytrace import zoo
    from relaytrace.frontends.torch import from_torch

    module, example = zoo.get("resnet50")
    return from_torch(module, (example,), name="resnet50"), example.numpy()


@pytest.fixture(scope="session")
def resnet50_profiled(resnet50):
    """Fused build of resnet50 and a 2-run timeline profile of it."""
    import relaytrace

    model, x = resnet50
    executable, lineage = relaytrace.build(model, "llvm")
    return executable, lineage, relaytrace.profile(executable, lineage, [x], repeat=2)


def move_origin(lineage, origin: str, to):
    """The lineage with ``origin`` taken from its call site and put at call site ``to``,
    each site's roles given by its origins as the tracker gives them (``roles_for``):
    a deliberately wrong lineage, for verification to catch."""
    from relaytrace.model.roles import roles_for

    kernels = {}
    for kernel, sites in lineage.kernels.items():
        moved = []
        for site in sites:
            ids = [o for o in site.origin_ids if o != origin] + [origin] * (site.position == to.position)
            moved.append(attrs.evolve(site, roles=roles_for(ids, lineage.origins)))
        kernels[kernel] = tuple(moved)
    return attrs.evolve(lineage, kernels=kernels)


def anchored_kernel(lineage, layer: str) -> str:
    """The kernel of the first call site built around ``layer``'s op: a kernel named by
    what it runs, for tests that must not spell TVM's numbered names."""
    return next(s.kernel for s in lineage.call_sites if s.anchor and lineage.origins[s.anchor].layer == layer)


@pytest.fixture(scope="session")
def tiny_out(tmp_path_factory):
    """An output DIR of ``relaytrace profile`` on the tiny model (one run), made once;
    tests copy it before changing anything in it."""
    from tests.fuzz import run_cli

    out = tmp_path_factory.mktemp("tiny") / "run"
    code, _, err = run_cli(["--quiet", "profile", "tests/fixtures/tiny_model.py:make", "--repeat", "1", "--out", out])
    assert code == 0, err
    return out


def assert_holds_to_schema(data: dict, file: str) -> None:
    """``data`` (what relaytrace writes as ``file``: ``lineage.json``, ...) validates
    against that file's JSON Schema (docs/schemas/), by ``jsonschema``'s validator."""
    import jsonschema

    from relaytrace.schemas import saved_files

    jsonschema.validate(data, saved_files()[file], cls=jsonschema.Draft202012Validator)
