"""Relay-era artifacts read offline; the three seed threads are the fixtures."""

import subprocess
import sys
from pathlib import Path

import pytest

from relaytrace.legacy import match as M
from relaytrace.legacy.autotvm import parse_log, parse_tasks, parse_workload_lists
from relaytrace.legacy.relay_ir import parse_relay_ir
from relaytrace.legacy.reports import parse_reports

SEEDS = Path(__file__).parent / "fixtures" / "seeds"
SEED0 = (SEEDS / "000_2b560fab08d05a69.txt").read_text()
SEED2 = (SEEDS / "002_4f47c9b26338e3b9.txt").read_text()
SEED3 = (SEEDS / "003_474c1638f4a184e4.txt").read_text()


def test_relay_ir_of_vgg16():
    graph = parse_relay_ir(SEED0, "seed000")
    assert graph.inputs == {"%data": ((1, 3, 224, 224), "float32")}
    convs = [op for op in graph.ops if op.op == "nn.conv2d"]
    assert len(convs) == 13 and len([op for op in graph.ops if op.op == "nn.dense"]) == 3
    assert convs[0].weights == ((64, 3, 3, 3),) and convs[0].out_shape == (1, 64, 224, 224)
    assert convs[0].attrs["padding"] == "[1, 1, 1, 1]"
    # a forum remark glued to line 50 is reported, and the op on it still read
    assert [i.line for i in graph.issues] == [50]
    assert any(op.var == "%8" for op in graph.ops)


def test_seed000_every_autotvm_task_matches_its_relay_ops():
    graph = parse_relay_ir(SEED0)
    tasks, issues = parse_tasks(SEED0)
    assert len(tasks) == 12 and [i.line for i in issues] == [139]  # a repeated listing
    for t in M.match_tasks(tasks, graph):
        assert t.chains, t.task
        for chain in t.chains:
            assert chain.data == t.task.workload.data and chain.weight == t.task.workload.weight
            assert chain.names[0] == ("conv2d" if "conv2d" in t.task.name else "dense")
    repeats = {t.task.index: len(t.chains) for t in M.match_tasks(tasks, graph)}
    assert repeats[3] == 3 and repeats[4] == 2  # 512x512 convs at 14x14 and at 28x28


def test_seed000_every_debug_runtime_row_is_matched_or_lists_candidates():
    graph = parse_relay_ir(SEED0)
    (report,), _ = parse_reports(SEED0)
    assert report.kind == "debug_runtime" and len(report.rows) == 34
    assert report.total_us == pytest.approx(sum(r.duration_us for r in report.rows), abs=0.01)
    matches = M.match_rows(report.rows, graph)
    for m in matches:
        layout_only = set(m.ops) == {"layout_transform"}
        assert m.matched or m.candidates or layout_only, m.row.name
    matched_chains = [c.index for m in matches for c in m.matched]
    assert len(matched_chains) == len(set(matched_chains))  # no op claimed twice
    by_name = {m.row.name: m for m in matches}
    # two calls of one function = the two identical 512->512 convs at 28x28, in order
    assert [c.label for c in by_name["fused_nn_contrib_conv2d_NCHWc_add_nn_relu_1"].matched] == [
        "%27 conv2d + %28 bias_add + %29 relu"
    ]
    assert [c.label for c in by_name["fused_nn_contrib_conv2d_NCHWc_add_nn_relu_11"].matched] == [
        "%30 conv2d + %31 bias_add + %32 relu"
    ]
    # same output shape, different weights, no weight shapes in this report: candidates
    ambiguous = by_name["fused_nn_contrib_conv2d_NCHWc_add_nn_relu_5"]
    assert not ambiguous.matched and len(ambiguous.candidates) == 2
    assert ambiguous.likely.label.startswith("%10 conv2d")  # the heavier op took longer


def test_seed002_layout_transform_share_of_each_report():
    reports, issues = parse_reports(SEED2)
    assert len(reports) == 6 and not issues
    # the Sum lines of the four graph-tuned reports count 84 kernel calls
    assert [sum(row.count for row in r.rows) for r in reports[:4]] == [84] * 4
    shares = []
    for r in reports:
        assert r.sum_us == pytest.approx(r.kernel_us, abs=0.1)  # no row lost or misread
        pure, mixed, total = M.layout_transform_share(r)
        assert total == r.total_us and pure <= mixed <= total
        shares.append(pure / total)
    assert all(s > 0 for s in shares[:4]) and shares[4] == shares[5] == 0.0  # [2] ran without graph tuning
    assert reports[1].rows[0].name.startswith("tvmgen_default_")
    assert reports[1].rows[0].function == reports[1].rows[0].name[len("tvmgen_default_") :]
    assert reports[0].rows[0].count == 5 and reports[0].rows[0].arg_shapes[0] == (1, 4, 14, 14, 64)


def test_seed003_log_records_match_listed_workloads_and_weighted_total():
    records, issues = parse_log(SEED3)
    assert len(records) == 20 and not issues
    lists, _ = parse_workload_lists(SEED3)
    resnet = lists["Resnet-50 workload"]
    assert len(resnet) == 20
    from relaytrace import zoo

    module, example = zoo.get("resnet50_v1")
    matches = M.match_log(records, resnet, M.repeats_in_torch(module, example))
    assert sorted(m.workload_index for m in matches) == list(range(20))
    assert sum(m.repeats for m in matches) == 53  # every conv layer of ResNet-50
    # the thread: "the total time cost of conv2d in Resnet50 is 1836.68 ms"
    assert M.weighted_total_s(matches) * 1e3 == pytest.approx(1836.68, abs=0.01)


def test_a_torch_conv_padded_by_name_counts_as_the_same_workload_as_its_numbers():
    """``padding="same"``/``"valid"`` were read letter by letter (``('s', 'a', 'm', 'e')``):
    such a conv matched no workload of a log."""
    import torch

    def model(padding_3x3, padding_1x1):
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=padding_3x3), torch.nn.Conv2d(8, 8, 1, padding=padding_1x1)
        )

    example = torch.zeros(1, 3, 16, 16)
    by_name = M.repeats_in_torch(model("same", "valid"), example)
    assert by_name == M.repeats_in_torch(model(1, 0), example)
    assert ("conv2d", (1, 3, 16, 16), (8, 3, 3, 3), (1, 1), (1, 1)) in by_name


def test_malformed_and_truncated_pastes_report_line_numbers_and_keep_what_parsed():
    lines = SEED2.splitlines()
    truncated = "\n".join(lines[:80] + ["fused_nn_softmax    not-a-number   0.00   1   cpu0"])
    reports, issues = parse_reports(truncated, "paste")
    assert len(reports) == 1 and len(reports[0].rows) == 25  # header at line 55, rows 56-80
    assert any(i.line == 81 and "unreadable number" in i.message for i in issues)
    assert any("no Total line" in i.message for i in issues)
    broken_log = "\n".join(SEED3.splitlines()[:27]) + '\n{"i": ["llvm", "topi_nn_conv2d", [[\n'
    records, issues = parse_log(broken_log, "log")
    assert len(records) == 2 and issues[0].line == 28
    ir = (
        "fn (%x: Tensor[(1, 8), float32]) {\n%0 = nn.relu(%x) /* ty=Tensor[(1, 8), float32] */;\n"
        "%1 = nn.dense(%0, meta["
    )
    graph = parse_relay_ir(ir, "ir")
    assert len(graph.ops) == 1 and graph.issues[0].line == 3 and str(graph.issues[0]).startswith("ir:3:")


@pytest.mark.parametrize(
    "kernel, ops",
    [
        ("fused_nn_contrib_conv2d_NCHWc_add_nn_relu_5", ("conv2d", "add", "relu")),
        (
            "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_multiply_add_nn_relu",
            ("conv2d", "add", "multiply", "add", "relu"),
        ),
        ("fused_layout_transform_nn_batch_flatten", ("layout_transform", "batch_flatten")),
        ("fused_nn_contrib_dense_pack_add", ("dense", "add")),
        ("fused_nn_global_avg_pool2d", ("global_avg_pool2d",)),
    ],
)
def test_fused_names_spell_their_ops(kernel, ops):
    assert M.fused_ops(kernel) == ops


def test_legacy_command_on_the_seeds(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "relaytrace.cli", "legacy", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
        )

    done = run(
        "--relay-ir",
        SEEDS / "000_2b560fab08d05a69.txt",
        "--report",
        SEEDS / "000_2b560fab08d05a69.txt",
        "--autotvm-tasks",
        SEEDS / "000_2b560fab08d05a69.txt",
        "--out",
        tmp_path / "o",
    )
    assert done.returncode == 0, done.stderr
    assert "AutoTVM tasks -> Relay ops" in done.stdout and "one of:" in done.stdout
    assert (tmp_path / "o" / "matches.json").is_file()
    done = run("--report", SEEDS / "002_4f47c9b26338e3b9.txt")
    assert done.returncode == 0 and done.stdout.count("layout_transform kernels") == 6
    done = run("--autotvm-log", SEEDS / "003_474c1638f4a184e4.txt", "--repeats-from", "resnet50_v1")
    assert done.returncode == 0 and "1836.69 ms" in done.stdout
    done = run()
    assert done.returncode == 2 and "at least one of" in done.stderr


def test_answers_never_come_from_a_row_or_record_read_wrong(tmp_path):
    """A misaligned row is named and not read (its name ran into its duration); a nested
    list in a log record is a named issue; an empty file and unknown repeats are said,
    not shown as nothing or 0.00 ms."""
    lines = SEED2.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("fused_") and "Duration" not in line)
    name = lines[row].split()[0]
    lines[row] = f"{name} 150.00" + lines[row][len(name) + 7 :]  # the name ran into the next column
    reports, issues = parse_reports("\n".join(lines), "paste")
    assert all(not r.name.startswith(name + " ") for report in reports for r in report.rows)
    assert any(i.line == row + 1 and "a name with a space" in i.message for i in issues)
    from relaytrace.legacy.common import normalise_quotes

    record = normalise_quotes(SEED3.splitlines()[26])  # the thread pasted it with typographic quotes
    nested = record.replace('["TENSOR", [1, ', '["TENSOR", [[1], ', 1)
    assert nested != record
    records, issues = parse_log(nested, "log")
    assert records == () and "a shape must be a flat list" in issues[0].message

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "relaytrace.cli", "legacy", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
        )

    (tmp_path / "empty.txt").write_text("\n  \n")
    done = run("--report", tmp_path / "empty.txt")
    assert done.returncode == 1 and done.stderr.strip().endswith("empty.txt is empty: paste the report into it")
    done = run("--autotvm-log", SEEDS / "003_474c1638f4a184e4.txt")
    assert done.returncode == 0 and "weighted by repeats: unknown, the repeats are not known" in done.stdout
    assert "0.00 ms (" not in done.stdout
