"""Profiling over TVM RPC, with a real tracker and server on 127.0.0.1 (started here,
bounded in time, stopped after)."""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

from tests.fuzz import stopped_server_cases

FIXTURES = Path(__file__).parent / "fixtures"
TINY = f"{FIXTURES / 'tiny_model.py'}:make"


def run(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "relaytrace.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture(scope="module")
def devices():
    """A tracker with a server registered under key 'tiny', and a server of its own."""
    pytest.importorskip("tornado")
    from tvm.rpc import server, tracker

    pool = tracker.Tracker(host="127.0.0.1", port=9590, port_end=9690, silent=True)
    pooled = server.Server(
        host="127.0.0.1", port=9700, port_end=9800, key="tiny", tracker_addr=("127.0.0.1", pool.port), silent=True
    )
    board = server.Server(host="127.0.0.1", port=9900, port_end=9990, silent=True)
    time.sleep(1.0)
    yield pool, board
    for process in (board, pooled, pool):
        process.terminate()


def _check_outputs(out):
    from relaytrace.analysis.report import make_report
    from relaytrace.jobs import load_pair

    lineage, prof = load_pair(out)
    report = make_report(lineage, prof)
    assert prof.mode == "isolated" and prof.remote and prof.e2e_us
    assert report.coverage.attributed_sites == report.coverage.call_sites
    assert sum(r.us for r in report.layers) == pytest.approx(prof.kernel_us, rel=1e-9)
    return prof


def test_profile_through_a_tracker_and_through_one_server(devices, tmp_path):
    pool, board = devices
    done = run(
        "--quiet",
        "profile",
        TINY,
        "--tracker",
        f"127.0.0.1:{pool.port}",
        "--key",
        "tiny",
        "--repeat",
        "2",
        "--out",
        tmp_path / "tracker",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    prof = _check_outputs(tmp_path / "tracker")
    assert prof.remote == f"tracker 127.0.0.1:{pool.port} key tiny"
    assert f"on tracker 127.0.0.1:{pool.port}" in done.stdout
    done = run(
        "--quiet", "profile", TINY, "--rpc", f"127.0.0.1:{board.port}", "--repeat", "2", "--out", tmp_path / "rpc"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert _check_outputs(tmp_path / "rpc").remote == f"rpc 127.0.0.1:{board.port}"
    assert json.loads((tmp_path / "rpc" / "profile.json").read_text())["remote"] == f"rpc 127.0.0.1:{board.port}"


def test_remote_and_local_isolated_times_agree_per_site(devices, tmp_path, monkeypatch):
    """Same machine, same executable: each site's remote median within 3x of the local
    one, plus 20 us (RPC timing of microsecond kernels is noisy on a shared 2-core VM);
    the peaks measured over RPC, by the same kernels, within 3x of those measured here
    (float32 and bandwidth)."""
    import relaytrace
    from relaytrace.frontends.loader import load
    from relaytrace.profiling.remote import RemoteDevice

    _, board = devices
    loaded = load(TINY)
    executable, lineage = relaytrace.build(loaded.model, "llvm")
    here = relaytrace.profile(executable, lineage, list(loaded.inputs), mode="isolated", repeat=5)
    there = relaytrace.profile(
        executable, lineage, list(loaded.inputs), repeat=5, remote=RemoteDevice(rpc=f"127.0.0.1:{board.port}")
    )
    local, remote = here.by_site(), there.by_site()
    assert set(local) == set(remote)
    for site, us in local.items():
        assert remote[site] <= 3 * us + 20 and us <= 3 * remote[site] + 20, (site, us, remote[site])
    assert there.peaks.source == "measured" and there.peaks.device == f"rpc 127.0.0.1:{board.port}"
    # float32 and bandwidth alike; float16 is emulated by this CPU target, through conversion routines the
    # exported library takes from its linker's runtime, not the in-process JIT's: measured 3.3x slower there
    assert here.peaks.gflops["float32"] / 3 <= there.peaks.gflops["float32"] <= 3 * here.peaks.gflops["float32"]
    assert here.peaks.gbps / 3 <= there.peaks.gbps <= 3 * here.peaks.gbps
    assert there.peaks.gflops["float16"] > 0


def test_no_server_and_no_free_device_are_one_line_errors_and_nothing_is_written(devices, tmp_path):
    pool, _ = devices
    done = run("profile", TINY, "--rpc", "127.0.0.1:9", "--out", tmp_path / "a")
    assert done.returncode == 1 and "no RPC server answered at 127.0.0.1:9" in done.stderr
    from relaytrace.errors import RelaytraceError
    from relaytrace.profiling.remote import RemoteDevice

    with pytest.raises(RelaytraceError, match="had no free device with key 'nokey'"):
        RemoteDevice(tracker=f"127.0.0.1:{pool.port}", key="nokey", wait_s=2).connect()
    done = run("profile", TINY, "--tracker", "127.0.0.1:1", "--out", tmp_path / "b")
    assert done.returncode == 2 and "needs its key" in done.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_server_killed_mid_run_is_a_one_line_error_and_the_directory_is_not_created(tmp_path):
    from tvm.rpc import server

    board = server.Server(host="127.0.0.1", port=10000, port_end=10090, silent=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relaytrace.cli",
            "profile",
            TINY,
            "--rpc",
            f"127.0.0.1:{board.port}",
            "--repeat",
            "20000",
            "--out",
            str(tmp_path / "d"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    deadline = time.time() + 300
    seen = ""
    while time.time() < deadline and "remote isolated" not in seen:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    board.terminate()  # the server goes away while sites are being timed (20000 runs of each: seconds)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("relaytrace: error:") and "remote run" in last
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
@pytest.mark.serial  # a limit in seconds: another test's load beside it ran it 48 s of 45
@pytest.mark.parametrize("step", ["uploading the executable", "remote isolated 2/", "remote end-to-end timing"])
def test_a_server_that_stops_answering_ends_the_run_within_its_limit_and_ctrl_c_ends_it_at_once(tmp_path, step):
    """A server stopped (SIGSTOP, not killed) mid-run, at upload, while sites are timed,
    at the end-to-end timing: the run ends within its limits (--kernel-timeout for a
    kernel, 30 s for any other step) with one line naming the step and the device (or,
    stopped after the last figure was in, with them); Ctrl-C ends a run waiting on it
    within seconds; no output directory either way (tests/fuzz.stopped_server_cases;
    tools/fuzz.py tries every step)."""
    ((case, problem),) = stopped_server_cases(tmp_path, TINY, steps=[step], delays=[0.0])
    assert problem is None, (case, problem)


def test_a_port_beyond_65535_is_refused_not_wrapped():
    done = run("profile", TINY, "--rpc", "127.0.0.1:99999", "--out", "never")
    assert done.returncode == 2 and "a port is 1 to 65535, not 99999" in done.stderr.strip().splitlines()[-1]


AARCH64 = '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'


def test_a_build_for_another_cpu_is_linked_by_its_cross_compiler_and_refused_by_a_device_of_this_cpu(devices, tmp_path):
    """The rk3399 path: built for aarch64 here, linked by aarch64-linux-gnu-g++, each site
    given arguments of the shapes its IR names (it cannot run here to capture them). This
    machine's x86 server is the wrong device for it: a one-line error that says so."""
    import relaytrace
    from relaytrace.frontends.loader import load
    from relaytrace.profiling.remote import exporter

    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("aarch64-linux-gnu-g++ is not installed (make test installs g++-aarch64-linux-gnu)")
    _, board = devices
    loaded = load(TINY)
    executable, lineage = relaytrace.build(loaded.model, AARCH64)
    assert lineage.coverage().complete
    library = tmp_path / "model.so"
    executable.export_library(str(library), fcompile=exporter(lineage.build.target, None))
    assert subprocess.run(["file", library], capture_output=True, text=True).stdout.count("aarch64") == 1
    with pytest.raises(relaytrace.RelaytraceError, match="does not run on this machine: profile it on its device"):
        relaytrace.profile(executable, lineage, list(loaded.inputs))
    done = run("profile", TINY, "--target", AARCH64, "--rpc", f"127.0.0.1:{board.port}", "--out", tmp_path / "d")
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "cannot load this build" in last and "is --target the device's own target?" in last
    assert not (tmp_path / "d").exists()


def test_a_build_that_cannot_run_here_is_timed_on_arguments_from_its_ir(devices, monkeypatch):
    """The path of a cross-compiled or GPU build, on this machine's server: the
    decision "cannot run here" taken as given, every site timed on arguments made from
    the shapes its IR names, and said so; per site within 3x + 20 us of local timing."""
    import relaytrace
    import relaytrace.profiling.remote
    from relaytrace.frontends.loader import load

    _, board = devices
    loaded = load(TINY)
    executable, lineage = relaytrace.build(loaded.model, "llvm")
    here = relaytrace.profile(executable, lineage, list(loaded.inputs), mode="isolated", repeat=5)
    monkeypatch.setattr(relaytrace.profiling.remote, "local_device", lambda target: None)
    there = relaytrace.profile(
        executable,
        lineage,
        list(loaded.inputs),
        repeat=5,
        remote=relaytrace.RemoteDevice(rpc=f"127.0.0.1:{board.port}"),
    )
    assert there.arguments == "the compiled IR" and "arguments of the compiled IR's shapes" in there.summary()
    assert there.args == {
        label: attrs.evolve(info, addresses=()) for label, info in here.args.items() if label in there.args
    }  # a remote run records no addresses
    local, remote = here.by_site(), there.by_site()
    assert set(local) == set(remote) and len(remote) == len(lineage.call_sites)
    for site, us in local.items():
        assert remote[site] <= 3 * us + 20 and us <= 3 * remote[site] + 20, (site, us, remote[site])


def test_site_arguments_from_the_ir_are_the_shapes_a_run_gives_each_site():
    """What a build that cannot run here is timed on: per site, the same shapes and
    dtypes as one real run captures (zoo ResNet-18, a static model)."""
    import relaytrace
    from relaytrace import zoo
    from relaytrace.frontends.torch import from_torch
    from relaytrace.profiling.vm import site_arguments

    module, example = zoo.get("resnet18", image=64)
    executable, lineage = relaytrace.build(from_torch(module, (example,), name="resnet18"), "llvm")
    captured = relaytrace.profile(executable, lineage, [example.numpy()], repeat=1)
    from_ir, arrays = site_arguments(lineage)
    assert len(from_ir) == len(lineage.call_sites) > 20
    assert {site: attrs.evolve(captured.arg(site), addresses=()) for site in from_ir} == from_ir
    assert all(
        a.shape == shape for (_, _, xs), info in zip(arrays, from_ir.values()) for a, shape in zip(xs, info.shapes)
    )


@pytest.mark.slow
def test_missing_cross_compiler_and_kernel_timeout_are_one_line_errors(devices, tmp_path):
    _, board = devices
    done = run(
        "profile",
        TINY,
        "--target",
        AARCH64,
        "--rpc",
        f"127.0.0.1:{board.port}",
        "--cc",
        "no-such-g++",
        "--out",
        tmp_path / "a",
    )
    assert done.returncode == 1 and "linked with no-such-g++, which is not installed" in done.stderr
    assert "building" not in done.stderr  # said before the build
    done = run(
        "profile", TINY, "--rpc", f"127.0.0.1:{board.port}", "--kernel-timeout", "0.000001", "--out", tmp_path / "b"
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "did not finish on rpc" in done.stderr.strip().splitlines()[-1]
    done = run("profile", TINY, "--kernel-timeout", "5", "--out", tmp_path / "c")
    assert done.returncode == 2 and "apply to a remote device" in done.stderr
    assert not any((tmp_path / d).exists() for d in "abc")


def _a_task_whose_every_candidate_failed_is_counted(db, copy):
    """MetaSchedule records a candidate that failed to build or run with a run time of
    1e10 s and keeps the default schedule: ``failed_tasks`` counts such workloads."""
    import re
    import shutil

    from relaytrace.profiling.tasks import failed_tasks

    shutil.copytree(db, copy)
    records = (copy / "database_tuning_record.json").read_text().splitlines()
    assert failed_tasks(copy) == 0 and records
    # the record's run_secs: the list of numbers just before its target's JSON object
    records[0] = re.sub(r"\[[-+.0-9e]+\](?=,\{)", "[1e10]", records[0])
    (copy / "database_tuning_record.json").write_text("\n".join(records) + "\n")
    assert failed_tasks(copy) == 1


@pytest.mark.slow
def test_tuning_measures_on_the_trackers_devices_and_the_tuned_build_is_profiled_there(devices, tmp_path):
    """``tasks --tune --tracker``: MetaSchedule's RPC runner measures every candidate on
    the pool's device (minutes on 2 cores); ``profile --db --tracker`` times the tuned
    build there, with the plain build's lineage and its tuned kernels marked. (Tuning
    here, without --tracker, differs only in MetaSchedule's runner: not run again.)"""
    from relaytrace import Lineage

    pool, _ = devices
    tracker = ["--tracker", f"127.0.0.1:{pool.port}", "--key", "tiny"]
    db = tmp_path / "db"
    done = run("tasks", TINY, "--tune", "1", "--db", db, *tracker)
    assert done.returncode == 2 and "needs their core count in the target" in done.stderr
    target = ["--target", '{"kind": "llvm", "num-cores": 2}']
    done = run("tasks", TINY, "--tune", "1", "--db", db, *tracker, *target, "--out", tmp_path / "tuned.json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"measured on tracker 127.0.0.1:{pool.port} key tiny" in done.stderr
    assert "kernel call sites attributed" in done.stdout and "INCOMPLETE" not in done.stdout
    assert "kept the default schedule" not in done.stdout  # every task has a candidate that built and ran
    printed = done.stdout.strip().splitlines()[-2 if "tuned lineage written" in done.stdout else -1].strip()
    assert printed.startswith("relaytrace profile ") and f"--tracker 127.0.0.1:{pool.port} --key tiny" in printed
    assert "--target" in printed and "num-cores" in printed
    for name, extra in (("plain", []), ("tuned", ["--db", db, *tracker, *target])):
        done = run("--quiet", "profile", TINY, "--repeat", "2", "--out", tmp_path / name, *extra)
        assert done.returncode == 0, done.stderr[-2000:]
    assert _check_outputs(tmp_path / "tuned").remote == f"tracker 127.0.0.1:{pool.port} key tiny"
    plain, tuned = (Lineage.load(tmp_path / name / "lineage.json") for name in ("plain", "tuned"))
    assert tuned.coverage().complete and tuned.build.tuned and not plain.build.tuned
    assert {s.label: s.origin_ids for s in tuned.call_sites} == {s.label: s.origin_ids for s in plain.call_sites}
    with open(tmp_path / "tuned" / "kernels.csv") as f:
        marked = {row["name"] for row in csv.DictReader(f) if row["tuned"] == "yes"}
    assert marked == set(tuned.build.tuned)
    _a_task_whose_every_candidate_failed_is_counted(db, tmp_path / "failed")
    done = run("profile", TINY, "--db", tmp_path / "nowhere", "--out", tmp_path / "x")
    assert done.returncode == 1 and "no MetaSchedule database in" in done.stderr
    done = run("tasks", TINY, "--tune", "1", "--db", tmp_path / "x", "--rpc", "127.0.0.1:1")
    assert done.returncode == 2 and "unrecognized arguments: --rpc" in done.stderr
    done = run("tasks", TINY, *tracker)
    assert done.returncode == 2 and "give --tune N --db DIR with it" in done.stderr
