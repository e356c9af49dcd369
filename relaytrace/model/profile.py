"""Profile: every timed call of a run, as plain data (made by ``profiler.profile``)."""

from __future__ import annotations

import functools
import statistics

from attrs import define, field

from ..errors import FileFormatError
from .codec import Codec, codec_field, decode, encode
from .inside import InsideSite
from .jsonio import check, make_record, migrate, read_record, write_json
from .names import Name
from .peaks import Peaks, problem
from .sitekey import SiteKey

SCHEMA = "relaytrace.profile/4"  # /2 added peaks, /3 each argument's address, /4 the inside of kernels
# each added a field an older file loads without: its data is the same under /4
_MIGRATIONS = {
    "relaytrace.profile/1": lambda data, where: {**data, "schema": "relaytrace.profile/2"},
    "relaytrace.profile/2": lambda data, where: {**data, "schema": "relaytrace.profile/3"},
    "relaytrace.profile/3": lambda data, where: {**data, "schema": SCHEMA},
}


class Mode(Name):
    """How a profile was made: a ``timeline`` of whole runs, each site ``isolated`` on
    its own, or an ``estimate`` (no run: each site's time its roofline bound,
    ``analysis.estimate``)."""

    TIMELINE = "timeline"
    ISOLATED = "isolated"
    ESTIMATE = "estimate"


class Arguments(Name):
    """What a profile's sites were given: the arguments of a local run, or arguments of
    the shapes the compiled IR gives them (a build that cannot run here)."""

    LOCAL_RUN = "a local run"
    FROM_IR = "the compiled IR"


TIMELINE, ESTIMATE = Mode.TIMELINE, Mode.ESTIMATE
LOCAL_RUN, FROM_IR = Arguments.LOCAL_RUN, Arguments.FROM_IR


class CallKind(Name):
    """What a recorded call ran: a kernel (a PrimFunc) the VM called, a VM builtin, or a
    KV-cache kernel (a PrimFunc the KV cache's runtime called inside a builtin)."""

    KERNEL = "kernel"
    BUILTIN = "builtin"
    CACHE = "cache"


KERNEL, BUILTIN, CACHE = CallKind.KERNEL, CallKind.BUILTIN, CallKind.CACHE


@define(frozen=True)
class CallRecord:
    """One call: the ``call``-th call of ``name`` in run ``run``. ``within``: for a
    KV-cache kernel, the VM call it ran inside (``name#call`` of that builtin, whose own
    ``duration_us`` then leaves the kernels' time out); empty for the VM's own calls."""

    name: str
    call: int
    run: int
    start_us: float
    duration_us: float
    kind: CallKind
    within: str = ""


@define(frozen=True)
class SiteTime:
    """One call site's durations over the runs of a profile, in microseconds."""

    median_us: float
    min_us: float
    max_us: float
    runs: int

    @classmethod
    def of(cls, durations: list[float]) -> SiteTime:
        """The median, min, max and count of one site's durations (at least one)."""
        return cls(statistics.median(durations), min(durations), max(durations), len(durations))


@define(frozen=True)
class ArgInfo:
    """The shapes and dtypes of one call site's arguments as they ran, and where each was
    in memory (``addresses``: its data address in that run, what the memory plan is
    held against; empty for a profile made without a local run)."""

    shapes: tuple[tuple, ...]
    dtypes: tuple[str, ...]
    addresses: tuple[int, ...] = ()


_RECORD_FIELDS = ("name", "call", "run", "start_us", "duration_us", "kind", "within")


def _call_record(row, where: str) -> CallRecord:
    if not isinstance(row, list) or len(row) not in (len(_RECORD_FIELDS) - 1, len(_RECORD_FIELDS)):
        raise FileFormatError(f"{where} must be a list [{', '.join(_RECORD_FIELDS)}] (within optional)")
    record = make_record(CallRecord, dict(zip(_RECORD_FIELDS, row)), where)
    if record.call < 0 or record.run < 0 or not 0 <= record.duration_us <= MAX_US or abs(record.start_us) > MAX_US:
        raise FileFormatError(f"{where} is out of range: call and run from 0, times 0 to {MAX_US:g} us")
    return record


def _records(rows, where: str) -> tuple[CallRecord, ...]:
    check(rows, tuple, where)
    return tuple(_call_record(r, f"{where}[{i}]") for i, r in enumerate(rows))


# a profile holds a record per call per run: each saved as a row, not an object
RECORDS = Codec(
    lambda records: [
        [r.name, r.call, r.run, r.start_us, r.duration_us, r.kind] + ([r.within] if r.within else []) for r in records
    ],
    _records,
    lambda of: {  # each record a row: name, call, run, start_us, duration_us, kind[, within]
        "type": "array",
        "items": {
            "type": "array",
            "prefixItems": [of(str), of(int), of(int), of(float), of(float), of(CallKind), of(str)],
            "minItems": 6,
            "maxItems": 7,
        },
    },
)


@define(frozen=True)
class Profile:
    """Every timed call of one entry function's runs (``records``), the end-to-end
    times of separate untimed runs (``e2e_us``), and how and where it was measured
    (``mode`` timeline, isolated or estimate, ``repeat``, ``device``, ``remote``, ``arguments``),
    with the device's peak rates (``peaks``) when known.
    Frozen data made by ``relaytrace.profile``, saved and loaded as ``profile.json``.
    Every figure drawn from it is a median over runs per call site (``by_site``)."""

    model: str
    target: str
    device: str
    mode: Mode = field(converter=Mode)
    repeat: int
    records: tuple[CallRecord, ...] = codec_field(RECORDS)
    args: dict[str, ArgInfo] = field(factory=dict)  # SiteKey.in_entry -> argument shapes (``arg``)
    e2e_us: tuple[float, ...] = ()
    entry: str = "main"  # the entry function that ran
    inputs: tuple[tuple[str, tuple, str], ...] = ()  # (name, concrete shape, dtype) of each input it ran with
    remote: str = ""  # where it ran when not in this process: "rpc HOST:PORT", "tracker HOST:PORT key K"
    arguments: Arguments = field(default=LOCAL_RUN, converter=Arguments)  # LOCAL_RUN, or FROM_IR (the IR's shapes)
    peaks: Peaks | None = None  # the device's ceilings (measured where it ran, or given); None: not known
    step: tuple[int, ...] = ()  # a served LLM step: (tokens it ran, tokens in the KV cache before them)
    kv_pages: tuple[tuple[tuple[int, ...], str], ...] = ()  # (shape, dtype) of each KV-cache page tensor it used
    sequences: int = 1  # a served step's sequences, each running ``step``'s tokens after its context
    bound: tuple[tuple[str, int, str], ...] = ()  # (dim, value, where from) of each dim the step's size did not give
    inside: tuple[InsideSite, ...] = ()  # each fused kernel's parts timed by an instrumented copy (``--inside``)
    schema: str = SCHEMA

    @property
    def runs(self) -> int:
        """How many runs the records come from."""
        return max((r.run for r in self.records), default=-1) + 1

    def key(self, record: CallRecord) -> SiteKey:
        """The call site a record is a call of (the profile's entry, its name and call)."""
        return SiteKey(self.entry, record.name, record.call)

    def inside_of(self, site: SiteKey) -> InsideSite | None:
        """What the instrumented copy measured inside ``site``'s kernel, None if not timed inside."""
        return self._inside.get(site) if site.entry == self.entry else None

    @functools.cached_property
    def _inside(self) -> dict[SiteKey, InsideSite]:
        return {SiteKey(self.entry, s.kernel, s.call): s for s in self.inside}

    def arg(self, site: SiteKey) -> ArgInfo | None:
        """The shapes and dtypes ``site``'s arguments ran with, None if not recorded."""
        return self.args.get(site.in_entry) if site.entry == self.entry else None

    def site_times(self, kind: CallKind | None = None) -> dict[SiteKey, SiteTime]:
        """Each call site's durations over the runs, as a ``SiteTime``."""
        runs: dict[SiteKey, list[float]] = {}
        for r in self.records:
            if kind is None or r.kind == kind:
                runs.setdefault(self.key(r), []).append(r.duration_us)
        return {site: SiteTime.of(durations) for site, durations in runs.items()}

    def by_site(self, kind: CallKind | None = None) -> dict[SiteKey, float]:
        """The median over runs of each call site's duration: the figure every table,
        share and sum is made of. The median, not the mean: one hiccup in one run (a
        page fault, another process) does not move it."""
        return {site: t.median_us for site, t in self.site_times(kind).items()}

    def noisy_sites(self) -> dict[SiteKey, SiteTime]:
        """Sites whose slowest run took over twice their median, and 50 us more."""
        return {
            site: t
            for site, t in self.site_times().items()
            if t.max_us > 2 * t.median_us and t.max_us - t.median_us > 50
        }

    @property
    def kernel_us(self) -> float:
        """The sum of every kernel call site's median, KV-cache kernels among them."""
        return sum(self.by_site(KERNEL).values()) + sum(self.by_site(CACHE).values())

    def within(self) -> dict[SiteKey, SiteKey]:
        """Each KV-cache kernel's call -> the VM call (a builtin) it ran inside."""
        return {self.key(r): SiteKey.parse(r.within, self.entry) for r in self.records if r.within}

    @property
    def builtin_us(self) -> float:
        """The sum of every VM builtin call's median."""
        return sum(self.by_site(BUILTIN).values())

    @property
    def e2e_median_us(self) -> float:
        """The median of the untimed end-to-end runs (0 when there were none)."""
        return statistics.median(self.e2e_us) if self.e2e_us else 0.0

    @property
    def gap_us(self) -> float:
        """End-to-end time not inside any recorded call: VM dispatch and instrument cost."""
        return self.e2e_median_us - self.kernel_us - self.builtin_us

    def _per_run(self, figure) -> float:
        runs: dict[int, list[CallRecord]] = {}
        for r in self.records:
            runs.setdefault(r.run, []).append(r)
        return statistics.median(figure(rs) for rs in runs.values()) if runs and self.mode == TIMELINE else 0.0

    @property
    def timed_run_us(self) -> float:
        """The median wall time of the timeline runs themselves, from a run's start to
        its last call's end (the runs the sites were timed in, each call stamped by the
        VM's instrument); 0 in isolated mode, whose sites run alone."""
        return self._per_run(lambda rs: max(r.start_us + r.duration_us for r in rs))

    @property
    def calls_per_run_us(self) -> float:
        """The median over timeline runs of the time inside recorded calls in that run;
        ``timed_run_us`` minus it is the VM's dispatch and the instrument between calls,
        measured in the same runs; 0 in isolated mode."""
        return self._per_run(lambda rs: sum(r.duration_us for r in rs))

    def warnings(self) -> tuple[str, ...]:
        """What makes this profile's figures less than they look, one line each. Every
        cause named is measured in this profile: the end-to-end runs are separate,
        untimed runs, so their median is set against the timed runs' own wall time."""
        out = []
        noisy = self.noisy_sites()
        if noisy:
            site, t = max(noisy.items(), key=lambda kv: kv[1].max_us - kv[1].median_us)
            out.append(
                f"NOISY: {len(noisy)} call site(s) took over twice their median in some run ({site.label}: "
                f"median {t.median_us:.1f} us, {t.min_us:.1f} to {t.max_us:.1f}); figures are medians "
                "over runs; more --repeat steadies them"
            )
        timed, calls, e2e = self.timed_run_us, self.calls_per_run_us, self.e2e_median_us
        runs = (
            f"the timed runs took {timed / 1e3:.3f} ms each (median; {(timed - calls) / 1e3:.3f} ms of it VM "
            f"dispatch and the instrument between calls), the untimed end-to-end runs {e2e / 1e3:.3f} ms"
        )
        if self.e2e_us and self.kernel_us + self.builtin_us > e2e:
            if self.mode != TIMELINE:
                why = "sites timed alone run warm, without the waits of a real run"
            elif timed > e2e:
                why = f"{runs}: the runs differ (variance between runs, and each timed call is stamped), not the calls"
            else:
                why = (
                    f"{runs}: each site's median comes from its own runs, and their sum exceeds what any one "
                    "timed run took"
                )
            out.append(
                f"OVER END TO END: kernels + VM builtins ({(self.kernel_us + self.builtin_us) / 1e3:.3f} ms) "
                f"exceed the end-to-end median ({e2e / 1e3:.3f} ms), so the gap is negative: {why}"
            )
        elif self.e2e_us and timed and e2e - timed > max(self.gap_us / 2, e2e / 100):
            out.append(
                f"BETWEEN RUNS: most of the unexplained gap ({self.gap_us / 1e3:.3f} ms) is between runs, "
                f"not inside one: {runs}; the rest is variance between separate runs, not time the "
                "attribution missed"
            )
        return tuple(out)

    def summary(self) -> str:
        """One line: kernels + builtins + gap = end-to-end, and how it was measured (an
        estimate says it is one)."""
        if self.mode == ESTIMATE:
            peaks = self.peaks
            return (
                f"ESTIMATE, not a measurement: kernels at least {self.kernel_us / 1e3:.3f} ms on {self.device} "
                f"(each kernel's roofline lower bound from {peaks.source if peaks else 'no'} peaks; VM builtins "
                "and dispatch not estimated)"
                + (f"\nestimated served step: {self._step_words}" if len(self.step) == 2 else "")
            )
        rest = (
            f"VM builtins {self.builtin_us / 1e3:.3f} ms + unexplained gap {self.gap_us / 1e3:.3f} ms"
            if self.mode == TIMELINE
            else f"VM builtins and dispatch (not timed apart in isolated mode) {self.gap_us / 1e3:.3f} ms"
        )
        return (
            f"kernels {self.kernel_us / 1e3:.3f} ms + {rest} = end-to-end median {self.e2e_median_us / 1e3:.3f} ms "
            f"({self.mode}{', on ' + self.remote if self.remote else ''}{self._argument_note}, {self.runs} run(s))"
            + self._step_note
        )

    @property
    def _step_note(self) -> str:
        """A served LLM step's line: what it ran, and the serving figure it is (a step
        on an empty cache is a prefill: the time to the first token; one after a
        context, the time per output token at that context)."""
        if len(self.step) != 2:
            return ""
        context = self.step[1]
        figure = "time to first token" if not context else f"time per output token at context {context}"
        if self.sequences != 1:
            figure = f"{figure} of a batch of {self.sequences}"
        kernels = sum(self.by_site(CACHE).values())
        return (
            f"\nserved step through the KV cache: {self._step_words}: {figure} "
            f"{self.e2e_median_us / 1e3:.3f} ms (begin/end_forward included); the KV cache's kernels "
            f"{kernels / 1e3:.3f} ms of it, billed to the attention layers that ran them"
        )

    @property
    def _step_words(self) -> str:
        """A served step's size: its tokens, sequences, context and the dims sized by the
        model or the user (``bound``), with where each value came from."""
        tokens, context = self.step
        each = f" for each of {self.sequences} sequences" if self.sequences != 1 else ""
        bound = "".join(f"; {dim}={value} ({where})" for dim, value, where in self.bound)
        return f"{tokens} token(s){each} after {context}{bound}"

    @property
    def _argument_note(self) -> str:
        return "" if self.arguments == LOCAL_RUN else f", sites given arguments of {self.arguments}'s shapes"

    def to_json(self) -> dict:
        """The profile as plain JSON data, with each site's medians (``site_times``)."""
        return {
            "schema": self.schema,
            **encode(self),
            "site_times": {site.in_entry: [t.median_us, t.min_us, t.max_us] for site, t in self.site_times().items()},
        }  # derived: median, min, max

    @classmethod
    def from_json(cls, data, where: str = "profile") -> Profile:
        """The profile a JSON object holds, every field checked for type and range (a
        duration is 0 to ``MAX_US``; at least one end-to-end run, every profile has
        one): a ``FileFormatError`` naming it otherwise."""
        data = migrate(data, _MIGRATIONS, SCHEMA, "profile", where)
        profile = decode(cls, {k: v for k, v in data.items() if k != "site_times"}, where)
        if not profile.e2e_us:
            raise FileFormatError(
                f"{where}: e2e_us is empty, so the profile has no end-to-end time to share out; "
                "profile the model again (`relaytrace profile`)"
            )
        if not 1 <= profile.repeat <= MAX_RUNS or any(not 0 < t <= MAX_US for t in profile.e2e_us):
            raise FileFormatError(
                f"{where}: repeat must be 1 to {MAX_RUNS:g} and each e2e_us above 0 and at most "
                f"{MAX_US:g} (a run takes time); the file was edited or is corrupt"
            )
        if profile.records and profile.runs != profile.repeat:
            raise FileFormatError(
                f"{where}: repeat is {profile.repeat} but the records hold {profile.runs} run(s); "
                "the file was edited or is corrupt"
            )
        overlap = _overlap(profile.records)
        if overlap:
            raise FileFormatError(
                f"{where}: {overlap}: calls of one run follow one another; the file was edited or is corrupt"
            )
        wrong = problem(profile.peaks) if profile.peaks is not None else ""
        if wrong:
            raise FileFormatError(
                f"{where}: {wrong}; profile again, or give the peaks with --peak-gflops and --peak-gbps"
            )
        return profile

    def save(self, path, overwrite: bool = False):
        """Writes ``profile.json`` whole or not at all; an existing file only with ``overwrite``."""
        return write_json(path, self.to_json(), overwrite)

    @classmethod
    def load(cls, path) -> Profile:
        """The profile saved at ``path``; a file that is not one is a one-line
        ``FileFormatError`` naming the file and the field."""
        return read_record(path, "profile", cls.from_json)


MAX_US = 1e12  # a call or run over 11 days is a corrupt file, not a measurement
MAX_RUNS = 10**6  # more runs than any profile makes


def _overlap(records) -> str:
    """Where two of the VM's own calls (not the KV-cache kernels inside them) of one run
    overlap in time, as words ("" when none do): a run's calls are made one after another."""
    runs: dict[int, list[CallRecord]] = {}
    for r in records:
        if not r.within:
            runs.setdefault(r.run, []).append(r)
    for run, calls in runs.items():
        calls.sort(key=lambda r: r.start_us)
        for a, b in zip(calls, calls[1:]):
            if b.start_us < a.start_us + a.duration_us - 1e-3 - 1e-9 * abs(a.start_us):
                return (
                    f"in run {run}, {b.name}#{b.call} starts at {b.start_us:g} us, inside {a.name}#{a.call} "
                    f"({a.start_us:g} to {a.start_us + a.duration_us:g} us)"
                )
    return ""
