"""A device's peak rates, the ceilings of the roofline: measured, given, or a named device's.

Pure data: ``profiling/peaks.py`` measures them with small TVM-built kernels on the
device a profile runs on; a user gives them from a spec sheet; ``DEVICES`` names
common GPUs and CPUs with the source of each figure, for estimates of builds that
cannot run here.
"""

from __future__ import annotations

from attrs import define, field

from ..errors import RelaytraceError
from .names import Name


class Source(Name):
    """Where a device's peaks came from: ``measured`` on it, ``given`` by the user, or a
    ``named device`` of ``DEVICES`` (a spec sheet)."""

    MEASURED = "measured"
    GIVEN = "given"
    NAMED = "named device"


class Bound(Name):
    """What sets a figure of work's least time: the arithmetic or the memory traffic."""

    COMPUTE = "compute"
    MEMORY = "memory"


MEASURED, GIVEN, NAMED = Source.MEASURED, Source.GIVEN, Source.NAMED
COMPUTE_BOUND, MEMORY_BOUND = Bound.COMPUTE, Bound.MEMORY


NATIVE_GAIN = 2.0  # a native build's ceiling over generic code's worth saying


@define(frozen=True)
class Peaks:
    """``gflops``: dtype -> peak GFLOP/s (``float32`` always); ``gbps``: peak memory
    bandwidth in GB/s (10^9 bytes); ``source``: ``MEASURED`` here, ``GIVEN`` by the
    user, or ``NAMED`` (a device of ``DEVICES``); ``method``: how, in words a reader can
    check (the kernels and their sizes, or the spec sheet); ``device``: what they are
    the peaks of; ``native_gflops``: float32 GFLOP/s of the same kernel built for this
    CPU's own instruction set (``native_mcpu``), when the target names no ``mcpu``
    (what the target leaves unused), else None."""

    gflops: dict[str, float]
    gbps: float
    source: Source = field(converter=Source)
    method: str
    device: str = ""
    native_gflops: float | None = None
    native_mcpu: str = ""  # the CPU name that figure was built for (LLVM's, e.g. znver4)

    def for_dtype(self, dtype: str) -> float:
        """The GFLOP/s ceiling for arithmetic in ``dtype``: its own peak if measured or
        given, float32's otherwise."""
        return self.gflops.get(dtype, self.gflops["float32"])

    def bound(self, flops: float, moved: float, dtype: str = "float32") -> tuple[float, Bound]:
        """(the least microseconds ``flops`` in ``dtype`` and ``moved`` bytes take under
        these ceilings, ``max(flops / peak, bytes / bandwidth)``; what sets it:
        ``COMPUTE_BOUND`` or ``MEMORY_BOUND``)."""
        compute = flops / (self.for_dtype(dtype) * 1e3)  # GFLOP/s is 1e3 FLOPs per microsecond
        memory = moved / (self.gbps * 1e3)
        return max(compute, memory), COMPUTE_BOUND if compute >= memory else MEMORY_BOUND

    @property
    def native_gain(self) -> float | None:
        """How many times the float32 ceiling of generic code a build for this CPU's own
        instructions reaches, when over ``NATIVE_GAIN`` (what the summary's GENERIC CODE
        line and the advice to name an ``mcpu`` rest on), else None."""
        if not self.native_gflops:
            return None
        gain = self.native_gflops / self.gflops["float32"]
        return gain if gain > NATIVE_GAIN else None

    def line(self) -> str:
        """One line for the terminal: the figures and how they were found."""
        rates = ", ".join(
            f"{dtype} {g:,.1f} GFLOP/s" if g >= 1 else f"{dtype} {g:.2g} GFLOP/s" for dtype, g in self.gflops.items()
        )
        native = (
            f"; built for this CPU's own instructions ({self.native_mcpu or 'its mcpu'}) float32 reaches "
            f"{self.native_gflops:,.1f} GFLOP/s"
            if self.native_gflops
            else ""
        )
        return f"peaks ({self.source}, {self.device}): {rates}, {self.gbps:,.1f} GB/s ({self.method}){native}"


RATES = (1e-3, 1e9)  # GFLOP/s or GB/s a device's peak can be: a megaflop to an exaflop


def problem(peaks: Peaks) -> str:
    """What is wrong with ``peaks`` read from a file ("" when nothing): every rate
    within ``RATES`` (from a microcontroller's to beyond any accelerator's), a float32
    figure among them."""
    rates = [peaks.gbps, *peaks.gflops.values()]
    if "float32" not in peaks.gflops:
        return "peaks.gflops has no float32 figure"
    low, high = RATES
    if not all(isinstance(r, (int, float)) and low <= r <= high for r in rates):
        return f"every peak rate must be from {low:g} to {high:g} GFLOP/s or GB/s"
    return ""


def given(gflops: float, gbps: float, device: str = "") -> Peaks:
    """Peaks a user gives (a spec sheet): both within ``RATES``, else a one-line error."""
    low, high = RATES
    if not (low <= gflops <= high and low <= gbps <= high):
        raise RelaytraceError(
            f"peaks must be from {low:g} to {high:g} (got {gflops} GFLOP/s, {gbps} GB/s): give the device's figures"
        )
    return Peaks({"float32": float(gflops)}, float(gbps), GIVEN, "given by the user", device or "the device")


@define(frozen=True)
class Device:
    """A named device's peaks and where they come from (``source``: the vendor's sheet)."""

    name: str
    gflops: dict[str, float]
    gbps: float
    source: str = field(default="")

    def peaks(self) -> Peaks:
        """These figures as ``Peaks`` of source ``NAMED``."""
        return Peaks(dict(self.gflops), self.gbps, NAMED, self.source, self.name)


# Dense (not sparse) peak rates from the vendors' data sheets; float16 on tensor cores.
DEVICES = {
    d.name: d
    for d in (
        Device(
            "nvidia-a100-sxm4-80gb",
            {"float32": 19_500.0, "float16": 312_000.0},
            2_039.0,
            "NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5 TFLOPS, FP16 tensor 312 TFLOPS, HBM2e 2,039 GB/s",
        ),
        Device(
            "nvidia-h100-sxm5",
            {"float32": 67_000.0, "float16": 989_000.0},
            3_350.0,
            "NVIDIA H100 Tensor Core GPU datasheet (2023): FP32 67 TFLOPS, FP16 tensor 989 TFLOPS, HBM3 3.35 TB/s",
        ),
        Device(
            "nvidia-l4",
            {"float32": 30_300.0, "float16": 121_000.0},
            300.0,
            "NVIDIA L4 datasheet (2023): FP32 30.3 TFLOPS, FP16 tensor 121 TFLOPS, GDDR6 300 GB/s",
        ),
        Device(
            "nvidia-t4",
            {"float32": 8_100.0, "float16": 65_000.0},
            320.0,
            "NVIDIA T4 datasheet (2019): FP32 8.1 TFLOPS, FP16 tensor 65 TFLOPS, GDDR6 320 GB/s",
        ),
        Device(
            "nvidia-rtx-4090",
            {"float32": 82_600.0, "float16": 165_200.0},
            1_008.0,
            "NVIDIA Ada Lovelace architecture whitepaper (2023), RTX 4090: FP32 82.6 TFLOPS, "
            "FP16 tensor 165.2 TFLOPS (FP32 accumulate), GDDR6X 1,008 GB/s",
        ),
        Device(
            "nvidia-jetson-orin-agx-64gb",
            {"float32": 5_300.0},
            204.8,
            "NVIDIA Jetson AGX Orin series datasheet (2023): GPU FP32 5.3 TFLOPS, LPDDR5 204.8 GB/s",
        ),
        Device(
            "apple-m2",
            {"float32": 3_600.0},
            100.0,
            "Apple M2 announcement (June 2022): GPU 3.6 TFLOPS, 100 GB/s unified memory",
        ),
    )
}


def named(name: str) -> Peaks:
    """The peaks of a device of ``DEVICES``; an unknown name is a one-line error listing them."""
    device = DEVICES.get(name)
    if device is None:
        raise RelaytraceError(
            f"unknown device {name!r}: use one of {', '.join(DEVICES)}, or give its peaks "
            "with --peak-gflops and --peak-gbps"
        )
    return device.peaks()
