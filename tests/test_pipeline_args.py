"""A pipeline registered by name and given its arguments on the command line
(``--pipeline NAME:{JSON}``), as MLC-LLM's ``get_pipeline("mlc_llm", target=...,
metadata=...)`` needs them."""

from __future__ import annotations

import pytest

FACTORY = """import torch
import tvm
from tvm import relax


def _pipeline(target, fuse=True, passes=()):
    assert isinstance(target, tvm.target.Target)  # the build's target, given by relaytrace
    return relax.get_default_pipeline(target) if fuse else relax.get_pipeline("default")


if "relaytrace_test_fusing" not in relax.pipeline.PIPELINE_MAP:  # TVM registers a name once a process
    relax.register_pipeline("relaytrace_test_fusing")(_pipeline)


def make():
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    return net, (torch.randn(2, 16),)
"""


@pytest.fixture
def factory(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(FACTORY)
    return f"{path}:make"


@pytest.mark.parametrize("fuse", [True, False])
def test_the_pipeline_is_made_with_the_arguments_given(factory, tmp_path, fuse):
    from relaytrace import cli
    from relaytrace.model.lineage import Lineage

    out = tmp_path / f"out-{fuse}"
    pipeline = f'relaytrace_test_fusing:{{"fuse": {str(fuse).lower()}}}'
    assert cli.main(["--quiet", "profile", factory, "--pipeline", pipeline, "--repeat", "1", "--out", str(out)]) == 0
    lineage = Lineage.load(out / "lineage.json")
    assert lineage.build.options.pipeline == pipeline  # run.json and the lineage say the arguments
    fused = [s for s in lineage.call_sites if len(lineage.origins_of(s.kernel, call=s.key.call)) > 1]
    assert bool(fused) == fuse  # fused: a Linear's matmul and bias add (and the ReLU) in one kernel


@pytest.mark.parametrize(
    "arguments, said",
    [
        ('{"fuse": tru}', "is not JSON"),
        ("[1, 2]", "takes a JSON object"),
        ('{"fusion": false}', "takes no argument 'fusion': it takes target, fuse, passes"),
    ],
)
def test_arguments_it_cannot_take_are_said_in_one_line(factory, tmp_path, capsys, arguments, said):
    from relaytrace import cli

    out = tmp_path / "out"
    args = ["--quiet", "profile", factory, "--pipeline", f"relaytrace_test_fusing:{arguments}", "--out", str(out)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1 and not out.exists()
