"""The docs name what the code has (issue 47): every module of relaytrace is in
docs/architecture.md and in its package's docstring, and every ``Class.field`` a doc
cites is a field, method or member of a class of that name. Read from the source with
``ast``: no import, no TVM."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "relaytrace"


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" and "assets" not in p.parts)


def test_every_module_is_in_the_architecture_and_its_package_docstring():
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(p.relative_to(PACKAGE))
        for p in _modules()
        if p.name not in architecture and str(p.relative_to(PACKAGE)) not in architecture
    ]
    assert not missing, f"modules docs/architecture.md does not name: {missing}"
    unlisted = []
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        unlisted += [
            f"{init.parent.name}.{p.stem}"
            for p in init.parent.glob("*.py")
            if p.name != "__init__.py" and f"``{p.stem}``" not in doc
        ]
    assert not unlisted, f"modules their package's docstring does not list: {unlisted}"


def _class_members() -> dict[str, set[str]]:
    members: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = members.setdefault(node.name, set())
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                    elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(item.name)
    return members


def test_every_class_field_a_doc_cites_exists():
    members = _class_members()
    cited = [
        (doc.name, cls, name)
        for doc in (ROOT / "docs").glob("*.md")
        for cls, name in re.findall(r"`([A-Z][A-Za-z0-9]*)\.([a-z_][a-z0-9_]*)", doc.read_text())
        if cls in members
    ]
    assert len(cited) > 50  # the check reads what the docs cite
    wrong = sorted({c for c in cited if c[2] not in members[c[1]]})
    assert not wrong, f"fields the docs cite that their class does not have: {wrong}"
