"""A per-call profiler on the Relax VM (TVM removed its own in v0.24).

timeline: every call of one ``main`` run, in order, timed by ``set_instrument``.
isolated: every kernel call site timed alone with ``time_evaluator`` on the
arguments it saw in a real run, like the old debug executor's per-op figures.
Both also time ``main`` end to end, so the Profile can say what the per-call sum
leaves out (the VM's own dispatch, Python in the instrument).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import tvm
from attrs import define, field
from tvm import relax

from .errors import RelaytraceError
from .errors import LineageFormatError
from .lineage import Lineage, tuples, check_schema, read_json, write_json

SCHEMA = "relaytrace.profile/1"
KERNEL, BUILTIN = "kernel", "builtin"


@define(frozen=True)
class CallRecord:
    """One call: the ``call``-th call of ``name`` in run ``run``."""

    name: str
    call: int
    run: int
    start_us: float
    duration_us: float
    kind: str


@define(frozen=True)
class ArgInfo:
    shapes: tuple[tuple, ...]
    dtypes: tuple[str, ...]


@define(frozen=True)
class Profile:
    model: str
    target: str
    device: str
    mode: str
    repeat: int
    records: tuple[CallRecord, ...]
    args: dict[str, ArgInfo] = field(factory=dict)  # "name#call" -> argument shapes
    e2e_us: tuple[float, ...] = ()
    schema: str = SCHEMA

    @property
    def runs(self) -> int:
        return max((r.run for r in self.records), default=-1) + 1

    def mean_by_site(self, kind: str | None = None) -> dict[tuple[str, int], float]:
        """Mean duration per run of each call site (name, call)."""
        sums: dict[tuple[str, int], float] = {}
        for r in self.records:
            if kind is None or r.kind == kind:
                sums[(r.name, r.call)] = sums.get((r.name, r.call), 0.0) + r.duration_us
        runs = max(self.runs, 1)
        return {k: v / runs for k, v in sums.items()}

    @property
    def kernel_us(self) -> float:
        return sum(self.mean_by_site(KERNEL).values())

    @property
    def builtin_us(self) -> float:
        return sum(self.mean_by_site(BUILTIN).values())

    @property
    def e2e_median_us(self) -> float:
        return statistics.median(self.e2e_us) if self.e2e_us else 0.0

    @property
    def gap_us(self) -> float:
        """End-to-end time not inside any recorded call: VM dispatch and instrument cost."""
        return self.e2e_median_us - self.kernel_us - self.builtin_us

    def summary(self) -> str:
        return (
            f"kernels {self.kernel_us / 1e3:.3f} ms + VM builtins {self.builtin_us / 1e3:.3f} ms + "
            f"unexplained gap {self.gap_us / 1e3:.3f} ms = end-to-end median {self.e2e_median_us / 1e3:.3f} ms "
            f"({self.mode}, {self.runs} run(s))"
        )

    def to_json(self) -> dict:
        return {
            "schema": self.schema, "model": self.model, "target": self.target, "device": self.device,
            "mode": self.mode, "repeat": self.repeat,
            "records": [[r.name, r.call, r.run, r.start_us, r.duration_us, r.kind] for r in self.records],
            "args": {k: {"shapes": v.shapes, "dtypes": v.dtypes} for k, v in self.args.items()},
            "e2e_us": self.e2e_us,
        }

    @classmethod
    def from_json(cls, data) -> "Profile":
        check_schema(data, SCHEMA, "profile")
        try:
            return cls(
                model=data["model"], target=data["target"], device=data["device"], mode=data["mode"],
                repeat=data["repeat"],
                records=tuple(CallRecord(*r) for r in data["records"]),
                args={k: ArgInfo(tuples(v["shapes"]), tuple(v["dtypes"])) for k, v in data["args"].items()},
                e2e_us=tuple(data["e2e_us"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LineageFormatError(f"profile file is missing or has a malformed field: {exc}") from exc

    def save(self, path, overwrite: bool = False):
        return write_json(path, self.to_json(), overwrite)

    @classmethod
    def load(cls, path) -> "Profile":
        return cls.from_json(read_json(path, "profile"))


def profile(executable, lineage: Lineage, inputs, device=None, warmup: int = 1, repeat: int = 5,
            mode: str = "timeline", number: int = 3, progress=None) -> Profile:
    """Run ``main`` and time every call; see the module docstring for the modes."""
    if mode not in ("timeline", "isolated"):
        raise RelaytraceError(f"unknown profiling mode {mode!r}: use 'timeline' or 'isolated'")
    if repeat < 1:
        raise RelaytraceError("repeat must be at least 1")
    device = device or tvm.cpu()
    args = check_inputs(lineage, inputs, device)
    library = _kernel_library(executable, lineage)
    vm = relax.VirtualMachine(executable, device)
    say = progress or (lambda message: None)

    say("capturing argument shapes")
    arg_info, captured = _capture(vm, args, lineage, copy=(mode == "isolated"))
    _check_names(lineage, arg_info)
    for _ in range(max(warmup - 1, 0)):
        vm["main"](*args)
    if mode == "timeline":
        records = []
        for run in range(repeat):
            say(f"timeline run {run + 1}/{repeat}")
            records.extend(_timeline_run(vm, args, run, lineage, device))
    else:
        records = _isolated(library, captured, device, repeat, number, say)
    vm.set_instrument(_no_op)
    say("end-to-end timing")
    e2e = vm.time_evaluator("main", device, number=1, repeat=max(repeat, 3))(*args)
    return Profile(
        model=lineage.model, target=lineage.target, device=str(device), mode=mode, repeat=repeat,
        records=tuple(records), args=arg_info, e2e_us=tuple(t * 1e6 for t in e2e.results),
    )


def check_inputs(lineage: Lineage, inputs, device) -> list:
    """Inputs as device tensors, after checking count, shape and dtype against the model."""
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    expected = lineage.inputs
    if expected and len(inputs) != len(expected):
        names = ", ".join(f"{n}{list(s)}:{d}" for n, s, d in expected)
        raise RelaytraceError(f"{lineage.model} takes {len(expected)} input(s) ({names}), got {len(inputs)}")
    out = []
    for i, value in enumerate(inputs):
        array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        if expected:
            name, shape, dtype = expected[i]
            if tuple(array.shape) != tuple(shape) or str(array.dtype) != dtype:
                raise RelaytraceError(
                    f"input {i} ({name}) of {lineage.model} must be {dtype}{list(shape)}, "
                    f"got {array.dtype}{list(array.shape)}"
                )
        out.append(tvm.runtime.tensor(array, device))
    return out


def _kernel_library(executable, lineage: Lineage):
    """The compiled module holding the kernels; every kernel of the lineage must be there."""
    libs = list(executable.mod.imports)
    missing = [k for k in lineage.kernels if not any(lib.implements_function(k, True) for lib in libs)]
    if missing:
        raise RelaytraceError(
            f"the lineage does not belong to this executable: {len(missing)} of its kernels are not "
            f"compiled in it ({', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}); "
            "profile with the lineage returned by the same build"
        )
    first = next(iter(lineage.kernels), None)
    return next((lib for lib in libs if first and lib.implements_function(first, True)), None)


def _no_op(*_):
    return relax.VMInstrumentReturnKind.NO_OP


def _capture(vm, args, lineage, copy: bool):
    """One run that notes every call's argument shapes (and copies kernel arguments
    for isolated timing)."""
    counts: dict[str, int] = {}
    info: dict[str, ArgInfo] = {}
    captured: list[tuple[str, int, list]] = []
    kernels = lineage.kernels

    def note(func, name, before, ret, *call_args):
        if before:
            k = counts.get(name, 0)
            counts[name] = k + 1
            tensors = [a for a in call_args if hasattr(a, "shape")]
            info[f"{name}#{k}"] = ArgInfo(tuple(tuple(int(d) for d in a.shape) for a in tensors),
                                          tuple(str(a.dtype) for a in tensors))
            if copy and name in kernels:
                captured.append((name, k, [tvm.runtime.tensor(a.numpy(), a.device) for a in tensors]))
        return relax.VMInstrumentReturnKind.NO_OP

    vm.set_instrument(note)
    vm["main"](*args)
    vm.set_instrument(_no_op)
    return info, captured


def _check_names(lineage: Lineage, info: dict[str, ArgInfo]) -> None:
    ran: dict[str, int] = {}
    for label in info:
        name, _, k = label.rpartition("#")
        if not name.startswith("vm.builtin."):
            ran[name] = max(ran.get(name, 0), int(k) + 1)
    problems = lineage.call_count_mismatches(ran)
    if problems:
        raise RelaytraceError("the lineage does not match this executable: " + "; ".join(problems[:8]))


def _timeline_run(vm, args, run: int, lineage, device) -> list[CallRecord]:
    stamps: list = []
    append = stamps.append
    clock = time.perf_counter_ns
    no_op = relax.VMInstrumentReturnKind.NO_OP

    def stamp(func, name, before, ret, *call_args):
        append((clock(), name, before))  # the hot path: a record, nothing else
        return no_op

    vm.set_instrument(stamp)
    t0 = time.perf_counter_ns()
    vm["main"](*args)
    device.sync()
    vm.set_instrument(_no_op)
    return _pair(stamps, run, t0, lineage.kernels)


def _pair(stamps, run, t0, kernels) -> list[CallRecord]:
    counts: dict[str, int] = {}
    open_calls: dict[str, int] = {}
    records = []
    for t, name, before in stamps:
        if before:
            open_calls[name] = t
            continue
        start = open_calls.pop(name)
        k = counts.get(name, 0)
        counts[name] = k + 1
        records.append(CallRecord(name, k, run, (start - t0) / 1e3, (t - start) / 1e3,
                                  KERNEL if name in kernels else BUILTIN))
    return records


def _isolated(library, captured, device, repeat, number, say) -> list[CallRecord]:
    records = []
    clock = [0.0] * repeat
    for i, (name, k, tensors) in enumerate(captured):
        say(f"isolated {i + 1}/{len(captured)}: {name}#{k}")
        result = library.time_evaluator(name, device, number=number, repeat=repeat)(*tensors)
        for run, seconds in enumerate(result.results):
            records.append(CallRecord(name, k, run, clock[run], seconds * 1e6, KERNEL))
            clock[run] += seconds * 1e6
    return records
