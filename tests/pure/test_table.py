"""The one table renderer: fitted to the terminal's width, long names broken after
``_`` or ``.`` and never cut (issue 33); ``COLUMNS`` and a terminal decide the width."""

import pytest

from relaytrace.render import table as T

KERNEL = (
    "fused_reshape4_reshape5_transpose3_multiply5_strided_slice2_strided_slice3_tir_negative1_concatenate2_"
    "multiply5_add3_expand_dims6_broadcast_to_reshape6_transpose4_broadcast_to2_reshape8#0"
)


def cells(text: str, key: int = 1) -> list[list[str]]:
    """The rows of a ``format_table`` text, each cell's lines joined back (a line that
    ended at a break of a long name joined as it was, one that ended at a space with a
    space); a row starts at a line whose cell ``key`` (a column never wrapped) is not empty."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line) <= {"-", " "} and "-" in line)
    spans, at = [], 0
    for dashes in lines[rule].split("  "):
        spans.append((at, at + len(dashes)))
        at += len(dashes) + 2
    rows: list[list[str]] = []
    for line in lines[rule + 1 :]:
        parts = [line[a:b].rstrip() for a, b in spans]
        if parts[key] or not rows:
            rows.append(parts)
            continue
        for i, part in enumerate(parts):
            if part:
                prev = rows[-1][i]
                rows[-1][i] = prev + ("" if not prev or prev[-1] in "_./:" else " ") + part
    return rows


def test_a_table_fits_the_width_and_every_name_is_whole_again():
    rows = [
        ["reshape2", "11", "none (VM builtin or folded)", ""],
        [KERNEL, "2", "same", "m.model.layers.0.self_attn, m.model.layers.1.self_attn"],
        ["matmul4", "5", "same", ", ".join(f"m.model.layers.{i}.mlp.up_proj" for i in range(6))],
    ]
    for width in (100, 80, 60):
        text = T.format_table(["task", "weight", "kernel", "layers"], rows, width=width)
        assert max(map(len, text.splitlines())) <= width, text
        assert cells(text) == rows  # nothing cut, nothing lost
    wide = T.format_table(["task", "weight", "kernel", "layers"], rows, width=400)
    assert KERNEL in wide  # room enough: a name stays on one line


def test_names_break_after_underscores_and_dots_never_inside_a_number():
    lines = T._wrap(KERNEL, 40)
    assert all(len(line) <= 40 for line in lines) and "".join(lines) == KERNEL
    assert all(line.endswith("_") for line in lines[:-1])
    assert T._wrap("m.model.layers.0.self_attn.q_proj", 18) == ["m.model.layers.0.", "self_attn.q_proj"]
    assert T._pieces("0.05364") == ["0.05364"] and T._pieces("1.25e-05") == ["1.25e-05"]
    numbers = T.format_table(["layer", "time (ms)"], [["a" * 200, "0.05364"]], width=60)
    assert "0.05364" in numbers and max(map(len, numbers.splitlines())) <= 60


def test_column_widths_narrow_the_widest_first():
    assert T.column_widths([10, 200, 8], [4, 8, 8], 100) == [10, 82, 8]
    assert T.column_widths([10, 20], [4, 8], 100) == [10, 20]  # fits: untouched
    assert (
        T.column_widths([50, 50, 9], [10, 10, 9], 60) == [25, 26, 9]
        or sum(T.column_widths([50, 50, 9], [10, 10, 9], 60)) == 60
    )
    assert T.column_widths([50, 50], [40, 40], 60) == [40, 40]  # never below the least: wider than asked


@pytest.mark.parametrize("columns, width", [("100", 100), ("250", 250), ("10", T.MIN_WIDTH), ("", None), ("x", None)])
def test_the_width_is_columns_else_the_terminal_else_none(monkeypatch, columns, width):
    monkeypatch.setenv("COLUMNS", columns)
    assert T.terminal_width() == width  # pytest's stdout is no terminal: no COLUMNS, no limit
    if width:
        text = T.format_table(["kernel"], [[KERNEL]])
        assert max(map(len, text.splitlines())) <= max(width, len("kernel"))


def test_headers_wrap_at_spaces_when_squeezed():
    text = T.format_table(["layer", "above bound (ms)", "efficiency"], [["x" * 80, "0.1", "10%"]], width=60)
    assert max(map(len, text.splitlines())) <= 60
    assert text.splitlines()[0].split()[:1] == ["layer"]
