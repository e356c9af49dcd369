"""`relaytrace peaks`: this machine's peak rates, measured and cached, or the named devices'."""

from __future__ import annotations

from ..jobs import echo
from .base import Command
from .shared import check_target, progress


def add_arguments(p) -> None:
    """`relaytrace peaks`'s options (docs/cli.md#peaks)."""
    p.add_argument("--target", default="llvm", help="the CPU target the kernels are built for (default llvm)")
    p.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    p.add_argument("--list", action="store_true", help="list the named devices --device takes, with sources")


def run(args) -> int:
    """`relaytrace peaks`: print the peaks profiles here are measured against, and how."""
    from ..model.peaks import DEVICES
    from ..render.safe_text import terminal

    if args.list:
        for device in DEVICES.values():
            echo(terminal(device.peaks().line()))
        return 0
    from ..profiling.peaks import measure

    check_target(args.target)
    echo(terminal(measure(args.target, refresh=args.refresh, progress=progress(args)).line()))
    return 0


COMMAND = Command(
    "peaks", "this machine's measured peak GFLOP/s and GB/s (cached), or the named devices'", add_arguments, run
)
