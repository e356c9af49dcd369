"""The ``relaytrace`` command. Exit codes: 0 success, 2 usage error, 1 failure, 130 interrupted.

The parser is built from ``commands.COMMANDS``, one module per command. Everything a
command prints goes through ``jobs.echo`` (each line through ``safe_text.terminal``),
and each name in a line it makes is ``terminal``'s too, so a name's control characters
are shown escaped, never sent to the terminal."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import warnings

from .commands import COMMANDS, Command
from .jobs import escape_warnings
from .render.safe_text import terminal


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as the one line every relaytrace error is (exit 2)."""

    def error(self, message):
        self.exit(2, f"relaytrace: usage error: {message} (see `{self.prog} --help`)\n")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, then an option given an empty value refused: ``--rpc "$BOARD"``
        with ``$BOARD`` unset must not quietly mean "no --rpc"."""
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            given = getattr(namespace, action.dest, None)
            for value in given if isinstance(given, list) else [given]:
                if isinstance(value, str) and not value.strip():
                    wanted = action.metavar or action.dest.upper()
                    self.error(
                        f"{action.option_strings[-1]} is given empty (an unset variable?): give {wanted}"
                        if action.option_strings
                        else f"{wanted} is given empty (an unset variable?)"
                    )
        return namespace, extras


def build_parser(commands: tuple[Command, ...] = COMMANDS) -> argparse.ArgumentParser:
    """The `relaytrace` argument parser: one subcommand per entry of ``commands``
    (``commands.COMMANDS``), each option checked as it is parsed."""
    parser = _Parser(prog="relaytrace", description="Map TVM kernels, and their time, back to model layers.")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        p = sub.add_parser(command.name, help=command.help)
        command.add_arguments(p)
        p.set_defaults(run=command.run)
    return parser


def main(argv=None, commands: tuple[Command, ...] = COMMANDS) -> int:
    """Run one of ``commands``; every failure is one line on stderr and an exit code
    (``failures``): 0 done, 1 failed, 2 bad command line, 130 interrupted."""
    from . import failures

    restore, restore_warnings = failures.watch_interrupts(), escape_warnings()
    # torch.export's own deprecation notice on every torch import: not the user's to act on
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
    try:
        args = build_parser(commands).parse_args(argv)
        code = args.run(args)
    except BrokenPipeError:
        return failures.quiet_broken_pipe()
    except BaseException as exc:  # noqa: BLE001 - the one place failures become exit codes
        if isinstance(exc, SystemExit):
            raise
        code = failures.report(exc)
    finally:
        restore()
        restore_warnings()
    remote = sys.modules.get(f"{__package__}.profiling.remote")
    if remote is not None and remote.ABANDONED:  # tearing down a session to a stopped device would hang
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


THREAD_WAIT_S = 5.0  # how long the process waits at exit for threads a model's code left running


def run() -> None:
    """The ``relaytrace`` program: ``main``, then an exit that cannot hang or die by a
    signal once the command is done. A Ctrl-C while the interpreter shuts down (TVM's
    and torch's teardown) prints ``relaytrace: interrupted`` and exits 130, as one
    during the command does; threads a model's factory left running are waited for
    ``THREAD_WAIT_S``, then said and left (Python would wait for them forever). The
    workers of a ``concurrent.futures`` executor (TVM's tuning uses them) are no such
    threads: Python's shutdown releases them when idle. An interrupted command exits
    at once: TVM's threads (a pass's, the code generator's) may still be running, and
    the interpreter's teardown would then die by ``std::terminate`` (SIGABRT) after the
    line was said; its outputs were never published, so nothing is left to finish."""
    from .failures import INTERRUPTED

    code = main()
    if code == INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def interrupted(signum, frame):
        print("relaytrace: interrupted", file=sys.stderr, flush=True)
        os._exit(130)

    signal.signal(signal.SIGINT, interrupted)
    pools = sys.modules.get("concurrent.futures.thread")  # an executor's idle workers end at shutdown by themselves
    workers = set(getattr(pools, "_threads_queues", {})) if pools is not None else set()
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t not in workers]
    deadline = time.monotonic() + THREAD_WAIT_S
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    still = [terminal(t.name) for t in left if t.is_alive()]
    if still:
        print(
            f"relaytrace: the model's code left {len(still)} thread(s) running ({', '.join(still[:3])}): "
            "exiting without them",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
