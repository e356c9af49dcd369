"""The CLI's one error path: any failure (ours, TVM's, the OS's, the user's code's) as
one line and an exit code, as docs/cli.md promises: 2 for bad input on the command
line, 1 for anything else that failed, 130 when interrupted.

Why a module of its own: every command ends here, so the mapping is one table a
maintainer reads, not ``except`` clauses spread over the commands.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading

from .errors import RelaytraceError, UsageError, describe
from .render.safe_text import terminal

USAGE, FAILED, INTERRUPTED = 2, 1, 130
DEBUG_VARIABLE = "RELAYTRACE_DEBUG"  # set to 1: the traceback too
_interrupted = threading.Event()

_OS_HINTS = {
    errno.ENOSPC: "the disk is full: free space and run again",
    errno.EACCES: "no permission: choose a path you can read and write",
    errno.EPERM: "no permission: choose a path you can read and write",
    errno.EROFS: "the file system is read-only: choose another --out",
    errno.EISDIR: "a directory is in the way: name a file",
    errno.ENOTDIR: "a file is in the way: name a directory",
    errno.EXDEV: "the output is on another file system than its parent: choose another --out",
}


def watch_interrupts():
    """Note Ctrl-C before Python turns it into KeyboardInterrupt: raised inside a TVM
    pass callback, it comes back as TVM's own error with nothing of the interrupt.
    Returns what puts the previous handler back (``main`` calls it when the command
    ends: a host process, a notebook, gets its own Ctrl-C back)."""
    _interrupted.clear()

    def interrupted(signum, frame):
        _interrupted.set()
        raise KeyboardInterrupt

    def unraisable(info, shown=sys.unraisablehook):
        if not isinstance(info.exc_value, KeyboardInterrupt):  # Python prints those with a traceback
            shown(info)

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous, previous_hook = signal.signal(signal.SIGINT, interrupted), sys.unraisablehook
    sys.unraisablehook = unraisable

    def restore():
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook

    return restore


def stop_if_interrupted() -> None:
    """Raise KeyboardInterrupt again if Ctrl-C came: the first one may have been raised
    where Python ignores exceptions (a destructor, a weakref callback). Called at every
    step a command reports, and before outputs are published."""
    if _interrupted.is_set():
        raise KeyboardInterrupt


def exit_code(exc: BaseException) -> tuple[int, str]:
    """(exit code, the one line to print) for a failure."""
    if _interrupted.is_set() or isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED, "relaytrace: interrupted"
    if isinstance(exc, UsageError):
        return USAGE, f"relaytrace: usage error: {exc}"
    if isinstance(exc, RelaytraceError):
        return FAILED, f"relaytrace: error: {exc}"
    if isinstance(exc, OSError):
        return FAILED, f"relaytrace: error: {_os_line(exc)}"
    if isinstance(exc, (UnicodeError, MemoryError, RecursionError)):
        return FAILED, f"relaytrace: error: {describe(exc)}"
    where = "TVM" if type(exc).__module__.startswith(("tvm", "tvm_ffi")) else "an unexpected"
    return FAILED, f"relaytrace: error: {where} {describe(exc)} (set {DEBUG_VARIABLE}=1 for the traceback)"


def _os_line(exc: OSError) -> str:
    if exc.errno is None or exc.strerror is None:  # raised with a message of ours
        return str(exc).strip() or type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    hint = _OS_HINTS.get(exc.errno)
    return f"{exc.strerror}{where}" + (f" ({hint})" if hint else "")


def report(exc: BaseException) -> int:
    """Print the line for ``exc`` (and its traceback when asked) and return the code;
    the line through ``safe_text.terminal`` (a name it quotes may hold anything)."""
    code, line = exit_code(exc)
    line = terminal(line)
    if os.environ.get(DEBUG_VARIABLE) == "1":
        import traceback

        traceback.print_exception(exc)
    try:
        if sys.stderr.isatty():  # a pass count may stand on the line (jobs.Progress): clear it first
            sys.stderr.write("\r\x1b[K")
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr itself is gone or closed
    return code


def quiet_broken_pipe() -> int:
    """Output piped into ``head`` that stopped reading: not an error. Later writes (at
    exit) go nowhere instead of raising again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0
