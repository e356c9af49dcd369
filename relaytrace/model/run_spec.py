"""How an output directory was made: the ``run.json`` beside its lineage and profile.

One record for every command that writes or reads it: ``profile``, ``demo``,
``estimate`` and ``report`` write it (``bundle`` carries it for ``report``), ``tasks
DIR`` and ``advise --verify`` build the model again from it. Read and written through
the codec, each field checked; a run.json of an older relaytrace, without the fields
added since, gets the defaults it was made with. Pure: no TVM.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
from attrs import define, field

from ..errors import FileFormatError
from .codec import decode, encode
from .jsonio import check, read_record
from .names import Name

FILE = "run.json"


class Layout(Name):
    """``--layout``: conv2d as imported, or converted to NHWC/OHWI before the pipeline."""

    NCHW = "NCHW"
    NHWC = "NHWC"


class Precision(Name):
    """``--precision``: as imported, or float16 accumulating in float32 (ToMixedPrecision)."""

    FP32 = "fp32"
    FP16 = "fp16"


class PolicyName(Name):
    """``--policy``: how a fused kernel's time is billed to its layers (the policies
    themselves: ``analysis.attribution.POLICIES``)."""

    ANCHOR = "anchor"
    SPLIT = "split"
    MEASURED = "measured"


def _shapes(value) -> tuple[str, ...]:
    """``--input-shape``'s values as a tuple; one string alone is refused (a tuple of
    its characters is no list of shapes)."""
    if isinstance(value, str):
        raise TypeError("input_shapes is a list of NAME:DIMS strings, not one string")
    return tuple(value)


@define(frozen=True)
class RunSpec:
    """The model (``path/file.py:factory``, an .onnx file, ``demo:NAME``) and the
    options it was built and profiled with, as the CLI names them: ``input_shapes``
    (``--input-shape`` as given), ``dtype``, the tuning database ``db``, ``target``,
    ``pipeline``, ``layout``, ``entry``, the peaks' ``device`` or ``peak_gflops`` and
    ``peak_gbps``, ``precision``, the attribution ``policy``, ``fold_batch_norm``,
    ``lift_params``, a
    served step's ``tokens`` and ``context``; ``estimate``: the device an estimate's
    figures are of (None for a measurement)."""

    model: str
    input_shapes: tuple[str, ...] = field(default=(), converter=_shapes)
    dtype: str | None = None
    db: str | None = None
    target: str = "llvm"
    pipeline: str = "fused"
    layout: Layout = field(default=Layout.NCHW, converter=Layout)
    entry: str | None = None
    device: str | None = None
    peak_gflops: float | None = None
    peak_gbps: float | None = None
    precision: Precision = field(default=Precision.FP32, converter=Precision)
    policy: PolicyName = field(default=PolicyName.ANCHOR, converter=PolicyName)
    fold_batch_norm: bool = False
    lift_params: bool = False
    tokens: int | None = None
    context: int | None = None
    estimate: str | None = None

    @classmethod
    def from_args(cls, args, model: str) -> RunSpec:
        """The record of a command's parsed options (``args``) for ``model``; an option
        the command does not take keeps its default."""
        given = {
            f.name: getattr(args, f.name.replace("input_shapes", "input_shape"), None)
            for f in attrs.fields(cls)
            if f.name != "model"
        }
        return cls(model, **{k: v for k, v in given.items() if v is not None})

    def with_change(self, option: str, value) -> RunSpec:
        """This run with one option changed (``advise --verify``'s rebuilds)."""
        return attrs.evolve(self, **{option: value})

    def to_json(self) -> dict:
        return encode(self)

    def save(self, directory: Path) -> None:
        """Written as ``directory/run.json`` (into a staging directory: see ``jobs``)."""
        (Path(directory) / FILE).write_text(json.dumps(self.to_json(), indent=1), encoding="utf-8")

    @classmethod
    def from_json(cls, data, where: str) -> RunSpec:
        check(data, dict, where)
        if "model" not in data:
            raise FileFormatError(
                f"{where} has no field 'model': pass the model itself (an .onnx file or file.py:factory)"
            )
        return decode(cls, data, where)

    @classmethod
    def load(cls, directory) -> RunSpec:
        """The run.json of an output ``directory``; a missing one says to pass the model."""
        path = Path(directory) / FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: pass the model itself (an .onnx file or file.py:factory)")
        return read_record(path, "run", cls.from_json)
