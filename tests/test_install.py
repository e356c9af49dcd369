"""relaytrace installs like a library: into a fresh virtualenv that already holds other
versions of numpy and attrs than constraints.txt pins (within setup.cfg's ranges), pip
resolves it without touching them, and the CLI runs a real demo there. Slow: it installs
TVM and torch (about three minutes); it needs the package registry, as ``make setup`` does."""

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
OTHER = {"numpy": "2.3.5", "attrs": "25.4.0"}  # what a user's project might hold already


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def _ranges() -> dict[str, Requirement]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    wanted = [
        Requirement(line)
        for line in setup["options"]["install_requires"].splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    return {r.name: r for r in wanted}


def test_the_ranges_admit_the_pins_and_the_other_versions_and_no_requirement_is_pinned():
    ranges, pins = _ranges(), _pins()
    assert all("==" not in str(r.specifier) for r in ranges.values()), ranges
    for name, requirement in ranges.items():
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    for name, version in OTHER.items():
        assert ranges[name].specifier.contains(version) and version != pins[name]


def _run(*argv, cwd=None) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert done.returncode == 0, f"{argv}: {done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_pip_installs_it_beside_other_numpy_and_attrs_and_the_demo_runs(tmp_path):
    source = tmp_path / "source"  # a copy, so that the build writes nothing into the tree
    shutil.copytree(ROOT / "relaytrace", source / "relaytrace", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    env = tmp_path / "env"
    _run(sys.executable, "-m", "venv", env)
    python, pip = (
        env / "bin" / "python",
        (env / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"),
    )
    _run(*pip, *(f"{name}=={version}" for name, version in OTHER.items()))
    _run(*pip, source)
    _run(*pip, f"torch=={_pins()['torch']}")  # the demo's models are torch's
    versions = "import numpy, attrs, tvm; print(numpy.__version__, attrs.__version__)"
    assert _run(python, "-c", versions).split() == [OTHER["numpy"], OTHER["attrs"]]
    _run(python, "-m", "pip", "check")
    assert "Map TVM kernels" in _run(env / "bin" / "relaytrace", "--help")
    out = _run(env / "bin" / "relaytrace", "demo", "--model", "resnet18", "--out", tmp_path / "demo", cwd=tmp_path)
    verified = re.search(r"verified against the compiled IR: (\d+) of (\d+) call sites", out)
    assert verified and verified[1] == verified[2] != "0", out[-2000:]
    assert (tmp_path / "demo" / "lineage.json").is_file()
