"""`relaytrace legacy`: a Relay-era question answered from its artifacts alone (printed
Relay IR, profiler reports, AutoTVM task listings and logs)."""

from __future__ import annotations

from .base import Command


def add_arguments(p) -> None:
    """`relaytrace legacy`'s options: the artifacts to read (docs/cli.md#legacy)."""
    p.add_argument("--relay-ir", metavar="FILE", help="printed Relay IR of main (a whole paste is fine)")
    p.add_argument("--report", metavar="FILE", help="debug_executor / profiler_vm / debug-runtime report(s)")
    p.add_argument("--autotvm-tasks", metavar="FILE", help="printed AutoTVM task listing")
    p.add_argument("--autotvm-log", metavar="FILE", help="AutoTVM tuning log (JSON lines)")
    p.add_argument("--workloads", metavar="FILE", help="listed workload tuples to match log records to")
    p.add_argument(
        "--repeats-from",
        metavar="ZOO_MODEL",
        help="count workload repeats in a zoo model (e.g. resnet50_v1) when there is no Relay IR",
    )
    p.add_argument("--out", metavar="DIR", help="also write matches.json into DIR")
    p.add_argument("--force", action="store_true")


def run(args) -> int:
    """`relaytrace legacy`: ``legacy.cli.run`` (its parsers imported only when it runs)."""
    from ..legacy.cli import run as read_artifacts

    return read_artifacts(args)


COMMAND = Command("legacy", "read Relay-era IR, profiler reports and AutoTVM tasks/logs offline", add_arguments, run)
