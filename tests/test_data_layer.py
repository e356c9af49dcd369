"""The data layer needs no TVM: a saved lineage and profile are loaded, queried,
verified, attributed and rendered in a process where ``import tvm`` fails."""

import os
import subprocess
import sys
import textwrap

BLOCK_TVM = textwrap.dedent("""
    import sys

    class NoTVM:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tvm", "tvm_ffi", "torch", "onnx"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, NoTVM())
""")

USE_SAVED = textwrap.dedent("""
    import sys
    from relaytrace.analysis import attribution as A
    from relaytrace.model.lineage import Lineage
    from relaytrace.model.profile import Profile
    from relaytrace.render import export, graphviz as G, html, table
    from relaytrace.render.chrome_trace import chrome_trace
    from relaytrace.analysis.report import make_report

    lineage, prof = Lineage.load(sys.argv[1]), Profile.load(sys.argv[2])
    assert lineage.verify() == lineage.verification and lineage.verification.ok
    site = lineage.kernels_of("layer1_conv1_conv")[-1]
    assert lineage.origins[site.anchor].layer == "layer1_conv1_conv"
    rows = A.by_layer(lineage, prof)
    assert abs(sum(r.us for r in rows) - prof.kernel_us) < 1e-6 * prof.kernel_us
    assert "verified against the compiled IR" in table.coverage_summary(lineage)
    report = make_report(lineage, prof)
    assert "verification" in export.kernels_csv(report)
    assert report.layers == rows
    assert "Verification" in html.html_report(report)
    assert G.layer_graph(lineage, report).source.startswith("digraph")
    assert chrome_trace(report)["traceEvents"]
    loaded = [m for m in sys.modules if m.split(".")[0] in ("tvm", "tvm_ffi", "torch", "onnx")]
    assert not loaded, loaded
    print("ok")
""")


def _run(code, *args, cwd=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-c", BLOCK_TVM + code, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def test_saved_lineage_and_profile_are_used_without_tvm(builds, input_data, tmp_path):
    import relaytrace

    executable, lineage = builds["nhwc"]
    prof = relaytrace.profile(executable, lineage, [input_data], repeat=1)
    paths = lineage.save(tmp_path / "lineage.json"), prof.save(tmp_path / "profile.json")
    done = _run(USE_SAVED, *paths)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_cli_reads_saved_outputs_without_tvm(builds, input_data, tmp_path):
    import relaytrace

    executable, lineage = builds["fused"]
    lineage.save(tmp_path / "lineage.json")
    relaytrace.profile(executable, lineage, [input_data], repeat=1).save(tmp_path / "profile.json")
    cli = "from relaytrace.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    done = _run(cli, "query", tmp_path / "lineage.json", "--layer", "layer1_conv1_conv")
    assert done.returncode == 0 and "layer1_conv1_conv runs in:" in done.stdout, done.stderr
    done = _run(cli, "render", tmp_path, "--format", "dot", "--out", tmp_path / "layers.dot")
    assert done.returncode == 0 and (tmp_path / "layers.dot").read_text().startswith("digraph"), done.stderr
    done = _run(cli, "query", "--help")
    assert done.returncode == 0 and "--kernel" in done.stdout


def test_the_pure_test_suite_passes_without_tvm():
    """``tests/pure`` (hand-built lineages and profiles, output directories, escaping,
    indexes) runs in a process where TVM, torch and ONNX cannot be imported, well
    inside a minute: a TVM upgrade cannot break what it checks."""
    import time
    from pathlib import Path

    start = time.monotonic()
    pure = "import pytest\nsys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/pure']))\n"
    done = _run(pure, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert time.monotonic() - start < 60
    done = _run("import relaytrace.tracking.reader\n")
    assert done.returncode != 0 and "tvm_ffi is blocked" in done.stderr  # the block is real
