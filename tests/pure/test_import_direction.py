"""Imports go one way: a module imports only modules of its own stage or of a lower
one (docs/architecture.md draws the stages). Read from the source with ``ast``, so the
test needs nothing installed and sees imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "relaytrace"

# Lowest first. A module belongs to the stage of the longest prefix listed for it.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "render.safe_text")),  # one-line errors; names made safe for any output
    ("model", ("model",)),  # the saved records, pure data
    ("tracking", ("tracking",)),  # record, follow and verify a build (TVM)
    ("zoo", ("zoo",)),  # model definitions
    ("frontends", ("frontends",)),  # torch / ONNX / nn / IRModule -> ImportedModel
    ("devices", ("profiling.remote",)),  # RPC devices
    ("build", ("build", "diagnosis", "failures", "profiling.tasks")),
    ("profiling", ("profiling",)),
    ("analysis", ("analysis",)),
    ("render", ("render",)),
    ("jobs", ("jobs", "schemas")),  # output directories, run records; the saved files' schemas
    ("commands", ("commands", "cli", "legacy", "")),  # the CLI and its commands, the legacy readers, the API
)


def stage_of(module: str) -> int:
    """The stage index of ``module`` (dotted, without ``relaytrace.``); KeyError if no
    stage lists it."""
    best = None
    for index, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:  # "" is the package itself, nothing else
            if module == prefix or prefix and module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    if best is None:
        raise KeyError(module)
    return best[1]


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every relaytrace module the file imports, relative ones resolved."""
    module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if "." in module else ""
    if path.name == "__init__.py":
        package = module.removesuffix(".__init__").removesuffix("__init__")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = parts[: len(parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [_submodule(target, a.name) for a in node.names]
            elif (node.module or "").startswith("relaytrace"):
                names = [node.module.removeprefix("relaytrace").lstrip(".")]
            else:
                continue
            found += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name.removeprefix("relaytrace").lstrip("."))
                for a in node.names
                if a.name.split(".")[0] == "relaytrace"
            ]
    return found


def _submodule(package: str, name: str) -> str:
    """``package.name`` when ``from package import name`` imports a module, else ``package``."""
    where = PACKAGE.joinpath(*package.split(".")) if package else PACKAGE
    found = (where / f"{name}.py").exists() or (where / name / "__init__.py").exists()
    return f"{package}.{name}".lstrip(".") if found else package


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    return name.removesuffix(".__init__").removesuffix("__init__")


def upward(module: str, found: list[tuple[int, str]]) -> list[str]:
    """The imports among ``found`` ((line, target) of ``module``) that go to a higher stage."""
    mine = stage_of(module)
    return [
        f"{module}:{line}: {STAGES[mine][0]} imports {target or 'relaytrace'} ({STAGES[stage_of(target)][0]})"
        for line, target in found
        if stage_of(target) > mine
    ]


def test_every_module_imports_only_its_own_stage_or_lower():
    wrong = [problem for path in sorted(PACKAGE.rglob("*.py")) for problem in upward(_module(path), imports(path))]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_an_upward_import():
    """The reader finds relative and absolute imports, at any depth, inside functions."""
    found = {target for _, target in imports(PACKAGE / "commands" / "tasks.py")}
    assert {"build", "profiling.tasks", "errors", "commands.base", "commands.shared"} <= found, found
    assert stage_of("model.lineage") < stage_of("tracking.tracker") < stage_of("render.html") < stage_of("cli")
    assert stage_of("render.safe_text") == 0 and stage_of("render.outputs") == stage_of("render")
    assert stage_of("") == len(STAGES) - 1  # the package's own __init__: the top
    assert upward("model.lineage", [(3, "render.html"), (4, "errors")]) == [
        "model.lineage:3: model imports render.html (render)"
    ]
    assert upward("render.html", [(1, "model.origin"), (2, "render.safe_text")]) == []
    with pytest.raises(KeyError):
        stage_of("newmodule")  # a module no stage lists is an error, not the top stage
