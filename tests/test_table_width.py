"""Every terminal table of profile, tasks, diff, query and memory fits in 100 columns
(``COLUMNS=100``) on a 2-block LLaMA and zoo ResNet-50, with no name cut (issue 33)."""

import pytest

from relaytrace import cli
from relaytrace.model.lineage import Lineage
from relaytrace.render import memory as memory_text
from relaytrace.render import table

from .conftest import anchored_kernel
from .pure.test_table import cells

pytest.importorskip("transformers")

HF = "tests/fixtures/hf_models.py"


@pytest.fixture
def tables(monkeypatch):
    """Each table ``format_table`` made while a command ran, and its rows, at COLUMNS=100."""
    monkeypatch.setenv("COLUMNS", "100")
    made: list[tuple[str, list]] = []
    real = table.format_table

    def spy(headers, rows, *args, **kwargs):
        text = real(headers, rows, *args, **kwargs)
        made.append((text, [[str(c) for c in r] for r in rows]))
        return text

    monkeypatch.setattr(table, "format_table", spy)
    monkeypatch.setattr(memory_text, "format_table", spy)
    return made


def _runs(base, model: str, second: list[str]):
    """``model`` profiled into base/a, and once more (``second``: other options) into base/b."""
    for out, extra in (("a", []), ("b", second)):
        assert cli.main(["--quiet", "profile", model, "--out", str(base / out), "--repeat", "2", *extra]) == 0


def _fits(tables, capsys, argv, least: int = 1):
    """``relaytrace ARGV``'s tables: at least ``least``, each at most 100 wide, every name whole."""
    del tables[:]
    assert cli.main(["--quiet", *argv]) == 0
    out = capsys.readouterr().out
    assert len(tables) >= least, argv
    for text, rows in tables:
        assert max(map(len, text.splitlines())) <= 100, f"{argv}:\n{text}"
        assert text in out or argv[0] == "profile"  # profile's summary is printed, its tables in it
        key = _unwrapped(rows)
        if key is not None:  # a column to tell rows by: each cell read back whole
            assert [["".join(c.split()) for c in r] for r in cells(text, key=key)] == [
                ["".join(c.split()) for c in r] for r in rows
            ], text
    return out


def _unwrapped(rows) -> int | None:
    """A column no cell of which is wrapped (none empty, none over 8 characters: a
    column is never narrower): where a row starts. None when no column is so."""
    return next((i for i in range(len(rows[0]) if rows else 0) if all(0 < len(r[i]) <= 8 for r in rows)), None)


def _every_command(base, tables, capsys, model, layer, kernel_of):
    """Each command's tables; ``query --kernel`` on the kernel built around ``kernel_of``."""
    kernel = anchored_kernel(Lineage.load(base / "a" / "lineage.json"), kernel_of)
    _fits(tables, capsys, ["profile", model, "--out", str(base / "again"), "--repeat", "1"], least=3)
    _fits(tables, capsys, ["tasks", str(base / "a")])
    _fits(tables, capsys, ["diff", str(base / "a"), str(base / "b")])
    _fits(tables, capsys, ["memory", str(base / "a")], least=2)
    _fits(tables, capsys, ["memory", str(base / "a"), str(base / "b")])
    _fits(tables, capsys, ["query", str(base / "a"), "--history", layer])
    out = _fits(tables, capsys, ["query", str(base / "a"), "--kernel", kernel], least=0)
    # a line may pass 100 columns only by what is never cut: the kernel's name, a source location
    assert [line for line in out.splitlines() if len(line.rsplit("  at ", 1)[0]) > 100 and kernel not in line] == []


@pytest.mark.slow
def test_llama_tables_fit_100_columns(tmp_path, tables, capsys):
    _runs(tmp_path, f"{HF}:llama", ["--pipeline", "unfused"])
    capsys.readouterr()  # the profiles' summaries: what follows is the tasks command's alone
    out = _fits(tables, capsys, ["tasks", str(tmp_path / "a")])
    rows = [words[0] for words in map(str.split, out.splitlines()[2:]) if len(words) > 1 and words[1].isdigit()]
    ran = Lineage.load(tmp_path / "a" / "lineage.json").kernels
    idle = out.split("(run as VM builtins or folded): ")[1].splitlines()[0].split(", ")  # tasks that became no kernel
    assert idle and not set(idle) & set(ran) and set(idle) <= set(rows)
    assert max(i for i, r in enumerate(rows) if r in ran) < min(map(rows.index, idle))  # after those that did
    _every_command(
        tmp_path, tables, capsys, f"{HF}:llama", "m.model.layers.0.self_attn", "m.model.layers.0.mlp.gate_proj"
    )


@pytest.mark.slow
@pytest.mark.heavy  # the llama's tables above, and every command's on the small models, hold the widths
def test_resnet50_tables_fit_100_columns(tmp_path, tables, capsys):
    _runs(tmp_path, "demo:resnet50", ["--layout", "NHWC"])
    _every_command(tmp_path, tables, capsys, "demo:resnet50", "layer3.1.conv2", "layer1.1.bn3")
