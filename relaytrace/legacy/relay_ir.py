"""Printed Relay IR -> ops with shapes and attributes.

Reads the text ``print(mod["main"])`` gave: ``%3 = nn.conv2d(%2, meta[relay.Constant][2]
/* ty=Tensor[(64, 64, 3, 3), float32] */, padding=[1, 1, 1, 1]) /* ty=Tensor[(1, 64, 224, 224), float32] */;``
"""

from __future__ import annotations

import re

from attrs import define, field

from .common import Issue, Shape, shape

_INPUT = re.compile(r"%(\w+)\s*:\s*Tensor\[\(([^)]*)\),\s*(\w+)\]")
_CALL_HEAD = re.compile(r"^\s*(?:%(\d+)\s*=\s*)?([A-Za-z_][\w.]*)\(")
_TYPE_COMMENT = re.compile(r"\)\s*/\*\s*ty=")
_BINDING_START = re.compile(r"^[a-z_]+\.[a-z_][\w.]*\(")
_PROJECTION = re.compile(r"^\s*%(\d+)\s*=\s*%(\d+)\.(\d+)\s*;?\s*$")
_TENSOR = re.compile(r"Tensor\[\(([^)]*)\),\s*(\w+)\]")
_CONST = re.compile(r"meta\[relay\.Constant\]\[\d+\]\s*/\*\s*ty=Tensor\[\(([^)]*)\),\s*\w+\]\s*\*/(?:\s*/\*[^*]*\*/)*")
_REF = re.compile(r"%(\w+)")
_ATTR = re.compile(r"(\w+)=(\[[^\]]*\]|\"[^\"]*\"|[^,]+)")


@define(frozen=True)
class RelayOp:
    """One binding of printed Relay IR: its op, the vars it references, the shapes of its
    constant arguments, its attributes, its output shape and dtype, and its line."""

    index: int  # position among ops, in program order
    var: str  # "%3" ("" for the returned expression)
    op: str  # "nn.conv2d"
    inputs: tuple[str, ...]  # referenced vars ("%2", "%data")
    weights: tuple[Shape, ...]  # constant argument shapes
    attrs: dict = field(factory=dict, eq=False)
    out_shape: Shape = ()
    dtype: str = ""
    line: int = 0

    @property
    def short(self) -> str:
        """The op's name without its namespace (``conv2d`` of ``nn.conv2d``)."""
        return self.op.rsplit(".", 1)[-1]

    @property
    def layer(self) -> str:
        """The op as output names its layer: its var (``%out`` for the returned
        expression) and op, ``%3 nn.conv2d``."""
        return f"{self.var or '%out'} {self.op}"


@define(frozen=True)
class RelayGraph:
    """``main`` of printed Relay IR: its inputs (var -> (shape, dtype)), its ops in
    program order, and the issues met reading it."""

    inputs: dict[str, tuple[Shape, str]]
    ops: tuple[RelayOp, ...]
    issues: tuple[Issue, ...] = ()

    def consumers(self) -> dict[str, list[RelayOp]]:
        """Each referenced var to the ops that take it as an input, in program order."""
        out: dict[str, list[RelayOp]] = {}
        for op in self.ops:
            for ref in op.inputs:
                out.setdefault(ref, []).append(op)
        return out

    def shape_of(self, ref: str) -> Shape | None:
        """The shape of an input or an op's var (``%data``, ``%3``); None for a var the
        graph does not bind."""
        if ref in self.inputs:
            return self.inputs[ref][0]
        for op in self.ops:
            if op.var == ref:
                return op.out_shape
        return None


def _binding(line: str) -> tuple[str | None, str, str, str, str] | None:
    """(var digits or None, op, argument text, type text, text after) of ``%3 = op(...)
    /* ty=... */;``, or None. The call ends at the last ``) /* ty=`` of the line (its
    arguments hold type comments of their own); found in linear time: one regex with
    a greedy body and a lazy type backtracks quadratically on a long line."""
    head = _CALL_HEAD.match(line)
    if not head:
        return None
    last = None
    for found in _TYPE_COMMENT.finditer(line, head.end() - 1):
        last = found
    if last is None:
        return None
    close = line.find("*/", last.end())
    if close < 0:
        return None
    trailing = line[close + 2 :].lstrip()
    trailing = trailing[1:] if trailing.startswith(";") else trailing
    return head.group(1), head.group(2), line[head.end() : last.start()], line[last.end() : close].strip(), trailing


def parse_relay_ir(text: str, source: str = "relay-ir") -> RelayGraph:
    """The graph of ``main`` in printed Relay IR (the first ``fn`` up to its closing
    brace, or the whole text when it has no ``fn``), tuple projections read as their
    tuple's var; issues for lines that look like bindings and do not parse, text after
    a binding, and no binding at all."""
    inputs: dict[str, tuple[Shape, str]] = {}
    ops: list[RelayOp] = []
    issues: list[Issue] = []
    aliases: dict[str, str] = {}
    lines = text.splitlines()
    has_fn = any(line.lstrip().startswith("fn ") for line in lines)
    inside = not has_fn
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("fn ") and not ops:
            inside = True
            for name, dims, dtype in _INPUT.findall(stripped):
                inputs[f"%{name}"] = (shape(dims), dtype)
            continue
        if not inside or not stripped or stripped == "{":
            continue
        if stripped == "}":
            break  # the end of main; anything after is not this function
        projection = _PROJECTION.match(stripped)
        if projection:
            aliases[f"%{projection.group(1)}"] = f"%{projection.group(2)}"
            continue
        match = _binding(stripped)
        if not match:
            if stripped.startswith("%") or _BINDING_START.match(stripped):
                issues.append(Issue(source, number, f"not a Relay binding: {stripped[:80]!r}"))
            continue
        var, op, body, ty, trailing = match
        if trailing.strip():
            issues.append(Issue(source, number, f"text after the binding ignored: {trailing.strip()[:60]!r}"))
        tensors = _TENSOR.findall(ty)
        weights = tuple(shape(dims) for dims in _CONST.findall(body))
        plain = _CONST.sub("", body)
        refs = tuple(
            aliases.get(f"%{r}", f"%{r}") for r in _REF.findall(plain.split("=", 1)[0] if "=" in plain else plain)
        )
        attrs = {k: v.strip() for k, v in _ATTR.findall(plain)}
        ops.append(
            RelayOp(
                index=len(ops),
                var=f"%{var}" if var else "",
                op=op,
                inputs=refs,
                weights=weights,
                attrs=attrs,
                out_shape=shape(tensors[0][0]) if tensors else (),
                dtype=tensors[0][1] if tensors else "",
                line=number,
            )
        )
    if not ops:
        issues.append(Issue(source, 0, "no Relay bindings found"))
    return RelayGraph(inputs, tuple(ops), tuple(issues))
