"""Origins: one stable record per op of the input model.

An id depends only on the model (layer name, op, order within the layer), never on
the target, pipeline or layout, so two builds of one model compare id by id.
"""

from __future__ import annotations

from attrs import define

from .names import Name
from .ops import short_op


class Kind(Name):
    """What an origin is: an op of the input model, an op a pass inserted (a layout
    transform, a cast), or an op no rule explained."""

    OP = "op"
    INSERTED = "inserted"
    UNRESOLVED = "unresolved"


OP, INSERTED, UNRESOLVED = Kind.OP, Kind.INSERTED, Kind.UNRESOLVED

Shape = tuple


ONNX_SOURCE = "onnx node "  # Origin.source of an ONNX op, in words: this, then its node's name


@define(frozen=True, slots=False)
class Origin:
    """One op of the input model. Not slotted: attrs fills a frozen instance's
    ``__dict__`` directly but a slotted one through a setter call per field, and a
    build makes one Origin per op; this halves that."""

    id: str
    layer: str
    op: str
    function: str
    index: int
    input_shapes: tuple[Shape, ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_shapes: tuple[Shape, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    kind: Kind = OP
    pass_name: str = ""
    serves: tuple[str, ...] = ()
    source_op: str = ""  # the frontend's op (aten op, ONNX op_type), when imported
    source: str = ""  # where it came from: "file.py:LINE" of the torch forward, "onnx node NAME"
    node: str = ""  # its node in the frontend's graph (``Program.frontend``), by Model Explorer's node id

    @property
    def short_op(self) -> str:
        """The op without its namespace (``conv2d`` for ``relax.nn.conv2d``)."""
        return short_op(self.op)
