"""``--out DIR --force`` replaces exactly the files relaytrace writes (by name and as
regular files), refuses before any build what it could not write or would lose, and
clears or names what an interrupted run left beside DIR. Pure: no TVM."""

import os
import time

import pytest

from relaytrace.errors import RelaytraceError
from relaytrace.jobs import _staged, prepare_out_dir


def _outputs(path, *names):
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (path / name).write_text("ours")
    return path


def _write(staging):
    (staging / "lineage.json").write_text("new")


@pytest.mark.parametrize(
    "layout",
    [
        "rendered-data/a.csv",  # a directory named like a rendered output
        "trace.json/thesis.txt",  # an output's name taken by a directory of the user's
        "notes.txt",
        "rendered-notes.txt",  # rendered- but no name `relaytrace render` writes
    ],
)
def test_force_refuses_a_directory_holding_anything_relaytrace_did_not_write(tmp_path, layout):
    out = _outputs(tmp_path / "d", "lineage.json", "profile.json")
    user = out / layout
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text("the user's")
    with pytest.raises(RelaytraceError, match="holds files relaytrace did not write"):
        prepare_out_dir(out, force=True)
    with pytest.raises(RelaytraceError, match="holds files relaytrace did not write"):
        _staged(out, _write, overwrite=True)  # checked again when publishing
    assert user.read_text() == "the user's" and (out / "lineage.json").read_text() == "ours"


def test_a_link_named_like_an_output_is_the_users(tmp_path):
    out = _outputs(tmp_path / "d", "lineage.json")
    (tmp_path / "precious.txt").write_text("the user's")
    os.symlink(tmp_path / "precious.txt", out / "layers.csv")
    with pytest.raises(RelaytraceError, match=r"layers.csv \(a link\)"):
        prepare_out_dir(out, force=True)
    assert (tmp_path / "precious.txt").read_text() == "the user's"


def test_force_replaces_a_directory_of_relaytraces_own_files(tmp_path):
    out = _outputs(tmp_path / "d", "lineage.json", "report.html", "rendered-layers.svg", "rendered-report.html")
    prepare_out_dir(out, force=True)
    _staged(out, _write, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["lineage.json"] and (out / "lineage.json").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["d"]  # no staging or old directory left


def test_a_symlinked_or_dangling_out_is_refused_and_left_as_it_is(tmp_path):
    real = _outputs(tmp_path / "real", "lineage.json")
    for link, target in ((tmp_path / "link", real), (tmp_path / "dangling", tmp_path / "gone")):
        os.symlink(target, link)
        with pytest.raises(RelaytraceError, match="is a symbolic link"):
            prepare_out_dir(link, force=True)
        assert link.is_symlink()
    assert (real / "lineage.json").read_text() == "ours"


def test_names_the_staging_directory_could_not_have_are_refused_before_anything(tmp_path):
    with pytest.raises(RelaytraceError, match="235 bytes long: at most 234"):
        prepare_out_dir(tmp_path / ("x" * 235), force=False)
    prepare_out_dir(tmp_path / ("x" * 234), force=False)
    with pytest.raises(RelaytraceError, match="is not valid UTF-8"):
        prepare_out_dir(tmp_path / os.fsdecode(b"bad\xffname"), force=False)
    assert list(tmp_path.iterdir()) == []


def test_a_staging_directory_killed_mid_write_holds_a_temporary_file_of_ours_and_is_cleared(tmp_path):
    """Outputs are written through ``.NAME.XXXXXXXX.tmp`` files: a signal mid-write leaves
    one in the staging directory, which is still relaytrace's own (found by the fuzz
    suite's signal class); a like-named temporary file of another name is the user's."""
    out = _outputs(tmp_path / "d", "lineage.json", ".profile.json.k3j_9xq2.tmp")
    prepare_out_dir(out, force=True)  # ours, also inside DIR itself
    ours = _outputs(tmp_path / ".d.relaytrace-abcd1234", "layers.csv", ".lineage.json.k3j_9xq2.tmp")
    theirs = _outputs(tmp_path / ".d.relaytrace-efgh5678", ".thesis.txt.k3j_9xq2.tmp")
    for staging in (ours, theirs):
        os.utime(staging, (time.time() - 3600, time.time() - 3600))
    prepare_out_dir(out, force=True)
    assert not ours.exists() and theirs.exists()
    _outputs(out, ".thesis.txt.k3j_9xq2.tmp")
    with pytest.raises(RelaytraceError, match="holds files relaytrace did not write"):
        prepare_out_dir(out, force=True)


def test_what_a_killed_run_left_is_cleared_or_named(tmp_path):
    out = tmp_path / "d"
    stale = tmp_path / ".d.relaytrace-abcd1234"
    young = tmp_path / ".d.relaytrace-efgh5678"
    for staging in (stale, young):
        _outputs(staging, "lineage.json")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    aside = _outputs(tmp_path / ".d.old-ijkl9012" / "d", "lineage.json").parent
    with pytest.raises(RelaytraceError, match=r"left its previous outputs in .*\.d\.old-ijkl9012/d: move them back"):
        prepare_out_dir(out, force=True)  # killed between its renames: d is gone, its outputs are aside
    assert not stale.exists() and young.exists()  # a young one may be another run's, writing now
    os.rename(aside / "d", out)  # the user moves them back, as the message says
    prepare_out_dir(out, force=True)
    assert (out / "lineage.json").read_text() == "ours"
    _outputs(aside / "d", "lineage.json")  # killed after the new outputs were in: the old ones are superseded
    prepare_out_dir(out, force=True)
    assert not aside.exists()


def _killed_at(step: int, out, user_file):
    """Fork a run writing ``out`` that SIGKILLs itself at its ``step``-th write or
    rename (the staging files, then the swap's renames); return whether it got there."""
    import signal

    import relaytrace.jobs as jobs

    pid = os.fork()
    if pid == 0:  # the run
        count = [0]
        real_rename = os.rename

        def tick():
            count[0] += 1
            if count[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)

        def rename(a, b):
            tick()
            real_rename(a, b)

        def write(staging):
            for name in ("lineage.json", "profile.json", "layers.csv", "report.html", "trace.json"):
                tick()
                (staging / name).write_text("new")

        jobs.os.rename = rename
        try:
            prepare_out_dir(out, force=True)
            _staged(out, write, overwrite=True)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert user_file.read_text() == "the user's"
    return os.WIFSIGNALED(status)


def test_a_run_killed_at_any_write_step_loses_nothing_and_the_next_run_says_or_clears_it(tmp_path):
    """SIGKILL at each staging write and at each rename of the swap: ``out`` is then its
    old outputs, its new ones, or gone with the old ones named beside it; the next run
    with --force succeeds or names them; a file of the user's beside ``out`` is never
    touched."""
    steps = 0
    for step in range(1, 20):
        root = tmp_path / f"kill{step}"
        out = _outputs(root / "d", "lineage.json", "profile.json")
        (root / "mine.txt").write_text("the user's")
        if not _killed_at(step, out, root / "mine.txt"):
            break  # the run finished before this step: every step was tried
        steps += 1
        names = sorted(p.name for p in out.iterdir()) if out.is_dir() else None
        assert names in (
            ["lineage.json", "profile.json"],
            ["layers.csv", "lineage.json", "profile.json", "report.html", "trace.json"],
            None,
        ), names
        if names is not None:
            assert {(out / n).read_text() for n in names} in ({"ours"}, {"new"})
        for stale in root.glob(".d.relaytrace-*"):  # as if the run was killed ten minutes ago
            os.utime(stale, (time.time() - 3600, time.time() - 3600))
        if names is None:  # killed between the swap's renames: the old outputs are aside, and named
            with pytest.raises(RelaytraceError, match="left its previous outputs in"):
                prepare_out_dir(out, force=True)
            (aside,) = root.glob(".d.old-*")
            os.rename(aside / "d", out)
        prepare_out_dir(out, force=True)
        _staged(out, _write, overwrite=True)
        assert (out / "lineage.json").read_text() == "new"
        assert sorted(p.name for p in root.iterdir()) == ["d", "mine.txt"]  # nothing left beside
    assert steps == 7  # five staging writes, the rename aside, the rename into place


def test_a_users_directory_named_like_a_leftover_is_left_alone(tmp_path):
    out = _outputs(tmp_path / "results", "lineage.json")
    backups = [
        _outputs(tmp_path / ".results.old-20240315", "thesis.txt"),
        _outputs(tmp_path / ".results.relaytrace-20240315", "notes.txt"),
    ]
    for backup in backups:
        os.utime(backup, (time.time() - 3600, time.time() - 3600))
    prepare_out_dir(out, force=True)
    assert all((b / n).read_text() == "ours" for b, n in zip(backups, ("thesis.txt", "notes.txt")))
