"""Names as text in every output but the HTML report (which escapes its own).

Layer, kernel, model and input names come from files users download (ONNX node
names, torch module attributes, a user's PrimFuncs) and may hold anything: terminal
control sequences, characters XML forbids, spreadsheet formulas, DOT escapes. Every
writer puts a name through one of these pure functions:

- ``terminal`` / ``terminal_lines``: the tables, the CLI's summaries, query and diff
  output, progress lines and error messages;
- ``csv_cell`` (and ``csv_value`` to read one back): every CSV relaytrace writes
  (``render/export.py``) and reads (``diff --reference``);
- ``dot_text``: every graphviz label, id and tooltip (``render/graphviz.py``,
  ``render/diff_graph.py``), so dot's SVG is well-formed XML showing the name as the
  terminal does, a name longer than ``DOT_CHARS`` shortened in the middle (dot refuses
  a quoted string over 16 KB and draws nothing at all).

JSON outputs (the Chrome trace, Model Explorer node data, the lineage) need nothing:
``json.dumps`` escapes every control character, and ``json.loads`` refuses a raw one.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

DOT_CHARS = 600  # the most characters of one name a graph shows

# bidirectional formatting (they reorder the text shown after them: "Trojan source"),
# line and paragraph separators (line breaks to some terminals and editors), the two
# noncharacters XML 1.0 forbids
_INVISIBLE = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029\ufffe\uffff"
)
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV injection list: a cell starting so is a formula
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _is_control(char: str) -> bool:
    return char in _INVISIBLE or unicodedata.category(char) in ("Cc", "Cs")


def terminal(text: str) -> str:
    """``text`` as one line of plain text: every control character (C0 including tab,
    newline and carriage return, DEL, C1, a lone surrogate) and every bidirectional
    formatting character, line or paragraph separator and XML-forbidden noncharacter
    written as its escape (``\\x1b``, ``\\u202e``); everything else (any letter,
    emoji, a backslash) as it is. The result holds none of those characters, encodes
    to UTF-8, and is unchanged by a second call (a cell escaped, then its line)."""
    return "".join(_escaped(c) if _is_control(c) else c for c in text)


def terminal_lines(text: str) -> str:
    """``terminal`` on each line of a text whose line breaks relaytrace wrote (a table,
    a summary): the ``\\n`` between lines kept, every other control character escaped."""
    return "\n".join(terminal(line) for line in text.split("\n"))


def csv_cell(value):
    """A CSV cell that a spreadsheet shows as the text it is: a string starting with
    ``= + - @``, a tab or a carriage return (after any leading ``'``, so that
    ``csv_value`` reads every cell back exactly) gets a ``'`` in front, as OWASP
    advises; a string that is a plain decimal number (``-1.25``, ``1e-05``) and any
    non-string are returned as they are. Other characters are left to the CSV writer
    (quotes and line breaks are quoted)."""
    if not isinstance(value, str) or _NUMBER.fullmatch(value):
        return value
    return "'" + value if value.lstrip("'").startswith(_FORMULA) else value


def csv_value(cell: str) -> str:
    """The text a ``csv_cell`` was made from: one leading ``'`` dropped where
    ``csv_cell`` put it (a cell that, without its leading quotes, starts as a formula
    would); any other cell as it is."""
    if cell.startswith("'") and not _NUMBER.fullmatch(cell) and cell.lstrip("'").startswith(_FORMULA):
        return cell[1:]
    return cell


def dot_text(text: str) -> str:
    """``text`` for a graphviz attribute that is an escString (a label, an xlabel, an
    ``id``, a tooltip) of a plain-text label: dot shows it, in every format, as
    ``terminal(text)`` shows it. Control characters are escaped as ``terminal``
    escapes them (none reaches the SVG: XML 1.0 forbids most), backslashes are doubled
    (``\\N``, ``\\l`` are no escapes), and ``& " < >`` are written as entities (an
    ``&amp;`` in a name stays as written; no quote reaches the DOT source for the
    python graphviz package to mis-escape; a label is never taken for an HTML-like
    ``<...>`` one). A line over ``DOT_CHARS`` keeps its start and end around a short
    hash of the whole (``shortened``: two long names stay two ids). Not for
    record-shaped nodes (relaytrace draws none), whose labels would need ``{ } |``
    escaped too, nor for graph or node IDs, which are no escStrings (relaytrace's are
    its own: ``n0``, ``cluster_3``)."""
    return (
        shortened(terminal(text), DOT_CHARS)
        .replace("\\", "\\\\")
        .replace("&", "&amp;")
        .replace('"', "&quot;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


def shortened(text: str, limit: int) -> str:
    """``text`` itself when it has at most ``limit`` characters, else its start and end
    around ``…[hash]…`` (a hash of the whole ``text``), ``limit`` characters in all, so
    that different long names stay different."""
    if len(text) <= limit:
        return text
    mark = f"…[{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}]…"
    head = (limit - len(mark)) * 2 // 3
    return text[:head] + mark + text[len(text) - (limit - len(mark) - head) :]
