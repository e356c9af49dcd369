"""The commands behind one interface: the parser is built from ``COMMANDS`` and nothing
else, and a command added as docs/architecture.md shows (one module, one registry
entry) is parsed, run, and has its failures made one line by ``main``."""

import contextlib
import io

import pytest

from relaytrace.cli import build_parser, main
from relaytrace.commands import COMMANDS, Command
from relaytrace.jobs import echo
from tests.pure.test_by_hand import lineage


def _layers_add_arguments(p) -> None:
    p.add_argument("lineage", metavar="DIR|lineage.json")


def _layers_run(args) -> int:
    from relaytrace.model.lineage import Lineage

    loaded = Lineage.load(args.lineage)
    for layer in loaded.layers():
        echo(f"{layer}: {', '.join(s.label for s in loaded.kernels_of(layer))}")
    return 0


LAYERS = Command("layers", "every layer's kernel calls", _layers_add_arguments, _layers_run)


def _run(argv, commands=COMMANDS):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv], commands)
    return code, out.getvalue(), err.getvalue()


def test_the_parser_has_exactly_the_listed_commands():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert list(sub.choices) == [c.name for c in COMMANDS]
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)
    for command in COMMANDS:
        assert command.run.__doc__ and command.add_arguments.__doc__, command.name


def test_every_command_has_its_section_in_the_cli_reference():
    from pathlib import Path

    reference = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert all(f"\n## {c.name}\n" in reference for c in COMMANDS), [c.name for c in COMMANDS]


def test_a_command_added_as_the_docs_show_runs_through_main(tmp_path):
    path = lineage().save(tmp_path / "lineage.json")
    code, out, err = _run(["layers", path], COMMANDS + (LAYERS,))
    assert code == 0, err
    assert out.splitlines() == [
        "conv1: fused_conv2d_relu#0, layout_transform#0",
        "relu: fused_conv2d_relu#0",
        "fc: layout_transform#0, matmul#0",
    ]  # the transform serves both
    code, _, err = _run(["layers", tmp_path / "missing.json"], COMMANDS + (LAYERS,))
    assert code == 1 and err.strip().startswith("relaytrace: error:") and "\n" not in err.strip(), err


def test_a_command_not_listed_is_a_usage_error():
    with pytest.raises(SystemExit) as done, contextlib.redirect_stderr(io.StringIO()) as err:
        main(["layers", "x"])
    assert done.value.code == 2 and "invalid choice: 'layers'" in err.getvalue()
