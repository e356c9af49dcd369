"""``provenance.json`` as records: the contract a profiler, a viewer or a test holds a
build's code to (docs/api.md, "provenance.json"; docs/schemas/provenance.schema.json).

For each kernel: its blocks (name, lines in its TIR, the member PrimFunc it is, the
buffers it reads and writes, the verdict), the blocks of its scheduled TIR when a
schedule changed it (each with the indices of the fused blocks it was made from) and,
for each call site, the Relax function and line that call it and the origin each
block computes there. Made by ``render.provenance.provenance`` from a lineage that
carries its code; saved through the codec, read back checked (``from_json``).
"""

from __future__ import annotations

from attrs import field, frozen

from ..errors import FileFormatError
from .codec import decode, encode
from .origin import Kind
from .verification import Status

SCHEMA = "relaytrace.provenance/1"


@frozen
class BlockProvenance:
    """One block of a kernel's fused TIR: its ``lines`` (first and last, 1-based), the
    ``member`` PrimFunc it is (``""``: none), its buffers, its verdict and why."""

    name: str
    lines: tuple[int, int]
    member: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    status: Status
    reasons: tuple[str, ...]


@frozen
class BuiltBlockProvenance:
    """One block of a kernel's scheduled TIR: its ``lines``, the indices of the fused
    blocks it was made from (``sources``), its verdict and why."""

    name: str
    lines: tuple[int, int]
    sources: tuple[int, ...]
    status: Status
    reasons: tuple[str, ...]


@frozen
class Owner:
    """The origin a block computes at a call site: its id, op, layer, kind and source line."""

    origin: str
    op: str
    layer: str
    kind: Kind
    source: str


@frozen
class SiteProvenance:
    """One call site of a kernel: its label, the Relax function and line that call it
    (``ambiguous``: that line holds more than one such call), and block index (as a
    string, JSON's object key) -> the origin it computes there."""

    label: str
    function: str
    relax_line: int
    ambiguous: bool
    blocks: dict[str, Owner]


@frozen
class KernelProvenance:
    """One kernel: its fused blocks, whether a schedule changed it (``scheduled``; then
    its ``built_blocks``), and its call sites in run order."""

    blocks: tuple[BlockProvenance, ...]
    scheduled: bool
    built_blocks: tuple[BuiltBlockProvenance, ...]
    sites: tuple[SiteProvenance, ...]


@frozen
class Provenance:
    """The sidecar of one build: the ``model``'s kernels, and why some or all of its
    code is missing (``problems``)."""

    model: str
    kernels: dict[str, KernelProvenance] = field(factory=dict)
    problems: tuple[str, ...] = ()
    schema: str = SCHEMA

    def to_json(self) -> dict:
        """The sidecar as plain JSON data, as ``provenance.json`` holds it."""
        return {"schema": self.schema, **encode(self)}

    @classmethod
    def from_json(cls, data, where: str = "provenance.json") -> Provenance:
        """The sidecar a JSON object holds, every field checked: a ``FileFormatError``
        naming the field otherwise, and one naming the schema for another's."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            found = data.get("schema") if isinstance(data, dict) else None
            raise FileFormatError(f"{where} is not a provenance sidecar of schema {SCHEMA} (schema {found!r})")
        return decode(cls, data, where)
