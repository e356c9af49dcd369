"""Bad input and faults (issue 17): each example as the user met it, now a one-line
error with the documented exit code, nothing lost, nothing silently wrong."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaytrace.errors import RelaytraceError, UsageError
from tests.fuzz import CONTRADICTIONS, REFERENCES, broken_promise, readers, run_cli

FIXTURES = Path(__file__).parent / "fixtures"
TINY = f"{FIXTURES / 'tiny_model.py'}:make"
SEED_002 = (FIXTURES / "seeds" / "002_4f47c9b26338e3b9.txt").read_text()


@pytest.fixture
def out_dir(tiny_out):
    return tiny_out


def _refused(argv, code, words):
    got, _, err = run_cli(argv)
    assert broken_promise(got, err) is None, err
    assert got == code, err
    last = err.strip().splitlines()[-1]
    assert words in last, last
    return last


@pytest.mark.parametrize(
    "argv, words",
    [
        (["profile", TINY, "--target", "bogus", "--out", "o"], "--target 'bogus' is not a TVM target"),
        (["profile", TINY, "--repeat", "0", "--out", "o"], "--repeat: '0' must be at least 1"),
        (["profile", TINY, "--collapse", "-1", "--out", "o"], "--collapse: '-1' must be at least 0"),
        (["tasks", TINY, "--tune", "1"], "--tune needs --db DIR"),
        (["tasks", TINY, "--tune", "0", "--db", "d"], "--tune: '0' must be at least 1"),
        (["profile", TINY, "--kernel-timeout", "1", "--out", "o"], "apply to a remote device"),
        # issue 45: an unset $BOARD profiled here, exit 0; a timeout TVM's thread join overflowed on after the build
        (["profile", TINY, "--rpc", "", "--out", "o"], "--rpc is given empty (an unset variable?): give HOST:PORT"),
        (
            ["profile", TINY, "--rpc", "127.0.0.1:9", "--kernel-timeout", "1e300", "--out", "o"],
            "--kernel-timeout: '1e300' must be at most 86400",
        ),
        (
            ["profile", TINY, "--input-shape", "x:1x3x16x16", "--input-shape", "x:1x3x8x8", "--out", "o"],
            "input x is given a shape twice (1x3x16x16 and 1x3x8x8): give each input once",
        ),
        (["profile", TINY, "--out", ".", "--force"], "--out . is the working directory"),
    ],
)
def test_bad_options_are_refused_before_any_work(argv, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(argv)  # progress on: a build would say "building"
    assert code == 2 and words in err.strip().splitlines()[-1], err
    assert "] building" not in err and "] importing" not in err
    assert not any(tmp_path.iterdir())


def test_reading_commands_refuse_nonsense_naming_the_option(out_dir, tmp_path):
    _refused(["query", out_dir / "lineage.json", "--kernel", ""], 2, "--kernel is given empty")
    _refused(["query", out_dir / "lineage.json", "--layer", ""], 2, "--layer is given empty (an unset variable?)")
    _refused(["render", out_dir, "--format", "png", "--out", tmp_path / "x.svg"], 2, "does not end in .png")
    assert not (tmp_path / "x.svg").exists()
    code, out, err = run_cli(["render", out_dir, "--format", "html", "--out", tmp_path / "x.htm"])
    assert code == 0 and (tmp_path / "x.htm").read_text().startswith("<!DOCTYPE html>"), err


def _corrupt(out_dir, tmp_path, name, change):
    case = tmp_path / f"case-{name}"
    subprocess.run(["cp", "-r", str(out_dir), str(case)], check=True)
    path = case / name
    raw = path.read_bytes()
    path.write_bytes(change(raw) if isinstance(change(raw), bytes) else json.dumps(change(raw)).encode())
    return case


def _edit(name, edit):
    def change(raw):
        data = json.loads(raw)
        edit(data)
        return data

    return name, change


@pytest.mark.parametrize(
    "name, change, words",
    [
        ("lineage.json", lambda raw: bytes(range(256)), "is not a UTF-8 text file"),
        ("lineage.json", lambda raw: raw.decode().encode("utf-16"), "is not a UTF-8 text file"),
        ("profile.json", lambda raw: raw[: len(raw) // 2], "is not valid JSON"),
        *[
            (n, c, w)
            for (n, c), w in [
                (
                    _edit("lineage.json", lambda d: d.__setitem__("kernels", [])),
                    "lineage.json: kernels must be an object",
                ),
                (
                    _edit("lineage.json", lambda d: d["origins"][0].__setitem__("index", "three")),
                    "origins[0].index must be an integer, not a string 'three'",
                ),
                (
                    _edit(
                        "lineage.json",
                        lambda d: next(iter(d["kernels"].values()))[0]["roles"][0].__setitem__("origin", "nope"),
                    ),
                    "names origin 'nope', which the lineage does not have",
                ),
                (
                    _edit("lineage.json", lambda d: d["verification"]["sites"][0].__setitem__("status", "fine")),
                    "sites[0].status must be one of verified, suspect, unverified, not a string 'fine'",
                ),
                (
                    _edit("profile.json", lambda d: d["records"][0].__setitem__(4, "12")),
                    "records[0].duration_us must be a finite number, not a string '12'",
                ),
                (_edit("profile.json", lambda d: d["records"][0].__setitem__(4, 1e308)), "records[0] is out of range"),
                (_edit("profile.json", lambda d: d.__setitem__("records", {})), "records must be a list"),
            ]
        ],
    ],
)
def test_corrupt_artifacts_are_one_line_errors_naming_file_and_field(out_dir, tmp_path, name, change, words):
    case = _corrupt(out_dir, tmp_path, name, change)
    before = sorted(p.name for p in case.iterdir())
    for argv in (["render", case, "--format", "dot", "--out", case / "g.dot"], ["diff", case, out_dir]):
        last = _refused(argv, 1, words)
        assert name in last
    assert sorted(p.name for p in case.iterdir()) == before  # nothing written, nothing left


@pytest.mark.parametrize("name, edit, words", CONTRADICTIONS)
def test_contradictory_files_are_refused_by_every_command_that_reads_them(out_dir, tmp_path, name, edit, words):
    """Files whose every field has the right type but which contradict themselves (or a
    profile its lineage): refused on load by render, advise, memory and diff alike,
    naming the file or the pair, nothing written."""
    case = _corrupt(out_dir, tmp_path, name, _edit(name, edit)[1])
    before = sorted(p.name for p in case.iterdir())
    for argv in readers(case, out_dir):
        last = _refused(argv, 1, words)
        assert name in last or "does not match lineage" in last, last
    assert sorted(p.name for p in case.iterdir()) == before


def test_memory_of_two_different_models_is_refused(out_dir, tmp_path):
    other = tmp_path / "other"
    assert (
        run_cli(["--quiet", "profile", f"{FIXTURES / 'tiny_model.py'}:make_other", "--repeat", "1", "--out", other])[0]
        == 0
    )
    _refused(["memory", out_dir, other], 1, "memory compares two builds of one model")


def test_a_bad_target_read_from_run_json_is_named_as_run_jsons(out_dir, tmp_path):
    """Issue 54: it was said as a --target the user had not given."""
    case = _corrupt(out_dir, tmp_path, *_edit("run.json", lambda d: d.update(target="bogus")))
    _refused(["tasks", case], 2, f"{case / 'run.json'}'s target 'bogus' is not a TVM target")


def test_a_byte_order_mark_is_read(out_dir, tmp_path):
    case = _corrupt(out_dir, tmp_path, "lineage.json", lambda raw: b"\xef\xbb\xbf" + raw)
    code, out, err = run_cli(["query", case / "lineage.json", "--layer", "conv1"])
    assert code == 0 and "conv1 runs in:" in out, err


def test_a_directory_where_a_file_belongs_is_named(out_dir, tmp_path):
    _refused(["query", tmp_path, "--layer", "conv1"], 1, "no lineage file at")
    (tmp_path / "g.dot").mkdir()
    _refused(
        ["render", out_dir, "--format", "dot", "--out", tmp_path / "g.dot", "--force"],
        1,
        f"{tmp_path / 'g.dot'} (a directory is in the way: name a file)",
    )


def test_output_piped_into_head_is_not_an_error(out_dir):
    """``relaytrace query ... | head -1``: the reader goes away; no BrokenPipeError."""
    reader = subprocess.Popen(["head", "-c", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    done = subprocess.run(
        [sys.executable, "-m", "relaytrace.cli", "query", str(out_dir / "lineage.json"), "--history", "conv1"],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    reader.stdin.close()
    reader.wait(timeout=30)
    assert done.returncode == 0 and "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr


def test_ctrl_c_during_the_build_exits_130_with_one_line(tmp_path):
    """Ctrl-C while TVM runs its passes (zoo ResNet-18's build takes seconds; the
    signal is sent a second after the build starts)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "relaytrace.cli", "demo", "--model", "resnet18", "--out", str(tmp_path / "d")],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    deadline = time.time() + 120
    seen = ""
    while time.time() < deadline and "building" not in seen:
        seen += proc.stderr.readline()
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    err = seen + proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err[-2000:]
    assert "profiling" not in err  # it stopped in the build
    assert err.strip().splitlines()[-1] == "relaytrace: interrupted" and "Traceback" not in err
    assert not (tmp_path / "d").exists() and not list(tmp_path.iterdir())


def _factory(tmp_path, name: str, body: str) -> str:
    """A model file whose factory runs ``body`` first, then returns the tiny model."""
    (tmp_path / f"{name}.py").write_text(
        f"import atexit, threading, time\nfrom tests.fixtures.tiny_model import make "
        f"as tiny\ndef make():\n    {body}\n    return tiny()\n"
    )
    return f"{tmp_path / name}.py:make"


def _relaytrace(*args, cwd=None):
    return subprocess.Popen(
        [sys.executable, "-m", "relaytrace.cli", "--quiet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(FIXTURES.parent.parent)),
    )


def test_a_thread_the_factory_leaves_running_is_waited_for_then_said_and_left(tmp_path):
    """A non-daemon thread of the model's code kept the process alive forever after
    its outputs were written."""
    model = _factory(tmp_path, "spinning", "threading.Thread(target=time.sleep, args=(3600,), name='poller').start()")
    proc = _relaytrace("profile", model, "--repeat", "1", "--out", str(tmp_path / "run"))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert err.strip().splitlines()[-1] == (
        "relaytrace: the model's code left 1 thread(s) running (poller): exiting without them"
    )
    assert (tmp_path / "run" / "report.html").is_file()


def test_ctrl_c_after_the_outputs_are_written_exits_130_with_one_line(tmp_path):
    """A Ctrl-C while the process shuts down (here: an exit handler of the model's code
    that sleeps) died by the signal, with no line."""
    model = _factory(tmp_path, "slow_exit", "atexit.register(time.sleep, 600)")
    proc = _relaytrace("profile", model, "--repeat", "1", "--out", str(tmp_path / "run"))
    deadline = time.time() + 300
    while time.time() < deadline and not (tmp_path / "run" / "report.html").exists():
        time.sleep(0.2)
    time.sleep(1.0)  # the command has returned: the interpreter is in the exit handler
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "relaytrace: interrupted" and "Traceback" not in err


def test_two_builds_in_one_trace_block_are_said_not_mixed():
    import tvm

    import relaytrace
    from tests.fixtures.relax_modules import SharedSymbol, TwoEntries

    with relaytrace.trace() as one:
        tvm.compile(TwoEntries, "llvm")
    assert one.lineage.coverage().complete and not one.lineage.journal.degraded
    with relaytrace.trace() as two:
        tvm.compile(TwoEntries, "llvm")
        tvm.compile(SharedSymbol, "llvm")
    coverage = two.lineage.coverage()
    assert not coverage.complete and "two builds in one trace()" in coverage.degraded[0]
    assert set(two.lineage.build.entries) == {"main", "decode"}  # the first build's, not a mix
    assert {s.label for s in two.lineage.call_sites} == {s.label for s in one.lineage.call_sites}

    @tvm.transform.module_pass(opt_level=0, name="Swap")
    def swap(mod, ctx):  # a user pass that returns another model
        return SharedSymbol

    pipeline = tvm.transform.Sequential([swap, tvm.relax.get_pipeline("default")])
    with relaytrace.trace() as swapped:
        tvm.compile(TwoEntries, "llvm", relax_pipeline=pipeline)
    coverage = swapped.lineage.coverage()
    assert not coverage.complete and coverage.unresolved and coverage.eliminated == coverage.origins


def test_build_keeps_the_callers_pass_context():
    import tvm

    import relaytrace
    from tests.fixtures.relax_modules import TwoEntries

    seen = []

    @tvm.ir.instrument.pass_instrument
    class Spy:
        def run_after_pass(self, mod, info):
            seen.append(info.name)

    plain = []
    with tvm.transform.PassContext(instruments=[Spy()]):
        relaytrace.build(TwoEntries, "llvm")
    plain, seen[:] = list(seen), []
    assert "FuseOps" in plain
    with tvm.transform.PassContext(instruments=[Spy()], disabled_pass=["FuseOps"]):
        _, lineage = relaytrace.build(TwoEntries, "llvm")
    assert seen and "FuseOps" not in seen  # the caller's instrument saw the build, without the pass it disabled
    assert lineage.coverage().complete


# -- the legacy parsers --------------------------------------------------------------


def _legacy(tmp_path, text, *flags):
    paste = tmp_path / "paste.txt"
    paste.write_text(text)
    code, out, err = run_cli(["legacy", *[x for flag in flags for x in (flag, paste)]])
    assert broken_promise(code, err) is None, err
    return code, out


def _report_block(text):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Duration (us)" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("Total"))
    return lines[start : end + 1]


def test_legacy_tables_as_forums_mangle_them(tmp_path):
    block = _report_block(SEED_002)
    rows = [line for line in block[1:] if line.strip() and not line.strip().startswith(("Sum", "Total", "-"))]
    kernels = _legacy(tmp_path, "\n".join(block), "--report")[1].split(" kernels, ")[0].rsplit("(table, ")[1]
    code, out = _legacy(tmp_path, "\n".join(block[:1]), "--report")  # header only: no division by zero
    assert code == 0 and "n/a (total is 0)" in out
    code, out = _legacy(
        tmp_path, " ".join(block[0].split()) + "\n" + "\n".join(" ".join(r.split()) for r in rows), "--report"
    )  # runs of spaces collapsed
    assert code == 0 and "separated by single spaces" in out
    gap = block[:3] + [""] + block[3:]  # a blank line inside the table
    code, out = _legacy(tmp_path, "\n".join(gap), "--report")
    assert f"(table, {kernels} kernels" in out and "blank line inside the table" in out
    shifted = block[:2] + [" " * 30 + block[2]] + block[3:]  # one row pushed right
    code, out = _legacy(tmp_path, "\n".join(shifted), "--report")
    assert "stands under no column" in out
    huge = "\n".join(block).replace("38,648.93", "1e999e0  ")  # too large for a float
    code, out = _legacy(tmp_path, huge, "--report")
    assert code == 0 and "unreadable number" in out


def test_legacy_tuning_logs_with_wrong_types_are_listed_not_crashed(tmp_path):
    record = {
        "i": ["llvm", 7, [["TENSOR", [1, 3, 224, 224], "float32"], ["TENSOR", [64, 3, 7, 7], "float32"]]],
        "r": [["0.1"], 0],
    }
    code, out = _legacy(tmp_path, json.dumps(record), "--autotvm-log")
    assert code == 0 and "record without the expected fields" in out


def test_legacy_relay_ir_reading_is_linear_on_a_pathological_line(tmp_path):
    line = "%1 = nn.conv2d(" + ") /* ty=" * 16_000  # 128 KB
    start = time.perf_counter()
    code, out = _legacy(tmp_path, line, "--relay-ir")
    assert time.perf_counter() - start < 2 and code == 0


def test_tasks_dir_rebuilds_as_the_directory_was_made(out_dir, tmp_path):
    info = json.loads((out_dir / "run.json").read_text())
    assert info["target"] == "llvm" and info["pipeline"] == "fused" and info["layout"] == "NCHW"
    case = tmp_path / "nhwc"
    subprocess.run(["cp", "-r", str(out_dir), str(case)], check=True)
    (case / "run.json").write_text(json.dumps({**info, "layout": "NHWC"}))
    _refused(["tasks", case], 2, "was built fused with layout NHWC")
    (case / "run.json").write_text(json.dumps({**info, "target": 3}))
    _refused(["tasks", case], 1, "run.json: target must be a string")


FACTORIES = """
import torch
def raises():
    raise RuntimeError("my factory broke")
class Stop(BaseException):
    pass
def stops():
    raise Stop("not an Exception")
def needs(x):
    return None
notcallable = 3
class NonZero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x)
def nonzero():
    return NonZero(), torch.randn(4, 4)
def pair():
    return "hello", 3
def wrong_shape():
    return torch.nn.Linear(4, 4), torch.randn(1, 5)
class InPlace(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
def in_place():
    return InPlace(), torch.randn(2, 3)
"""


@pytest.mark.parametrize(
    "factory, words",
    [
        ("raises", "facs.py:raises() raised RuntimeError: my factory broke"),
        ("stops", "facs.py:stops() raised Stop: not an Exception"),  # issue 45: "an unexpected Stop"
        ("needs", "facs.py:needs takes arguments; relaytrace calls the factory with none"),
        ("notcallable", "facs.py:notcallable is of type int, not a function returning (model, inputs)"),
        ("nonzero", "TVM's torch importer could not import nonzero (NonZero)"),  # the model: its factory
        ("pair", "pair() must return (torch module, example inputs), "),  # was a usage error on MODEL 'hello'
        ("missing", "facs.py has no function 'missing' (it defines raises, stops, needs, nonzero, pair, wrong_shape, "),
    ],
)
def test_a_users_factory_that_fails_is_said_as_its_own(factory, words, tmp_path):
    (tmp_path / "facs.py").write_text(FACTORIES)
    _refused(["--quiet", "profile", f"{tmp_path / 'facs.py'}:{factory}", "--out", tmp_path / "out"], 1, words)
    assert not (tmp_path / "out").exists()


def test_an_input_the_model_cannot_take_is_one_line_without_torchs_log(tmp_path):
    """A new user's find: torch logged ~19 lines of traceback (fake_tensor.py) before the
    one-line error, even with --quiet."""
    (tmp_path / "facs.py").write_text(FACTORIES)
    code, _, err = run_cli(["--quiet", "profile", f"{tmp_path / 'facs.py'}:wrong_shape", "--out", tmp_path / "out"])
    assert code == 1 and err.count("\n") == 1, err
    assert "torch.export could not export wrong_shape (Linear): RuntimeError: a and b must have same reduction" in err


def test_a_model_that_returns_nothing_is_said_to_run_nothing(tmp_path):
    """A new user's find: a forward that only changed its input in place profiled as
    0 call sites, 100 % attributed, without a word."""
    (tmp_path / "facs.py").write_text(FACTORIES)
    code, out, err = run_cli(["--quiet", "profile", f"{tmp_path / 'facs.py'}:in_place", "--out", tmp_path / "out"])
    assert code == 0, err
    assert "NOTHING RAN: the compiled entry calls no kernel" in out


def test_one_slow_run_does_not_move_a_sites_figure_and_is_said(out_dir, tmp_path):
    """Seed 001's complaint: one 4 ms hiccup in one run made a layer's mean 27x its
    median. Figures are medians over runs; the hiccup is flagged NOISY."""
    import attrs

    from relaytrace.model.profile import Profile

    base = Profile.load(out_dir / "profile.json")
    records = [attrs.evolve(r, run=run) for run in range(5) for r in base.records]  # five equal runs
    steady = attrs.evolve(base, records=tuple(records), repeat=5)
    steady = attrs.evolve(steady, e2e_us=(steady.timed_run_us,) * 3)  # untimed runs as long as the timed ones
    site = steady.key(records[0])
    later = [attrs.evolve(r, start_us=r.start_us + 4000) if r.run == 0 else r for r in records[1:]]  # pushed on
    hiccup = attrs.evolve(
        steady, records=(attrs.evolve(records[0], duration_us=records[0].duration_us + 4000),) + tuple(later)
    )
    assert hiccup.by_site()[site] == steady.by_site()[site]
    assert hiccup.site_times()[site].max_us == records[0].duration_us + 4000
    assert not steady.warnings()
    assert hiccup.warnings()[0].startswith("NOISY: 1 call site(s)") and site.label in hiccup.warnings()[0]
    fast = attrs.evolve(steady, e2e_us=(steady.kernel_us / 2,) * 3)
    over = [w for w in fast.warnings() if w.startswith("OVER END TO END")]
    assert len(over) == 1 and "gap is negative" in over[0] and "the runs differ" in over[0]
    assert f"the timed runs took {steady.timed_run_us / 1e3:.3f} ms each" in over[0]
    # the untimed runs took longer: 3x the timed run puts most of the gap between runs
    # whatever share of a timed run its calls took (1.5x did not, for a run measured under load)
    slow = attrs.evolve(steady, e2e_us=(steady.timed_run_us * 3,) * 3)
    between = [w for w in slow.warnings() if w.startswith("BETWEEN RUNS")]
    assert len(between) == 1 and f"({slow.gap_us / 1e3:.3f} ms)" in between[0]
    assert 0 < steady.calls_per_run_us <= steady.timed_run_us  # a run's calls lie inside its wall time
    saved = Profile.load(hiccup.save(tmp_path / "p.json"))
    assert saved.by_site() == hiccup.by_site()
    assert (
        json.loads((tmp_path / "p.json").read_text())["site_times"][site.in_entry][2] == records[0].duration_us + 4000
    )


def test_a_reference_csv_saved_by_excel_is_read(out_dir, tmp_path):
    """Excel's "CSV UTF-8" starts with a byte-order mark (a time that is no time:
    ``REFERENCES``)."""
    reference = tmp_path / "ref.csv"
    reference.write_bytes("layer,time_us\nconv1,12.5\nfc,3\n".encode("utf-8-sig"))
    code, out, err = run_cli(["diff", out_dir, "--reference", reference])
    assert code == 0 and "conv1" in out, err


@pytest.mark.parametrize("table, words", REFERENCES)  # issue 45: the last duplicate won, time_ms was ignored, a crash
def test_a_reference_csv_that_says_two_things_is_refused_naming_the_line(out_dir, tmp_path, table, words):
    reference = tmp_path / "ref.csv"
    reference.write_text(table)
    _refused(["diff", out_dir, "--reference", reference], 1, words)


def test_a_factory_that_changes_directory_moves_no_relative_path(tmp_path, monkeypatch):
    """Issue 45: a factory that ``os.chdir()``s wrote the outputs under its own directory."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "moving.py").write_text(
        f"import os\nfrom tests.fixtures.tiny_model import make as tiny\n"
        f"def make():\n    os.chdir({str(elsewhere)!r})\n    return tiny()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent))
    code, _, err = run_cli(["--quiet", "profile", "moving.py:make", "--repeat", "1", "--out", "run"])
    assert code == 0, err
    assert (tmp_path / "run" / "lineage.json").is_file() and not any(elsewhere.iterdir())
    assert Path.cwd() == tmp_path


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KB file system (tmpfs), or a skip where this machine cannot mount one."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()[:120]}")
    yield where
    subprocess.run(["umount", str(where)], check=True)


def test_a_full_disk_is_one_line_and_the_old_outputs_survive(small_disk, tiny_out):
    code, _, err = run_cli(["--quiet", "profile", TINY, "--repeat", "1", "--out", small_disk, "--force"])
    assert code == 1 and "is a mount point: name a directory inside it" in err  # said before the build
    old = small_disk / "run"
    subprocess.run(["cp", "-r", str(tiny_out), str(old)], check=True)  # about 300 KB of the 400
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    code, _, err = run_cli(["--quiet", "profile", TINY, "--repeat", "1", "--out", old, "--force"])
    assert code == 1 and broken_promise(code, err) is None, err
    assert "No space left on device" in err and "the disk is full" in err
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["run"]  # no staging or temp file left
    for name in before:
        (old / name).unlink()
    code, _, err = run_cli(["--quiet", "profile", TINY, "--repeat", "1", "--out", small_disk / "fresh"])
    assert code == 0, err
    assert oct((small_disk / "fresh").stat().st_mode & 0o777) == oct(0o777 & ~_umask())
    assert oct((small_disk / "fresh" / "lineage.json").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_legacy_out_on_a_full_disk_or_through_a_link_writes_nothing_and_names_the_directory(small_disk, tmp_path):
    """``legacy --out`` is written as a profile's outputs are: staged and renamed whole
    (a full disk left an empty DIR, and its error named no path), and a link refused."""
    seed = FIXTURES / "seeds" / "000_2b560fab08d05a69.txt"
    legacy = ["--quiet", "legacy", "--relay-ir", str(seed), "--report", str(seed), "--out"]
    subprocess.run(["dd", "if=/dev/zero", f"of={small_disk / 'filler'}", "bs=1k", "count=600"], capture_output=True)
    code, _, err = run_cli([*legacy, str(small_disk / "new")])
    assert code == 1 and broken_promise(code, err) is None, err
    assert "No space left on device" in err and str(small_disk / "new") in err
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no DIR, no staging left
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    code, _, err = run_cli([*legacy, str(tmp_path / "link"), "--force"])
    assert code == 1 and "is a symbolic link" in err and not any(target.iterdir())


def test_legacy_out_force_never_replaces_another_commands_outputs(tiny_out, tmp_path):
    """A profile's output directory holds only relaytrace's files, and --force replaces
    a directory whole: legacy --out DIR --force deleted the profile for one JSON file."""
    import shutil

    seed = FIXTURES / "seeds" / "000_2b560fab08d05a69.txt"
    run = tmp_path / "run"
    shutil.copytree(tiny_out, run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    _refused(["--quiet", "legacy", "--report", seed, "--out", run, "--force"], 1, "holds the outputs of another run")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def _umask():
    from relaytrace.model.jsonio import current_umask

    return current_umask()


def test_profiling_a_lineage_of_trace_without_a_target_and_an_out_two_levels_down(tmp_path):
    """``trace()`` around your own ``tvm.compile`` names no target: it is read from the
    build's kernels; an --out whose parents do not exist yet is made."""
    import numpy as np
    import tvm

    import relaytrace
    from tests.fixtures.relax_modules import TwoEntries

    with relaytrace.trace() as traced:
        executable = tvm.compile(TwoEntries, "llvm")
    assert '"kind":"llvm"' in traced.lineage.build.target
    prof = relaytrace.profile(
        executable, traced.lineage, [np.zeros((3, 64), "float32"), np.zeros((64, 64), "float32")], repeat=1
    )
    assert prof.kernel_us > 0
    code, _, err = run_cli(["--quiet", "profile", TINY, "--repeat", "1", "--out", tmp_path / "a" / "b" / "run"])
    assert code == 0 and (tmp_path / "a" / "b" / "run" / "lineage.json").is_file(), err


def test_an_onnx_input_is_found_by_its_onnx_name_and_by_the_name_tvm_gave_it(tmp_path):
    """The legacy torch exporter names the input ``input.1``; TVM renames it ``input_1``."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["input.1"], ["out"], name="relu")],
        "g",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4])],
    )
    model = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    for name in ("input.1", "input_1"):
        code, out, err = run_cli(
            ["--quiet", "profile", model, "--input-shape", f"{name}:2x4", "--repeat", "1", "--out", tmp_path / name]
        )
        assert code == 0, err
        assert json.loads((tmp_path / name / "profile.json").read_text())["inputs"][0][1] == [2, 4]
    _refused(
        ["profile", model, "--input-shape", "input-2:2x4", "--out", tmp_path / "x"],
        2,
        "has no input named input-2; its inputs are input.1",
    )
    _refused(["profile", model, "--dtype", "float16", "--out", tmp_path / "x"], 2, "give the shapes too")
    code, out, err = run_cli(
        ["--quiet", "estimate", model, "--input-shape", "input.1:2x4", "--device", "nvidia-a100-sxm4-80gb"]
    )
    assert code == 0 and "relu" in out, err  # estimate said "has no input 'input.1': its inputs are input_1"
    assert "Renaming name" not in err


def test_an_onnx_inputs_fixed_and_zero_dims_are_said_before_tvm_imports(tmp_path):
    """A shape that contradicts a fixed dim printed TVM's own error; a dim declared 0
    (an exporter's unknown) was called symbolic by TVM's name for it, and 0 in
    --input-shape was 'cannot parse'."""
    import onnx
    from onnx import TensorProto, helper

    def model(dims):
        graph = helper.make_graph(
            [helper.make_node("Relu", ["input.1"], ["out"], name="relu")],
            "g",
            [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, dims)],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, dims)],
        )
        path = tmp_path / f"{'x'.join(map(str, dims))}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return path

    _refused(
        ["profile", model([2, 4]), "--input-shape", "input.1:3x4", "--out", tmp_path / "x"],
        2,
        "input input.1 of ONNX model 2x4 fixes dim 0 at 2 (2x4); the shape given has 3: size only its symbolic "
        "dims, or export the model with that dim dynamic",
    )
    _refused(
        ["profile", model([0, 4]), "--out", tmp_path / "x"],
        2,
        "input input.1 of ONNX model 0x4 declares a dim of 0 (0x4: an unknown size to TVM, not an empty "
        "tensor): give its size, e.g. --input-shape input.1:1x4",
    )
    _refused(
        ["profile", model([0, 4]), "--input-shape", "input.1:0x4", "--out", tmp_path / "x"],
        2,
        "has a dim of 0: an empty tensor runs no kernel worth profiling",
    )
    code, _, err = run_cli(
        [
            "--quiet",
            "profile",
            model([0, 4]),
            "--input-shape",
            "input.1:3x4",
            "--repeat",
            "1",
            "--out",
            tmp_path / "zero",
        ]
    )
    assert code == 0 and json.loads((tmp_path / "zero" / "profile.json").read_text())["inputs"][0][1] == [3, 4], err


def test_pass_progress_counts_in_place_on_a_terminal_and_stays_out_of_a_log(tmp_path):
    import pty

    def stderr_of(to_terminal: bool, out):
        master = slave = None
        if to_terminal:
            master, slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "relaytrace.cli", "profile", TINY, "--repeat", "1", "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=slave if to_terminal else subprocess.PIPE,
            env=dict(os.environ, PYTHONWARNINGS="ignore"),
        )
        if not to_terminal:
            return proc.communicate(timeout=300)[1].decode()
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=300)
        os.close(master)
        return b"".join(chunks).decode()

    log = stderr_of(False, tmp_path / "log")
    assert "] building" in log and " passes " not in log and "\r" not in log.replace("\r\n", "\n")
    terminal = stderr_of(True, tmp_path / "tty")
    counted = [line for line in terminal.replace("\r\n", "\n").split("\n") if " passes (" in line]
    assert counted and all("\r" in line for line in counted)  # each count overwrites the last, in one line
    assert len(terminal.replace("\r\n", "\n").split("\n")) < 20


def test_render_without_out_writes_beside_the_outputs_under_its_own_names(tiny_out, tmp_path):
    """A newcomer's first ``render DIR`` right after ``profile``: no clash with
    layers.svg / report.html, and a later ``profile --force`` still takes the directory."""
    case = tmp_path / "run"
    subprocess.run(["cp", "-r", str(tiny_out), str(case)], check=True)
    before = {p.name: p.read_bytes() for p in case.iterdir()}
    for argv in (
        ["render", case],
        ["render", case, "--format", "html"],
        ["render", case, "--graph", "kernels", "--format", "dot"],
    ):
        code, out, err = run_cli(argv)
        assert code == 0, err
    assert {p.name for p in case.iterdir()} - set(before) == {
        "rendered-layers.svg",
        "rendered-report.html",
        "rendered-kernels.dot",
    }
    assert all((case / name).read_bytes() == data for name, data in before.items())
    code, _, err = run_cli(["--quiet", "profile", TINY, "--repeat", "1", "--out", case, "--force"])
    assert code == 0, err


def test_terminal_tables_wrap_long_cells():
    from relaytrace.render.table import format_table

    calls = " ".join(f"fused_conv2d_add_relu_{i}#0" for i in range(12))
    text = format_table(["layer", "kernel calls"], [["layer1", calls], ["fc", "fused_matmul#0"]])
    assert max(len(line) for line in text.splitlines()) <= 6 + 2 + 60
    assert " ".join(line[8:].strip() for line in text.splitlines()[2:-1]) == calls  # nothing lost


BOOL_CUMSUM = '''
import torch


class Counted(torch.nn.Module):
    """transformers' default causal-mask code in small: a cumsum over a bool tensor."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) + torch.cumsum(x > 0, dim=-1)


def make():
    torch.manual_seed(0)
    return Counted().eval(), torch.randn(2, 4)
'''


def test_tvms_own_codegen_failure_names_the_primfunc_its_layer_and_plain_tvm_compile(tmp_path):
    """LLVM code generation rejects the bool add of a bool cumsum. The line names the
    PrimFunc (found by building each alone), the layer whose op it holds (the line's:
    its ops are one layer, named after its last node, the ``+``) and the line of the
    model that made it, says the known limitation and its way out, and that
    plain tvm.compile fails the same way (run again to know)."""
    (tmp_path / "counted.py").write_text(BOOL_CUMSUM)
    line = 1 + BOOL_CUMSUM.splitlines().index("        return self.fc(x) + torch.cumsum(x > 0, dim=-1)")
    last = _refused(
        ["--quiet", "profile", f"{tmp_path / 'counted.py'}:make", "--out", tmp_path / "out"],
        1,
        "relaytrace: error: TVM's code generation failed on PrimFunc cumsum, which holds ops of layer "
        f"add (made at {tmp_path / 'counted.py'}:{line}): InternalError: Check failed: "
        "(t.MatchesCode(DLDataTypeCode::kDLFloat)); a known TVM limitation: LLVM cannot compile a cumsum "
        "over booleans; to build: cast them to int32 before the cumsum; ",
    )
    assert last.endswith("; plain tvm.compile fails the same way: TVM's own failure, not relaytrace's")
    assert "fc" not in last.split("failed on")[1].split(":")[0]  # the Linear's kernel builds
    assert not (tmp_path / "out").exists()


def test_an_op_left_unlowered_is_named_with_its_layer_its_line_and_the_way_out():
    """A UNet built NHWC: LegalizeOps leaves its ConvTranspose2d (layer ``up``) a Relax
    op, and the VM's code generation cannot emit it; TVM names neither op nor layer."""
    import inspect

    import relaytrace
    from relaytrace.build import NHWC
    from relaytrace.diagnosis import BuildFailedError
    from relaytrace.frontends.torch import from_torch

    from .fixtures import repros

    module, example = repros.unet()
    with pytest.raises(BuildFailedError) as caught:
        relaytrace.build(from_torch(module, (example,)), "llvm", convert_layout=NHWC)
    failure = caught.value.failure
    lines, first = inspect.getsourcelines(repros.SmallUNet.forward)
    made = f"{repros.__file__}:{first + next(i for i, ln in enumerate(lines) if 'self.up(' in ln)}"
    assert (failure.unlowered, failure.layers, failure.sources) == (("conv2d_transpose",), ("up",), (made,))
    assert str(caught.value).startswith(
        f"TVM's code generation failed on op conv2d_transpose, left unlowered, which holds ops of layer up (made at "
        f"{made}): InternalError: CodeGenVM cannot emit this Relax operator directly."
    )
    assert (
        "; a known TVM limitation: LegalizeOps does not lower conv2d_transpose in NHWC and leaves it to the VM; "
        "to build: leave the layout NCHW (build without --layout NHWC); plain tvm.compile fails the same way"
        in str(caught.value)
    )
    relaytrace.build(from_torch(module, (example,)), "llvm")  # the way out: NCHW builds


@pytest.mark.slow
def test_mistral_with_transformers_default_mask_is_told_its_mask_line_and_the_4d_float_mask():
    """transformers' own mask code (a bool cumsum) fails TVM's code generation; the line
    names modeling_mistral.py's line that called it and the 4-D float mask, which builds."""
    import relaytrace
    from relaytrace.diagnosis import BuildFailedError
    from relaytrace.frontends.torch import from_torch

    from .fixtures import hf_models

    module, ids = hf_models.mistral(default_mask=True)
    with pytest.raises(BuildFailedError) as caught:
        relaytrace.build(from_torch(module, (ids,)), "llvm")
    failure = caught.value.failure
    assert failure.primfuncs == ("cumsum",) and failure.limitation.op == "cumsum"
    (source,) = failure.sources
    assert source.startswith("transformers/models/mistral/modeling_mistral.py:")
    assert f"which holds ops of layer model (made at {source}): " in str(caught.value)
    assert "pass the model a 4-D float attention mask" in str(caught.value)
    module, ids = hf_models.mistral()  # given that mask, it builds
    _, lineage = relaytrace.build(from_torch(module, (ids,)), "llvm")
    assert lineage.coverage().verified_sites == lineage.coverage().call_sites


def test_tvms_own_pass_failure_names_the_pass_and_the_api_keeps_tvms_error():
    """A cumsum over a tensor of unknown shape: TVM's DispatchSortScan pass raises.
    The pass is named; TVM says not which op, and the line says so."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    import relaytrace
    from relaytrace.diagnosis import BuildFailedError, Plain

    @tvm.script.ir_module
    class OpenShape:
        @R.function
        def main(x: R.Tensor(ndim=2, dtype="float32")):
            with R.dataflow():
                y = R.cumsum(x, axis=1)
                R.output(y)
            return y

    with pytest.raises(BuildFailedError) as caught:
        relaytrace.build(OpenShape, "llvm")
    failure = caught.value.failure
    assert failure.step == "pass DispatchSortScan" and failure.plain == Plain.SAME
    assert isinstance(caught.value.__cause__, ValueError)
    assert str(caught.value) == (
        "TVM's pass DispatchSortScan failed (TVM does not say on which op): ValueError: "
        "non-symbolic shape is not supported for now; plain tvm.compile fails the same way: "
        "TVM's own failure, not relaytrace's (change the model around it, or report it to "
        "TVM)"
    )
    with pytest.raises(ValueError, match="non-symbolic shape"):  # plain tvm.compile: the same failure
        tvm.compile(OpenShape, "llvm", relax_pipeline=relax.get_default_pipeline(tvm.target.Target("llvm")))


def test_a_progress_callback_that_raises_is_said_as_its_own():
    """Issue 45: it was "relaytrace's tracing broke the build, please report it"."""
    import tvm

    import relaytrace
    from relaytrace.diagnosis import BuildFailedError
    from tests.fixtures.relax_modules import TwoEntries

    def impatient(count, name):
        if count == 3:
            raise ValueError("enough")

    with pytest.raises(
        RelaytraceError,
        match=r"^the progress callback .*impatient raised ValueError: enough "
        r"\(the build stopped after pass 3\)$",
    ) as caught:
        relaytrace.build(TwoEntries, "llvm", progress=impatient)
    assert not isinstance(caught.value, BuildFailedError) and isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(RelaytraceError, match="progress callback .*impatient raised ValueError"):
        with relaytrace.trace(progress=impatient):
            tvm.compile(TwoEntries, "llvm")


def _api_calls(lineage, profile):
    import relaytrace
    from relaytrace.analysis.report import make_report
    from tests.fixtures.relax_modules import TwoEntries

    kernel = lineage.call_sites[0].kernel
    return {
        r"build\(convert_layout=\) must be a mapping of op to layouts": lambda: relaytrace.build(
            TwoEntries, convert_layout="NHWC"
        ),
        r"build\(opt_level=\) must be a whole number from 0 to 4, not str '3'": lambda: relaytrace.build(
            TwoEntries, opt_level="3"
        ),
        "progress must be a function": lambda: relaytrace.build(TwoEntries, progress=5),
        "profile's executable must be the executable relaytrace.build returned, not NoneType": lambda: (
            relaytrace.profile(None, lineage, [])
        ),
        r"profile\(remote=\) must be relaytrace.RemoteDevice\(rpc='HOST:PORT'\), not str 'host:9'": lambda: (
            relaytrace.profile(None, lineage, [], remote="host:9")
        ),
        r"profile\(progress=\) must be a function": lambda: relaytrace.profile(None, lineage, [], progress=5),
        r"profile\(warmup=\) must be a whole number from 0, not -1": lambda: relaytrace.profile(
            None, lineage, [], warmup=-1
        ),
        "make_report's profile must be a Profile": lambda: make_report(lineage, None),
        "make_report's lineage must be a Lineage": lambda: make_report(profile, profile),
        "the kernel must be a kernel's name": lambda: lineage.origins_of(None),
        r"site\(call=\) must be a whole number from 0, not str '0'": lambda: lineage.site(kernel, call="0"),
        "the layer or origin must be": lambda: lineage.kernels_of(3),
        r"RemoteDevice\(rpc=\) must be 'HOST:PORT', not int 12345": lambda: relaytrace.RemoteDevice(rpc=12345),
        r"RemoteDevice\(wait_s=\) must be a number above 0 and at most 86400, not -1": lambda: relaytrace.RemoteDevice(
            rpc="host:9", wait_s=-1
        ),
    }


def test_the_api_refuses_arguments_of_the_wrong_type_or_range_saying_what_to_give(out_dir):
    """Issue 45: plain AttributeError and TypeError from deep inside, or nothing at all."""
    from relaytrace.model.lineage import Lineage
    from relaytrace.model.profile import Profile

    calls = _api_calls(Lineage.load(out_dir / "lineage.json"), Profile.load(out_dir / "profile.json"))
    for words, call in calls.items():
        with pytest.raises(UsageError, match=f"^{words}") as caught:
            call()
        assert "\n" not in str(caught.value), words
