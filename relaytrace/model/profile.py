"""Profile: every timed call of a run, as plain data (made by ``profiler.profile``)."""

from __future__ import annotations

import statistics

from attrs import define, field

from ..errors import LineageFormatError
from .jsonio import check_schema, read_json, tuples, write_json

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
    entry: str = "main"  # the entry function that ran
    inputs: tuple[tuple[str, tuple, str], ...] = ()  # (name, concrete shape, dtype) of each input it ran with
    remote: str = ""  # where it ran when not in this process: "rpc HOST:PORT", "tracker HOST:PORT key K"
    arguments: str = "a local run"  # what each site was given: "a local run" or "the compiled IR" (shapes only)
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
            f"({self.mode}{', on ' + self.remote if self.remote else ''}{self._argument_note}, {self.runs} run(s))"
        )

    @property
    def _argument_note(self) -> str:
        return "" if self.arguments == "a local run" else f", sites given arguments of {self.arguments}'s shapes"

    def to_json(self) -> dict:
        return {
            "schema": self.schema, "model": self.model, "target": self.target, "device": self.device,
            "mode": self.mode, "repeat": self.repeat,
            "records": [[r.name, r.call, r.run, r.start_us, r.duration_us, r.kind] for r in self.records],
            "args": {k: {"shapes": v.shapes, "dtypes": v.dtypes} for k, v in self.args.items()},
            "e2e_us": self.e2e_us, "entry": self.entry, "inputs": self.inputs, "remote": self.remote,
            "arguments": self.arguments,
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
                e2e_us=tuple(data["e2e_us"]), entry=str(data.get("entry", "main")),
                inputs=tuples(data.get("inputs", ())), remote=str(data.get("remote", "")),
                arguments=str(data.get("arguments", "a local run")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LineageFormatError(f"profile file is missing or has a malformed field: {exc}") from exc

    def save(self, path, overwrite: bool = False):
        return write_json(path, self.to_json(), overwrite)

    @classmethod
    def load(cls, path) -> "Profile":
        return cls.from_json(read_json(path, "profile"))
