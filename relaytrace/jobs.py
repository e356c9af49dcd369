"""The CLI's jobs as functions: progress lines, input shapes, every output of a
profiled build written into a directory in one step (or not at all), saved outputs read."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import RelaytraceError, UsageError
from .failures import stop_if_interrupted
from .model.jsonio import current_umask, raise_naming_target
from .render.safe_text import terminal, terminal_lines

if TYPE_CHECKING:
    from .model.run_spec import RunSpec


def echo(text: str = "") -> None:
    """Print a command's output on stdout, each line through ``safe_text.terminal``:
    the one way the CLI prints (a name's control characters are shown escaped)."""
    print(terminal_lines(str(text)))


def escape_warnings():
    """Python warnings printed while a command runs (TVM's ONNX importer quotes the
    input names it renames) through ``safe_text.terminal`` too. Returns what puts the
    previous formatter back."""
    import warnings

    shown = warnings.formatwarning

    def formatwarning(*args, **kwargs):
        return terminal_lines(shown(*args, **kwargs))

    warnings.formatwarning = formatwarning

    def restore():
        warnings.formatwarning = shown

    return restore


class Progress:
    """Progress on stderr: one line per step; silent with --quiet. The passes of a build
    are one line that counts up in place on a terminal, and not printed at all when
    stderr is a file or pipe (a log gets the steps, not 300 pass names). Each step and
    pass is also where a Ctrl-C that Python swallowed stops the command
    (``failures.stop_if_interrupted``)."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self._tty = sys.stderr.isatty()
        self._counting = False  # a pass count stands on the terminal's last line

    def __call__(self, message: str) -> None:
        stop_if_interrupted()
        if not self.quiet:
            self._say(f"[relaytrace] {terminal(message)}", "\n")

    def passes(self, count: int, name: str) -> None:
        """The build's progress hook: every fifth pass shown on a terminal; Ctrl-C is checked."""
        stop_if_interrupted()
        if not self.quiet and self._tty and count % 5 == 0:
            self._say(f"[relaytrace]   {count} passes ({terminal(name[:40])})", "")

    def _say(self, line: str, end: str) -> None:
        try:
            if self._counting:  # clear the count: the next line replaces it
                sys.stderr.write("\r\x1b[K")
            sys.stderr.write(line if end == "" and self._tty else line + "\n")
            sys.stderr.flush()
            self._counting = end == "" and self._tty
        except OSError:  # stderr piped into a reader that went away: progress is not worth failing for
            self.quiet = True


def parse_shape(text: str) -> tuple[str, tuple[int, ...], str | None]:
    """``data:1x3x224x224`` -> ("data", (1, 3, 224, 224), None); ``ids:1x32:int64`` ->
    ("ids", (1, 32), "int64")."""
    import numpy as np

    parts = text.split(":")
    dtype = None
    if len(parts) >= 3 and not parts[-1][:1].isdigit():
        dtype = parts.pop()
    name, dims = ":".join(parts[:-1]), parts[-1]
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
        if not name or any(d < 0 for d in shape):
            raise ValueError
    except ValueError:
        raise UsageError(f"cannot parse input shape {text!r}: write NAME:1x3x224x224 or NAME:1x32:int64") from None
    if 0 in shape:
        raise UsageError(
            f"input shape {text!r} has a dim of 0: an empty tensor runs no kernel worth profiling; "
            "give each dim a size of at least 1"
        )
    if dtype is not None and dtype not in _NOT_NUMPY_DTYPES:
        try:
            dtype = np.dtype(dtype).name  # "float" -> "float64": the name TVM and the checks use
        except TypeError:
            raise UsageError(f"unknown dtype {dtype!r} in --input-shape {text!r}: use e.g. float32, int64") from None
    return name, shape, dtype


_NOT_NUMPY_DTYPES = ("bfloat16",)  # TVM dtypes numpy has no name for


def prepare_out_dir(out: str | os.PathLike, force: bool) -> Path:
    """Refuse, before any build: an existing directory unless forced; any directory
    holding anything relaytrace does not write (``--force`` replaces the directory whole,
    so only one holding nothing but relaytrace's own files, by name and as regular
    files: a directory or link named like an output is the user's); a symbolic link (a
    link is not replaced by a directory); a name the staging directory beside it could
    not have (over 234 bytes, not UTF-8). What an
    interrupted run left beside it is cleared or named (``_leftovers``); the working
    directory or one holding it (``--out .``: outputs replace their directory whole,
    by a rename beside it). Returns ``out`` made absolute: a model's code that
    ``os.chdir()``s does not move it. Nothing is written yet; ``write_outputs``
    checks again when it publishes."""
    given, out = out, Path(os.path.abspath(out))
    here = Path.cwd().resolve()
    if out.resolve() == here or out.resolve() in here.parents:
        raise UsageError(
            f"--out {given} is the working directory{'' if out.resolve() == here else ' or holds it'}: "
            "relaytrace replaces its output directory whole; name a directory of its own "
            "(e.g. --out relaytrace-out)"
        )
    _check_name(out)
    if out.is_symlink():
        raise RelaytraceError(f"{out} is a symbolic link: name the directory it points to, or a new one")
    _leftovers(out)
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; replace it with --force")
    if out.exists() and not out.is_dir():
        raise RelaytraceError(f"{out} exists and is not a directory")
    if os.path.ismount(out):  # outputs are swapped in by a rename, which cannot replace a mount point
        raise RelaytraceError(f"{out} is a mount point: name a directory inside it (--out {out / 'run'})")
    _check_writable_beside(out)
    _refuse_foreign(out)
    return out


RENDERED = "rendered-"  # `relaytrace render DIR` writes rendered-layers.svg ... beside the outputs
RENDERED_OUTPUTS = frozenset(
    {f"{RENDERED}report.html"}
    | {f"{RENDERED}{graph}.{fmt}" for graph in ("layers", "kernels") for fmt in ("svg", "png", "pdf", "dot")}
)
_STAGING, _ASIDE = ".relaytrace-", ".old-"  # ``.OUT.relaytrace-XXXXXXXX``, ``.OUT.old-XXXXXXXX`` beside OUT
_NAME_BYTES = 255 - len(f".{_STAGING}XXXXXXXX")  # the longest OUT name whose staging name a file system takes


def _check_name(out: Path) -> None:
    """The output directory's name can be written, and can have a staging directory
    beside it (its name, 21 bytes longer)."""
    try:
        size = len(out.name.encode("utf-8"))
    except UnicodeEncodeError:
        raise RelaytraceError(
            f"--out {out.name.encode('utf-8', 'backslashreplace').decode()!r} is not valid UTF-8: choose a name of text"
        ) from None
    if size > _NAME_BYTES:
        raise RelaytraceError(
            f"--out name is {size} bytes long: at most {_NAME_BYTES} (its staging directory beside it needs 21 more)"
        )


def _leftovers(out: Path) -> None:
    """What a run that was killed while it wrote ``out`` left beside it, told from
    anything else by its name and by holding nothing but relaytrace's outputs (a
    directory of the user's that happens to be named so is left alone): its staging
    directories (partial outputs) are removed once ten minutes old (a younger one may be
    another run's, writing now); the previous outputs a run moved aside to put new ones
    in place are removed when the new ones are there (superseded), and named when
    ``out`` is gone (that run ended between its two renames)."""
    if not out.parent.is_dir():
        return
    prefix = f".{out.name}"
    for p in out.parent.iterdir():
        if not p.name.startswith(prefix) or not p.is_dir() or p.is_symlink():
            continue
        rest = p.name[len(prefix) :]
        if rest.startswith(_STAGING) and len(rest) == len(_STAGING) + 8 and _only_ours(p):
            if time.time() - p.stat().st_mtime > 600:
                shutil.rmtree(p, ignore_errors=True)
        elif rest.startswith(_ASIDE) and len(rest) == len(_ASIDE) + 8 and _aside_of(p, out.name):
            if out.exists():
                shutil.rmtree(p, ignore_errors=True)
            else:
                raise RelaytraceError(
                    f"a run killed while replacing {out} left its previous outputs in "
                    f"{p / out.name}: move them back (mv '{p / out.name}' '{out}') or remove {p}"
                )


def _only_ours(directory: Path) -> bool:
    """A directory holding nothing but relaytrace's output files (or nothing)."""
    return all(_ours(p) for p in directory.iterdir())


def _aside_of(directory: Path, name: str) -> bool:
    """A directory ``_publish`` moved outputs aside into: nothing, or only ``name``
    holding nothing but relaytrace's output files."""
    inside = list(directory.iterdir())
    return not inside or (
        len(inside) == 1
        and inside[0].name == name
        and inside[0].is_dir()
        and not inside[0].is_symlink()
        and _only_ours(inside[0])
    )


_PARTIAL = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp")  # jsonio.write_atomic's temporary file


def _ours(p: Path) -> bool:
    """A file relaytrace writes into an output directory, or the temporary file one is
    written through (a run killed mid-write leaves it): by name, and a regular file.
    The names come from the writers' one list (``render.outputs.NAMES``), imported
    here: a command that writes nothing (``query``) does not load the writers."""
    from .render.outputs import NAMES as OUTPUTS

    partial = _PARTIAL.fullmatch(p.name)
    name = partial["name"] if partial else p.name
    return (name in OUTPUTS or name in RENDERED_OUTPUTS) and p.is_file() and not p.is_symlink()


def _refuse_foreign(out: Path) -> None:
    foreign = (
        sorted(
            p.name + ("/" if p.is_dir() and not p.is_symlink() else " (a link)" if p.is_symlink() else "")
            for p in out.iterdir()
            if not _ours(p)
        )
        if out.is_dir()
        else []
    )
    if foreign:
        raise RelaytraceError(
            f"{out} holds files relaytrace did not write ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}): choose a new or empty --out"
        )


_PROBE = ".relaytrace-probe-"


def _check_writable_beside(out: Path) -> None:
    """The directory the outputs will be staged in can take a directory: its nearest
    existing ancestor is a directory where one can be made (tried, and removed). An
    empty probe over ten minutes old is one a signal left between its two steps:
    removed (a younger one may be another run's, probing now)."""
    ancestor = next(p for p in out.absolute().parents if p.exists())  # missing levels are made when writing
    if not ancestor.is_dir():
        raise RelaytraceError(f"cannot write {out}: {ancestor} is a file, not a directory")
    for stale in ancestor.glob(f"{_PROBE}*"):
        with contextlib.suppress(OSError):  # not empty, not ours, or gone: left
            if stale.is_dir() and not stale.is_symlink() and time.time() - stale.stat().st_mtime > 600:
                stale.rmdir()
    try:
        os.rmdir(tempfile.mkdtemp(prefix=_PROBE, dir=ancestor))
    except OSError as exc:
        raise RelaytraceError(
            f"cannot write {out}: {ancestor} takes no new directory ({exc.strerror}); choose another --out"
        ) from None


def write_outputs(
    out: Path, report, run: RunSpec, collapse: int | None = None, overwrite: bool = True, prefill=None
) -> Path:
    """Write every output of a ``Report`` (``render.outputs.PROFILE``) into a fresh
    directory beside ``out``, then put it in ``out``'s place in one rename: a failure at
    any point leaves ``out`` as it was (or absent) and nothing else behind. An existing
    ``out`` is replaced only with ``overwrite`` and only when it holds nothing but
    relaytrace's outputs. ``prefill``: the report of an LLM's prefill step served before
    ``report``'s decode (``steps.csv``)."""
    from .render.outputs import PROFILE, ProfileRun, write_all

    run_of = ProfileRun(report, run, collapse, prefill)
    return _staged(out, lambda staging: write_all(PROFILE, run_of, staging), overwrite)


def write_compare(out: Path, lineage, comparison, overwrite: bool = True) -> Path:
    """Write a ``relaytrace compare`` run's outputs (``render.outputs.COMPARE``) as
    ``write_outputs`` writes a profile's: whole or not at all."""
    from .render.outputs import COMPARE, CompareRun, write_all

    return _staged(out, lambda staging: write_all(COMPARE, CompareRun(lineage, comparison), staging), overwrite)


def write_sweep(out: Path, sweep, project: int | None, overwrite: bool = True, device=None) -> Path:
    """Write a ``relaytrace sweep`` run's outputs (``render.outputs.SWEEP``) as
    ``write_outputs`` writes a profile's: whole or not at all; ``device``: the same
    points bounded on a named device, fitted alike."""
    from .render.outputs import SWEEP, SweepRun, write_all

    return _staged(out, lambda staging: write_all(SWEEP, SweepRun(sweep, project, device), staging), overwrite)


def legacy_out(out: Path) -> Path:
    """``legacy --out``'s directory refused when it holds outputs of another command
    (a profile's): ``--force`` replaces the directory whole, and a legacy run writes
    only ``matches.json``."""
    from .render.outputs import LEGACY, names

    others = sorted(p.name for p in out.iterdir() if p.name not in names(LEGACY)) if out.is_dir() else []
    if others:
        raise RelaytraceError(
            f"{out} holds the outputs of another run ({', '.join(others[:3])}"
            f"{', ...' if len(others) > 3 else ''}): give legacy --out a directory of its own"
        )
    return out


def write_legacy(out: Path, matches: dict, overwrite: bool = True) -> Path:
    """Write ``relaytrace legacy --out``'s ``matches.json`` as ``write_outputs`` writes a
    profile's: whole or not at all, never over another command's outputs
    (``legacy_out``)."""
    from .render.outputs import LEGACY, LegacyRun, write_all

    return _staged(legacy_out(out), lambda staging: write_all(LEGACY, LegacyRun(matches), staging), overwrite)


def _staged(out: Path, write, overwrite: bool) -> Path:
    """``write`` into a fresh directory beside ``out``, then ``_publish`` it there. An
    OS error on the staging directory or a file in it names ``out`` (or the file in
    ``out``), never the staging name; one that names no file (a full disk met while
    writing) names ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{out.name}{_STAGING}"
    try:
        staging = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    except OSError as exc:
        raise_naming_target(exc, out.parent, prefix, out)
    try:
        write(staging)
        stop_if_interrupted()
        os.chmod(staging, 0o777 & ~current_umask())  # as mkdir would have made it, not mkdtemp's 0700
        _publish(staging, out, overwrite)
    except OSError as exc:  # said of OUT (or OUT/lineage.json), not of the staging directory
        if exc.filename is None and exc.errno is not None:  # a write's error (ENOSPC) names no file
            raise OSError(exc.errno, exc.strerror, str(out)) from exc
        raise_naming_target(exc, out.parent, prefix, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _publish(staging: Path, out: Path, overwrite: bool) -> None:
    """Rename ``staging`` to ``out``. An existing ``out`` is moved aside first, put back
    if the rename fails, and removed only once the new one is in place; should putting
    it back fail too, it is kept where it was moved and the error says where."""
    if not out.exists():
        try:
            os.rename(staging, out)  # an empty directory made meanwhile is replaced: nothing is lost
            return
        except OSError:
            if not out.exists():
                raise
    if not overwrite:
        raise FileExistsError(f"{out} appeared while building; replace it with --force")
    if not out.is_dir():
        raise RelaytraceError(f"{out} exists and is not a directory")
    _refuse_foreign(out)
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}{_ASIDE}", dir=out.parent))
    try:
        os.rename(out, aside / out.name)
    except BaseException:
        aside.rmdir()
        raise
    try:
        os.rename(staging, out)
    except BaseException as exc:
        try:
            os.rename(aside / out.name, out)
        except OSError:
            raise RelaytraceError(
                f"could not replace {out} ({exc}); its previous contents are kept in {aside / out.name}"
            ) from exc
        aside.rmdir()
        raise
    shutil.rmtree(aside, ignore_errors=True)


def load_pair(path):
    """(Lineage, Profile) saved in an output DIR, or a profile.json beside its lineage."""
    from .model.profile import Profile

    path = Path(path)
    if path.is_dir():
        lineage, profile = path / "lineage.json", path / "profile.json"
    elif path.name.endswith(".json"):
        profile, lineage = path, path.with_name("lineage.json")
    else:
        raise RelaytraceError(f"{path} is neither an output directory nor a profile.json")
    for p in (lineage, profile):
        if not p.is_file():
            raise FileNotFoundError(f"missing {p} (run `relaytrace profile ... --out DIR` first)")
    return load_lineage(lineage), Profile.load(profile)


def load_lineage(path: Path):
    """The lineage saved at ``path`` with the code saved beside it (``code.json``), when
    there is one: a run of an earlier version has none, and its report no Code section."""
    from .model.code import Code
    from .model.lineage import Lineage

    lineage = Lineage.load(path)
    code = Path(path).with_name("code.json")
    return lineage.with_code(Code.load(code), str(code)) if code.is_file() else lineage
