"""The report's pure JavaScript (``render/assets/pure.js``), run in node: each function on
hand-checked cases, and the two that mirror Python against the Python they mirror, so
that the page and the terminal never say a size or a module path differently."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from relaytrace.model.layer_name import module_path
from relaytrace.render.memory import size

PURE = Path(__file__).resolve().parents[2] / "relaytrace" / "render" / "assets" / "pure.js"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (make test installs Debian's nodejs)")


def _js(calls: list[tuple[str, list]]) -> list:
    """Each ``(function, arguments)`` of pure.js called in node, its results in order."""
    script = (
        f"const pure = require({json.dumps(str(PURE))});\n"
        f"const calls = {json.dumps(calls)};\n"
        "process.stdout.write(JSON.stringify(calls.map(([f, args]) => pure[f](...args))));\n"
    )
    done = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_each_pure_function_on_hand_checked_cases():
    cases = [
        (("cell", [None]), ""),
        (("cell", [3]), "3"),
        (("cell", [0.004567]), "0.00457"),
        (("cell", [1.23456]), "1.235"),
        (("cell", [["a", "b"]]), "a, b"),
        (("sig", [None]), "?"),
        (("sig", [1234.5, 2]), "1.2e+3"),
        (("nice", [0.7]), 1),
        (("nice", [3]), 5),
        (("nice", [11]), 20),
        (("prefix", ["layer1.0.conv1", 2]), "layer1.0"),
        (("prefix", ["layer1.0.conv1@2", 0]), "layer1.0.conv1@2"),
        (("prefix", ["/encoder/layer.0/MatMul", 1]), "/encoder"),
        (("modulePath", ["relu@1"]), "relu"),
        (("modulePath", ["a@b"]), "a@b"),
    ]
    assert _js([call for call, _ in cases]) == [want for _, want in cases]


def test_size_and_module_path_say_what_the_python_they_mirror_says():
    sizes = [0, 1, 1023, 1024, 1536, 24 * 2**10, 99.96 * 2**20, 100 * 2**20, 3 * 2**30 + 1, 1234 * 2**30]
    layers = ["relu", "relu@1", "c@1@0", "a@b", "m.@7", "x@", "blocks.3.attn@12", "/enc/l@0/Add@3"]
    got = _js([("size", [n]) for n in sizes] + [("modulePath", [layer]) for layer in layers])
    assert got == [size(n) for n in sizes] + [module_path(layer) for layer in layers]
