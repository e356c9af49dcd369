"""`relaytrace memory`: what a compiled entry holds in memory at its peak, and for whom;
two builds side by side (no TVM)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..jobs import echo
from ..render.safe_text import terminal
from .base import Command
from .shared import at_least


def add_arguments(p) -> None:
    """`relaytrace memory`'s arguments and options (docs/cli.md#memory)."""
    p.add_argument("a", metavar="DIR", help="output DIR (or its lineage.json)")
    p.add_argument("b", metavar="B", nargs="?", help="a second output DIR: compare peaks and per-layer memory")
    p.add_argument("--entry", metavar="NAME", help="entry function (default: the one profiled, else main)")
    p.add_argument(
        "--at",
        action="append",
        default=[],
        metavar="DIM=N",
        help="a symbolic dim's value (default: the profiled run's); repeat for more",
    )
    p.add_argument("--top", type=at_least(1), default=10, metavar="N", help="rows per table (default 10)")


def run(args) -> int:
    """`relaytrace memory DIR [B]`: the peak, what is live there and whose, the layers
    by memory at the peak; with B, both builds' peaks and layers side by side."""
    from ..analysis.diff import same_model
    from ..render.memory import memory_summary

    dims = _dims(args.at)
    a = _loaded(args.a)
    memory_a = _memory(a, args.entry, dims)
    if args.b is None:
        echo(memory_summary(memory_a, args.top))
        if memory_a is not None:
            _other_entries(a[0], memory_a.entry, dims)
        return 0
    b = _loaded(args.b)
    same_model(a[0], b[0], "memory compares two builds of one model")
    echo(_side_by_side(memory_a, _memory(b, args.entry, dims), args.top))
    return 0


def _dims(given: list[str]) -> dict[str, int]:
    dims = {}
    for text in given:
        name, _, value = text.partition("=")
        if not name.isidentifier() or not value.isdigit():
            raise UsageError(f"--at takes DIM=N (a symbolic dim and a whole number, e.g. seq_len=128), not {text!r}")
        dims[name] = int(value)
    return dims


def _loaded(path: str):
    """(lineage, profile or None) of an output DIR or a lineage.json; a profile beside
    it that is not a run of its build is refused (``check_match``)."""
    from ..analysis.attribution import check_match
    from ..model.lineage import Lineage
    from ..model.profile import Profile

    p = Path(path)
    lineage_path = p / "lineage.json" if p.is_dir() else p
    if not lineage_path.is_file():
        raise FileNotFoundError(f"missing {lineage_path} (run `relaytrace profile ... --out DIR` first)")
    profile_path = lineage_path.with_name("profile.json")
    lineage = Lineage.load(lineage_path)
    if not profile_path.is_file():
        return lineage, None
    profile = Profile.load(profile_path)
    check_match(lineage.for_entry(profile.entry), profile)
    return lineage, profile


def _memory(loaded, entry: str | None, dims: dict[str, int]):
    """The memory of ``entry`` (the profiled one by default) in a build (``loaded``:
    its lineage and profile or None), at the profiled run's dims overridden by ``dims``
    (and checked against that run's addresses when they are its own)."""
    from ..analysis.memory import memory_at, profiled_memory
    from ..model.lineage import choose_entry

    lineage, profile = loaded
    name = choose_entry(tuple(lineage.build.entries), entry or (profile.entry if profile is not None else None))
    known = {
        d
        for _, shape, _ in lineage.build.entries.get(name, ())
        for d in shape
        if isinstance(d, str) and d.isidentifier()
    }
    unknown = sorted(set(dims) - known)
    if unknown:
        raise UsageError(
            f"--at {unknown[0]}: {name} has no symbolic dim of that name (its dims: "
            f"{', '.join(sorted(known)) or 'none, all static'})"
        )
    if profile is not None and profile.entry == name:
        return profiled_memory(lineage, profile, dims)
    return memory_at(lineage, name, dims)


def _other_entries(lineage, shown: str, dims: dict[str, int]) -> None:
    """One line for each other entry of the build (prefill beside decode)."""
    from ..analysis.memory import memory_at
    from ..render.memory import memory_line

    others = [e for e in lineage.build.entries if e != shown]
    if others:
        echo("\nthe build's other entries:")
        for entry in others:
            memory = memory_at(lineage, entry, dims)
            echo(memory_line(memory) if memory is not None else f"memory ({terminal(entry)}): no plan")


def _side_by_side(a, b, top: int) -> str:
    """Both builds' peaks, and the layers whose memory at the peak or weights differ most."""
    from ..render.memory import memory_line, size
    from ..render.table import format_table

    lines = ["A: " + memory_line(a), "B: " + memory_line(b)]
    if a is None or b is None or not a.known or not b.known:
        return "\n".join(lines)
    lines.append(f"peak B / A: {b.peak / a.peak:.3f}" if a.peak else "peak: A has none")
    rows_a = {r.layer: r for r in a.layers}
    rows_b = {r.layer: r for r in b.layers}
    names = sorted(set(rows_a) | set(rows_b), key=lambda n: -abs(_at_peak(rows_b, n) - _at_peak(rows_a, n)))
    rows = [
        [
            n,
            size(_at_peak(rows_a, n)),
            size(_at_peak(rows_b, n)),
            size(_field(rows_a, n, "weights")),
            size(_field(rows_b, n, "weights")),
        ]
        for n in names[:top]
    ]
    lines += [
        "",
        f"top {top} layers by the change of their memory at the peak:",
        format_table(["layer", "A at peak", "B at peak", "A weights", "B weights"], rows),
    ]
    return "\n".join(lines)


def _at_peak(rows, name: str) -> float:
    return _field(rows, name, "at_peak")


def _field(rows, name: str, field: str) -> float:
    row = rows.get(name)
    return getattr(row, field) if row is not None else 0.0


COMMAND = Command(
    "memory", "what a build holds in memory at its peak, and for whom (or two builds compared)", add_arguments, run
)
