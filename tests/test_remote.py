"""Profiling over TVM RPC, with a real tracker and server on 127.0.0.1 (started here,
bounded in time, stopped after)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
TINY = f"{FIXTURES / 'tiny_model.py'}:make"


def run(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "relaytrace.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def devices():
    """A tracker with a server registered under key 'tiny', and a server of its own."""
    pytest.importorskip("tornado")
    from tvm.rpc import server, tracker

    pool = tracker.Tracker(host="127.0.0.1", port=9590, port_end=9690, silent=True)
    pooled = server.Server(host="127.0.0.1", port=9700, port_end=9800, key="tiny",
                           tracker_addr=("127.0.0.1", pool.port), silent=True)
    board = server.Server(host="127.0.0.1", port=9900, port_end=9990, silent=True)
    time.sleep(1.0)
    yield pool, board
    for process in (board, pooled, pool):
        process.terminate()


def _check_outputs(out):
    from relaytrace.jobs import load_pair
    from relaytrace.report import make_report

    lineage, prof = load_pair(out)
    report = make_report(lineage, prof)
    assert prof.mode == "isolated" and prof.remote and prof.e2e_us
    assert report.coverage.attributed_sites == report.coverage.call_sites
    assert sum(r.us for r in report.layers) == pytest.approx(prof.kernel_us, rel=1e-9)
    return prof


def test_profile_through_a_tracker_and_through_one_server(devices, tmp_path):
    pool, board = devices
    done = run("--quiet", "profile", TINY, "--tracker", f"127.0.0.1:{pool.port}", "--key", "tiny", "--repeat", "2",
               "--out", tmp_path / "tracker")
    assert done.returncode == 0, done.stderr[-2000:]
    prof = _check_outputs(tmp_path / "tracker")
    assert prof.remote == f"tracker 127.0.0.1:{pool.port} key tiny"
    assert f"on tracker 127.0.0.1:{pool.port}" in done.stdout
    done = run("--quiet", "profile", TINY, "--rpc", f"127.0.0.1:{board.port}", "--repeat", "2", "--out", tmp_path / "rpc")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _check_outputs(tmp_path / "rpc").remote == f"rpc 127.0.0.1:{board.port}"
    assert json.loads((tmp_path / "rpc" / "profile.json").read_text())["remote"] == f"rpc 127.0.0.1:{board.port}"


def test_remote_and_local_isolated_times_agree_per_site(devices, tmp_path):
    """Same machine, same executable: each site's remote median within 3x of the local
    one, plus 20 us (RPC timing of microsecond kernels is noisy on a shared 2-core VM)."""
    import relaytrace
    from relaytrace.frontends.loader import load
    from relaytrace.remote import RemoteDevice

    _, board = devices
    loaded = load(TINY)
    executable, lineage = relaytrace.build(loaded.model, "llvm")
    here = relaytrace.profile(executable, lineage, list(loaded.inputs), mode="isolated", repeat=5)
    there = relaytrace.profile(executable, lineage, list(loaded.inputs), repeat=5,
                               remote=RemoteDevice(rpc=f"127.0.0.1:{board.port}"))
    local, remote = here.mean_by_site(), there.mean_by_site()
    assert set(local) == set(remote)
    for site, us in local.items():
        assert remote[site] <= 3 * us + 20 and us <= 3 * remote[site] + 20, (site, us, remote[site])


def test_no_server_and_no_free_device_are_one_line_errors_and_nothing_is_written(devices, tmp_path):
    pool, _ = devices
    done = run("profile", TINY, "--rpc", "127.0.0.1:9", "--out", tmp_path / "a")
    assert done.returncode == 1 and "no RPC server answered at 127.0.0.1:9" in done.stderr
    from relaytrace.errors import RelaytraceError
    from relaytrace.remote import RemoteDevice

    with pytest.raises(RelaytraceError, match="had no free device with key 'nokey'"):
        RemoteDevice(tracker=f"127.0.0.1:{pool.port}", key="nokey", wait_s=2).connect()
    done = run("profile", TINY, "--tracker", "127.0.0.1:1", "--out", tmp_path / "b")
    assert done.returncode == 2 and "needs its key" in done.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_server_killed_mid_run_is_a_one_line_error_and_the_directory_is_not_created(tmp_path):
    from tvm.rpc import server

    board = server.Server(host="127.0.0.1", port=10000, port_end=10090, silent=True)
    proc = subprocess.Popen([sys.executable, "-m", "relaytrace.cli", "profile", TINY, "--rpc",
                             f"127.0.0.1:{board.port}", "--repeat", "50", "--out", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONWARNINGS="ignore"))
    deadline = time.time() + 300
    seen = ""
    while time.time() < deadline and "remote isolated" not in seen:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    board.terminate()  # the server goes away while sites are being timed
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("relaytrace: error:") and "remote run" in last
    assert not (tmp_path / "d").exists()
