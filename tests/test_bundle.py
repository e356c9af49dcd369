"""`relaytrace bundle`: a build profiled where only TVM's runtime, tvm_ffi and numpy are,
read back by `relaytrace report` the same as a local profile."""

import csv
import json
import os
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest

from relaytrace.model.run_spec import RunSpec

FIXTURES = Path(__file__).parent / "fixtures"
TINY = f"{FIXTURES / 'tiny_model.py'}:make"

# run.py with the packages a bundle host lacks made unimportable: what it needs is
# the standard library, numpy and tvm_ffi
BLOCKED_RUN = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tvm", "relaytrace", "torch"):
            raise ImportError(f"{name} is blocked: a bundle host has no such package")
sys.meta_path.insert(0, Block())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def cli(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "relaytrace.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=900
    )


def run_py(bundle: Path, *args, python=None):
    command = (
        [python, str(bundle / "run.py")] if python else [sys.executable, "-c", BLOCKED_RUN, str(bundle / "run.py")]
    )
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=bundle.parent)


def layer_times(out: Path) -> dict[str, float]:
    with open(out / "layers.csv", newline="") as f:
        return {row["layer"]: float(row["time_us"]) for row in csv.DictReader(f)}


def built(root: Path, model, example):
    """``model`` built once: profiled here (``root/local``, the reference) and bundled
    from the same build (``root/b``)."""
    import relaytrace
    from relaytrace.analysis.report import make_report
    from relaytrace.frontends.torch import from_torch
    from relaytrace.jobs import write_outputs
    from relaytrace.profiling.bundle import write_bundle

    executable, lineage = relaytrace.build(from_torch(model, (example,)), "llvm", pipeline="fused")
    local = relaytrace.profile(executable, lineage, [example.numpy()], repeat=5)
    write_outputs(root / "local", make_report(lineage, local), RunSpec(lineage.build.model))
    return write_bundle(executable, lineage, [example.numpy()], root / "b", run=RunSpec("m")), root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from .fixtures.tiny_model import make

    return built(tmp_path_factory.mktemp("tiny"), *make())


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    from relaytrace import zoo

    return built(tmp_path_factory.mktemp("resnet"), *zoo.get("resnet18", image=64))


def assert_like_local(bundle: Path, root: Path, out: Path):
    """The bundle's report has the local profile's layers, every one timed, and the
    layers that hold most of the time within a factor of their local times."""
    done = cli("report", bundle, "--out", out)
    assert done.returncode == 0, done.stderr
    assert "a bundle's run.py" in done.stdout
    local, there = layer_times(root / "local"), layer_times(out)
    assert set(there) == set(local)
    total = sum(local.values())
    big = [layer for layer, us in local.items() if us > 0.05 * total]
    assert big
    for layer in big:
        assert local[layer] / 4 < there[layer] < local[layer] * 4, (layer, local[layer], there[layer])


def test_run_py_needs_no_tvm_and_reads_back_as_a_local_profile(tiny):
    bundle, root = tiny
    assert {p.name for p in bundle.iterdir()} >= {"run.py", "model.so", "lineage.json", "bundle.json", "lib", "inputs"}
    assert (bundle / "lib" / "libtvm_runtime.so").is_file() and not (bundle / "lib" / "libtvm_runtime_cuda.so").exists()
    done = run_py(bundle, "--repeat", "5")
    assert done.returncode == 0, done.stderr
    assert "timeline run 5/5" in done.stderr and "capturing argument shapes" in done.stderr
    assert_like_local(bundle, root, root / "timeline")
    from relaytrace.model.profile import Profile

    profile = Profile.load(root / "timeline" / "profile.json")
    assert profile.mode == "timeline" and profile.runs == 5 and profile.args
    # the device's peaks, measured there by the bundle's peak kernels: this CPU's, as measured here
    from relaytrace.model.lineage import Lineage
    from relaytrace.profiling.peaks import measure

    assert "measuring the peak rates of cpu" in done.stderr and profile.peaks.source == "measured"
    assert "a bundle's run.py" in profile.peaks.device and "FMA chains" in profile.peaks.method
    here = measure(Lineage.load(bundle / "lineage.json").build.target)
    assert here.gflops["float32"] / 3 < profile.peaks.gflops["float32"] < here.gflops["float32"] * 3
    assert here.gbps / 3 < profile.peaks.gbps < here.gbps * 3
    assert "efficiency" in (root / "timeline" / "layers.csv").read_text().splitlines()[0]


def test_isolated_mode_times_each_kernel_site_alone(tiny):
    bundle, root = tiny
    done = run_py(bundle, "--mode", "isolated", "--repeat", "3", "--out", root / "isolated.json")
    assert done.returncode == 0, done.stderr
    assert "isolated 1/" in done.stderr
    from relaytrace.model.lineage import Lineage
    from relaytrace.model.profile import KERNEL, Profile

    profile = Profile.from_json(json.loads((root / "isolated.json").read_text()))
    lineage = Lineage.load(bundle / "lineage.json")
    assert profile.mode == "isolated" and {r.kind for r in profile.records} == {KERNEL}
    assert set(profile.by_site()) == {site.key for site in lineage.call_sites}


def test_a_library_of_another_build_is_refused(tiny, tmp_path):
    import shutil

    bundle, _ = tiny
    other = tmp_path / "other"
    shutil.copytree(bundle, other, ignore=shutil.ignore_patterns("profile.json"))
    manifest = json.loads((other / "bundle.json").read_text())
    kernel = next(iter(manifest["kernels"]))
    manifest["kernels"][kernel] += 1  # the lineage says it runs once more than the library does
    (other / "bundle.json").write_text(json.dumps(manifest))
    done = run_py(other)
    assert done.returncode == 1
    assert f"the lineage does not match this library: {kernel}" in done.stderr
    assert not (other / "profile.json").exists()


def _tampered(bundle: Path, where: Path, change, loaded: bool = False) -> subprocess.CompletedProcess:
    """run.py on a copy of ``bundle`` after ``change(copy, manifest)`` (its manifest
    written back after): one error line, or (``loaded``: found once the library is
    loaded) the loading line and the error."""
    import shutil

    copy = where / "copy"
    shutil.copytree(bundle, copy, symlinks=True, ignore=shutil.ignore_patterns("profile.json"))
    manifest = json.loads((copy / "bundle.json").read_text())
    change(copy, manifest)
    (copy / "bundle.json").write_text(json.dumps(manifest))
    done = run_py(copy, "--repeat", "1", "--no-peaks")
    assert not (copy / "profile.json").exists() and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 + loaded, done.stderr  # one line, no signal
    assert lines[-1].startswith("run.py: error: "), done.stderr
    return done


def test_a_tampered_bundle_is_refused_before_anything_of_it_is_loaded(tiny, tmp_path):
    """Every file the manifest names is sealed (size and sha256) and inside the bundle:
    a library named out of it, one whose constructor would run when loaded, a copy cut
    short (SIGBUS when mapped), a link out of the bundle, a damaged manifest, each one
    line from run.py before any load; the build machine's paths are not in the bundle."""
    import shutil

    bundle, _ = tiny
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert "/" not in manifest["run"]["model"].partition(":")[0] and str(Path.home()) not in json.dumps(manifest)
    marker = tmp_path / "constructor-ran"
    source = tmp_path / "evil.c"
    source.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void ran(void) "
        f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n'
    )
    evil = tmp_path / "evil.so"
    if shutil.which("gcc"):
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", evil, source], check=True)
    else:
        evil.write_bytes(b"\x7fELF")

    def library_out_of_the_bundle(copy, m):
        m["runtime"] = ["../../evil.so", *m["runtime"]]
        m["files"]["../../evil.so"] = {"bytes": evil.stat().st_size, "sha256": "0"}

    def library_not_sealed(copy, m):
        shutil.copy(evil, copy / "lib" / "evil.so")
        m["runtime"] = ["lib/evil.so", *m["runtime"]]

    def library_changed(copy, m):  # of the same size
        data = bytearray((copy / m["library"]).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (copy / m["library"]).write_bytes(data)

    def library_cut_short(copy, m):
        data = (copy / m["library"]).read_bytes()
        (copy / m["library"]).write_bytes(data[: len(data) // 2])

    def input_linked_out(copy, m):
        name = m["inputs"][0]["files"][0]
        outside = tmp_path / "outside.npy"
        shutil.copy(copy / name, outside)
        (copy / name).unlink()
        (copy / name).symlink_to(outside)

    def entry_missing(copy, m):
        del m["entry"]

    def runner_changed(copy, m):  # the package run.py imports: checked before it is imported
        (copy / "runner" / "timing.py").write_text(
            (copy / "runner" / "timing.py").read_text() + "\nraise SystemExit(3)\n"
        )

    def runner_file_added(copy, m):
        (copy / "runner" / "sitecustomize.py").write_text("raise SystemExit(3)\n")

    def runner_bytecode_added(copy, m):  # Python would import it in place of the sealed source
        (copy / "runner" / "__pycache__").mkdir()
        (copy / "runner" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0" * 16)

    said = {
        library_out_of_the_bundle: "a bundle's files are relative paths inside it",
        library_not_sealed: "not among its sealed files",
        library_changed: "is not the file bundled (its sha256 differs)",
        library_cut_short: "(a copy cut short?)",
        input_linked_out: "leads out of the bundle",
        entry_missing: "bundle.json's 'entry' is missing or no str",
        runner_changed: "runner/timing.py is not the file bundled (its sha256 differs)",
        runner_file_added: "runner/sitecustomize.py is not the runner bundled",
        runner_bytecode_added: "runner/__pycache__ is not the runner bundled",
    }
    for change, words in said.items():
        done = _tampered(bundle, tmp_path / change.__name__, change)
        assert words in done.stderr, (change.__name__, done.stderr)
    assert not marker.exists()  # no library of the tampered bundles was loaded


def test_run_py_refuses_an_out_it_cannot_write_before_the_run(tiny, tmp_path):
    bundle, _ = tiny
    done = run_py(bundle, "--out", tmp_path / "no" / "such" / "dir" / "p.json")
    assert done.returncode == 1 and "is no writable directory" in done.stderr
    assert "capturing" not in done.stderr  # said before the run, not after it


@pytest.mark.parametrize("mode, started", [("timeline", "timeline run "), ("isolated", "isolated 1/")])
def test_ctrl_c_ends_run_py_in_every_mode_and_writes_nothing(tiny, tmp_path, mode, started):
    """A Ctrl-C raised inside the VM's instrument came back as the runtime's error with
    no message (timeline), or was lost and the run went on to write its profile."""
    import signal

    bundle, _ = tiny
    out = tmp_path / "p.json"
    command = [sys.executable, "-c", BLOCKED_RUN, str(bundle / "run.py"), "--mode", mode, "--repeat", "1000000"]
    process = subprocess.Popen([*command, "--out", str(out)], stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if started in line:
            break
    process.send_signal(signal.SIGINT)
    rest = process.communicate(timeout=30)[1]  # within seconds: the evaluator is called in chunks
    assert process.returncode == 130 and rest.strip().splitlines()[-1] == "run.py: interrupted", rest[-2000:]
    assert not out.exists()


def test_report_of_a_bundle_without_its_code_says_the_code_section_is_missing(tiny, tmp_path):
    """It wrote a report without a Code section, without a word."""
    import shutil

    bundle, _ = tiny
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("profile.json", "report"))
    assert run_py(copy, "--repeat", "1", "--no-peaks").returncode == 0
    (copy / "code.json").unlink()
    done = cli("report", copy, "--out", tmp_path / "report")
    assert done.returncode == 0, done.stderr
    assert f"no code.json in {copy}: report.html has no Code section" in done.stdout


def test_report_refuses_a_bundle_whose_files_contradict_each_other(tiny, tmp_path):
    """Issue 54: report read a bundle whose bundle.json, lineage, code or profile were
    another build's (a CNN profile with a served step) without complaint; each is one
    line now, and no report directory is made."""
    import shutil

    bundle, _ = tiny
    ran = tmp_path / "ran"
    shutil.copytree(bundle, ran, ignore=shutil.ignore_patterns("profile.json", "report"))
    assert run_py(ran, "--repeat", "1", "--no-peaks").returncode == 0

    SERVE = {  # a served step whole, of a cache the lineage does not have
        "entry": "main",
        "params": [],
        "tokens": 1,
        "sequences": 1,
        "dims": {},
        "bound": [],
        "context": 8,
        "page_size": 16,
        "kv_bytes_per_token": 0,
        "cache": {"entry": "create", "builtin": "vm.builtin.create", "kernels": [], "append": None},
        "prefill": None,
    }

    def manifest(change):
        return lambda d: (d / "bundle.json").write_text(json.dumps(change(json.loads((d / "bundle.json").read_text()))))

    def json_edit(name, change):
        return lambda d: (d / name).write_text(json.dumps(change(json.loads((d / name).read_text()))))

    edits = {
        "lineage.json is not the file bundled": lambda d: (d / "lineage.json").write_text(
            (d / "lineage.json").read_text().replace('"main"', '"mair"', 1)  # another entry, as many bytes
        ),
        "code.json has": json_edit("code.json", lambda c: {**c, "problems": ["swapped"]}),
        "bundle.json's kernels are not the kernels main calls": manifest(
            lambda m: {**m, "kernels": {**m["kernels"], "fused_conv2d_add": 9}}
        ),
        "bundle.json's serve describes a served step, but main takes no KV cache": manifest(
            lambda m: {**m, "serve": SERVE}
        ),
        "bundle.json: serve has no field 'entry'": manifest(  # every field read checked, named where it fails
            lambda m: {**m, "serve": {k: v for k, v in SERVE.items() if k != "entry"}}
        ),
        "bundle.json: kernels['fused_conv2d_add'] must be an integer, not a string": manifest(
            lambda m: {**m, "kernels": {**m["kernels"], "fused_conv2d_add": "9"}}
        ),
        "bundle.json seals no files": manifest(lambda m: {k: v for k, v in m.items() if k != "files"}),
        "records a served step [1, 8], but main takes no KV cache": json_edit(
            "profile.json", lambda p: {**p, "step": [1, 8]}
        ),
    }
    for i, (words, edit) in enumerate(edits.items()):
        copy = tmp_path / f"c{i}"
        shutil.copytree(ran, copy)
        edit(copy)
        done = cli("report", copy)
        assert done.returncode == 1 and words in done.stderr and done.stderr.count("\n") == 1, (words, done.stderr)
        assert not (copy / "report").exists()


def test_nvtx_without_the_library_is_one_note(tiny, tmp_path):
    bundle, _ = tiny
    done = run_py(bundle, "--nvtx", "--repeat", "1", "--out", tmp_path / "p.json")
    from relaytrace.profiling.runner.gpu import Nvtx

    if Nvtx.find({}) is None:
        assert "--nvtx: no libnvToolsExt found" in done.stderr
    assert done.returncode == 0, done.stderr


def test_bundle_command_and_report_refusals(tmp_path):
    out = tmp_path / "tiny"
    done = cli("--quiet", "bundle", TINY, "--out", out)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "bundle.json").read_text())
    assert manifest["device"] == "cpu" and manifest["entry"] == "main"
    assert {"conv1", "conv2", "fc"} <= {layer for layers in manifest["layers"].values() for layer in layers.split(", ")}
    again = cli("bundle", TINY, "--out", out)
    assert again.returncode != 0 and "exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    early = cli("report", out)
    assert early.returncode != 0 and "run.py" in early.stderr and "profile.json" in early.stderr


LLAMA = """from relaytrace.zoo.mlc_llama import llama


def make():
    return llama(layers=2)
"""


def test_an_llms_decode_is_served_by_run_py_through_its_kv_cache(tmp_path):
    """The MLC-style Llama's decode, which takes a KV cache: run.py makes the cache with
    the build's own create entry and serves the step as `profile` does (no tvm there);
    the report bills the cache's attention kernels to the attention layers."""
    (tmp_path / "llm.py").write_text(LLAMA)
    out = tmp_path / "decode"
    done = cli("--quiet", "bundle", f"{tmp_path / 'llm.py'}:make", "--entry", "decode", "--context", "24", "--out", out)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "bundle.json").read_text())
    assert manifest["serve"]["context"] == 24 and manifest["serve"]["cache"]["entry"] == "create_paged_kv_cache"
    ran = run_py(out, "--repeat", "2", "--no-peaks")
    assert ran.returncode == 0, ran.stderr
    assert "serving decode: 1 token(s) after a context of 24" in ran.stderr
    done = cli("report", out, "--out", tmp_path / "report")
    assert done.returncode == 0, done.stderr
    assert "time per output token at context 24" in done.stdout
    from relaytrace.model.profile import CACHE, Profile

    profile = Profile.load(tmp_path / "report" / "profile.json")
    assert profile.step == (1, 24) and len(profile.kv_pages) == 2  # one page tensor per block
    attention = [r for r in profile.records if r.kind == CACHE and r.name == "batch_decode_paged_kv_cpu"]
    assert len(attention) == 2 * 2 and all(r.duration_us > 0 for r in attention)  # 2 blocks x 2 runs
    with open(tmp_path / "report" / "kernels.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["name"] == "batch_decode_paged_kv_cpu")
    assert row["layers"].split(" ") == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    done = _tampered(out, tmp_path, lambda copy, m: m["serve"].update(page_size=0))  # was SIGFPE
    assert "the served step's page_size is 0" in done.stderr
    (tmp_path / "k").mkdir()
    done = _tampered(
        out, tmp_path / "k", lambda copy, m: m["serve"]["cache"]["kernels"].pop(), loaded=True
    )  # ran as "?"
    assert "takes more kernels than the" in done.stderr and "the lineage is not of this executable" in done.stderr
    refused = run_py(out, "--mode", "isolated")
    assert refused.returncode == 1 and "takes a KV cache: it is profiled in timeline mode" in refused.stderr


@pytest.mark.slow
def test_a_resnet_bundle_reads_back_as_its_local_profile(resnet):
    bundle, root = resnet
    done = run_py(bundle, "--repeat", "5")
    assert done.returncode == 0, done.stderr
    assert_like_local(bundle, root, root / "timeline")


@pytest.mark.slow
def test_run_py_in_a_virtualenv_of_tvm_ffi_and_numpy_alone(resnet, tmp_path):
    """The bundle host as the issue states it: a fresh virtualenv holding tvm_ffi and
    numpy (installed from wheels pip builds here, no index), no tvm, relaytrace or torch."""
    bundle, root = resnet
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wanted = [f"apache-tvm-ffi=={metadata.version('apache-tvm-ffi')}", f"numpy=={metadata.version('numpy')}"]
    subprocess.run([*pip, "wheel", "-w", wheels, *wanted], check=True, timeout=600)
    env = tmp_path / "env"
    venv.create(env, with_pip=True)
    python = str(env / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, *wanted], check=True, timeout=600
    )
    for absent in ("tvm", "relaytrace", "torch"):
        probe = subprocess.run([python, "-c", f"import {absent}"], capture_output=True, cwd=tmp_path)
        assert probe.returncode != 0, absent
    done = run_py(bundle, "--repeat", "5", "--out", root / "venv-profile.json", python=python)
    assert done.returncode == 0, done.stderr
    copy = root / "venv-bundle"
    import shutil

    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("profile.json", "report"))
    shutil.copyfile(root / "venv-profile.json", copy / "profile.json")
    assert_like_local(copy, root, root / "venv-report")


@pytest.mark.slow
def test_a_cuda_bundle_carries_its_runtime_and_says_what_a_host_lacks(tmp_path):
    out = tmp_path / "cuda"
    done = cli("--quiet", "bundle", TINY, "--target", '{"kind": "cuda", "arch": "sm_90"}', "--out", out)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "bundle.json").read_text())
    assert manifest["device"] == "cuda"
    assert [Path(p).name for p in manifest["runtime"]] == [
        "libtvm_runtime.so",
        "libcudart.so.13",
        "libtvm_runtime_cuda.so",
    ]
    assert all((out / p).is_file() for p in manifest["runtime"])
    # the GPU's own peak kernels, compiled for sm_90, for run.py to time there
    assert (out / "peaks.so").is_file() and manifest["peaks"]["built_for"] == "cuda sm_90"
    kernels = {k["name"]: k for k in manifest["peaks"]["kernels"]}
    assert set(kernels) == {"fma_float32_x1", "fma_float16_x2", "copy"}
    assert kernels["fma_float32_x1"]["flops"] == 2 * 1056 * 256 * 8 * 16384
    assert kernels["copy"]["bytes"] == 2 * 2**28  # 256 MiB read and written
    ran = run_py(out)
    if ran.returncode != 0:  # no NVIDIA driver here: one line naming what is missing
        assert ran.stderr.strip().splitlines()[-1].startswith("run.py: error: cannot load lib/libtvm_runtime_cuda.so")
