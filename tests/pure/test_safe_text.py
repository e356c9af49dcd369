"""The escaping every non-HTML writer uses for names (render/safe_text.py), on the
hostile names (tests/fixtures/hostile.py); pure, no TVM."""

import csv
import io
import json
import unicodedata
import xml.etree.ElementTree as ET

import pytest

from relaytrace.render import safe_text as S

from ..fixtures.hostile import HOSTILE_NAMES, INPUT_NAME, MODEL_NAME

NAMES = HOSTILE_NAMES + (
    MODEL_NAME,
    INPUT_NAME,
    "\ud800lone surrogate",
    "non\ufffechar",
    "c1\x85\x9bnext",
    "sep\u2028line",
    "del\x7f",
    "\u2067isolate\u2069",
    "'=already quoted",
    "''+twice",
)
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _controls(text: str) -> list[str]:
    return [
        c
        for c in text
        if unicodedata.category(c) in ("Cc", "Cs")
        or c in "\u2028\u2029\ufffe\uffff"
        or unicodedata.bidirectional(c) in ("LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI")
    ]


@pytest.mark.parametrize(
    "name, shown",
    [
        ("red\x1b[31mALERT\x1b[0m", "red\\x1b[31mALERT\\x1b[0m"),
        ("title\x1b]0;pwned\x07", "title\\x1b]0;pwned\\x07"),
        ("bell\x07and\x08back", "bell\\x07and\\x08back"),
        ("nul\x00byte", "nul\\x00byte"),
        ("\tTAB=1", "\\x09TAB=1"),
        ("line\nbreak\r", "line\\x0abreak\\x0d"),
        ("c1\x85\x9bnext", "c1\\x85\\x9bnext"),
        ("del\x7f", "del\\x7f"),
        ("\u202eRTL override", "\\u202eRTL override"),
        ("\u2067isolate\u2069", "\\u2067isolate\\u2069"),
        ("sep\u2028line", "sep\\u2028line"),
        ("\ud800lone surrogate", "\\ud800lone surrogate"),
        ("non\ufffechar", "non\\ufffechar"),
        ("emoji 🔥 ünïcödé", "emoji 🔥 ünïcödé"),  # ordinary Unicode as it is
        ("back\\slash{brace}|pipe", "back\\slash{brace}|pipe"),
        ('k<img src=x onerror="alert(1)">', 'k<img src=x onerror="alert(1)">'),
        ("=cmd|' /C calc'!A0", "=cmd|' /C calc'!A0"),
        ("", ""),
    ],
)
def test_terminal_escapes_control_characters_and_keeps_the_rest(name, shown):
    assert S.terminal(name) == shown


@pytest.mark.parametrize("name", NAMES)
def test_terminal_leaves_no_control_character_is_idempotent_and_encodes(name):
    shown = S.terminal(name)
    assert _controls(shown) == []
    assert S.terminal(shown) == shown  # escaping twice (a cell, then its line) changes nothing more
    shown.encode("utf-8")  # a lone surrogate would make the terminal's encoder raise
    if not _controls(name):
        assert shown == name


def test_terminal_lines_keeps_the_lines_and_escapes_within_them():
    text = "top layers:\nred\x1b[31mALERT\x1b[0m  0.1\r\n\x1b]0;pwned\x07"
    assert S.terminal_lines(text) == "top layers:\nred\\x1b[31mALERT\\x1b[0m  0.1\\x0d\n\\x1b]0;pwned\\x07"


@pytest.mark.parametrize("name", NAMES)
def test_csv_cell_neutralises_formulas_and_reads_back_as_written(name):
    cell = S.csv_cell(name)
    if name.lstrip("'").startswith(FORMULA):
        assert cell == "'" + name
    else:
        assert cell == name
    assert not cell.startswith(FORMULA)
    assert S.csv_value(cell) == name
    if "\ud800" not in name:  # through a real CSV file
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([cell, "x"])
        assert next(csv.reader(io.StringIO(buf.getvalue()))) == [cell, "x"]


@pytest.mark.parametrize("value", [0, 1.5, "1.500", "0.0000", "-1.25", "+3", "1e-05", None])
def test_csv_cell_leaves_numbers_and_non_text_as_they_are(value):
    assert S.csv_cell(value) == value
    if isinstance(value, str):
        assert S.csv_value(value) == value


def test_csv_cell_neutralises_what_only_looks_numeric():
    assert S.csv_cell("-2+3") == "'-2+3"
    assert S.csv_cell("+1+1") == "'+1+1"
    assert S.csv_cell("-1,5") == "'-1,5"


def test_every_csv_relaytrace_writes_is_neutralised():
    from relaytrace.render.export import csv_text

    text = csv_text(["layer", "time_us"], [[name, "1.000"] for name in HOSTILE_NAMES])
    rows = list(csv.reader(io.StringIO(text)))
    assert [S.csv_value(r[0]) for r in rows[1:]] == list(HOSTILE_NAMES)
    assert not any(cell.startswith(FORMULA) for row in rows for cell in row)


@pytest.mark.parametrize("name", NAMES)
def test_dot_text_is_shown_as_the_terminal_text_by_graphviz(name):
    """Through dot itself: the label, a cluster label, an id and a tooltip of an SVG
    that parses, each showing what the terminal shows."""
    import graphviz

    text = S.dot_text(name)
    assert not (text.startswith("<") and text.endswith(">"))  # never taken for an HTML-like label
    g = graphviz.Digraph("g", graph_attr={"label": text})
    g.node("n0", f"{text}\nsecond line", id=S.dot_text(f"origin:{name}"), tooltip=text)
    with g.subgraph(name="cluster_0") as cluster:
        cluster.attr(label=text)
        cluster.node("n1", text)
    root = ET.fromstring(g.pipe(format="svg"))
    shown = S.shortened(S.terminal(name), S.DOT_CHARS)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts.count(shown) == 4 and "second line" in texts  # the graph, the cluster, the two nodes
    assert S.shortened(f"origin:{S.terminal(name)}", S.DOT_CHARS) in [e.get("id") for e in root.iter()]
    assert shown in [e.get("{http://www.w3.org/1999/xlink}title") for e in root.iter()]


def test_json_outputs_hold_every_name_as_it_is():
    """json.dumps escapes control characters (and, by default, all non-ASCII): the
    trace and Model Explorer files stay valid JSON and keep each name exactly."""
    data = {name: {"value": name} for name in NAMES}
    text = json.dumps(data)
    assert not _controls(text)
    assert json.loads(text) == data  # json.loads is strict: a raw control character in a string fails


def test_a_long_name_is_shortened_in_the_middle_and_two_stay_two():
    """dot refuses a quoted string over 16 KB (and draws nothing): a name over
    ``DOT_CHARS`` keeps its start and end around a hash of the whole."""
    a, b = "a" * 20_000 + "end", "a" * 20_001 + "end"
    short_a, short_b = S.shortened(a, 600), S.shortened(b, 600)
    assert len(short_a) == len(short_b) == 600 and short_a != short_b
    assert short_a.startswith("aaa") and short_a.endswith("aend") and "…[" in short_a
    assert S.shortened("short", 600) == "short"
