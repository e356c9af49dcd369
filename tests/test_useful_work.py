"""Useful and executed work side by side, and each layer's own work, on a real build of
a UNet-style block: a ConvTranspose2d(32→16, k2, s2) used at two shapes, a padded conv
and a squeeze-excite of 1×1 convs whose fc2 TVM fuses with the sigmoid and the
multiply of another layer. Held to ``torch.utils.flop_counter.FlopCounterMode`` (which
leaves bias adds out: they are added by hand, one FLOP per output element) and to hand
counts of what TVM runs (a dense conv over the zero-dilated input), under both
attribution policies, and through the CSV, the terminal table and the CLI's
``--policy``."""

import csv
import io
import json

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import relaytrace
from relaytrace import cli
from relaytrace.analysis.report import make_report
from relaytrace.frontends.torch import from_torch
from relaytrace.jobs import write_outputs
from relaytrace.model.run_spec import RunSpec
from relaytrace.model.work import DILATION
from relaytrace.render.export import layers_csv
from relaytrace.render.table import roofline_summary

X, Z = (1, 32, 16, 16), (2, 32, 8, 12)  # the transposed conv's two inputs


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.conv = nn.Conv2d(16, 16, 3, padding=1)
        self.fc1 = nn.Conv2d(16, 4, 1)
        self.fc2 = nn.Conv2d(4, 16, 1)

    def forward(self, x, z):
        y = torch.relu(self.conv(self.up(x)))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return y * s, self.up(z)


@pytest.fixture(scope="module")
def run():
    """(lineage, profile, FlopCounterMode's FLOPs per module) of one fused build."""
    module = Block().eval()
    args = (torch.randn(*X), torch.randn(*Z))
    with FlopCounterMode(display=False) as counter:
        module(*args)
    torch_flops = {name.removeprefix("Block."): sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    executable, lineage = relaytrace.build(from_torch(module, args), "llvm", pipeline="fused")
    profile = relaytrace.profile(executable, lineage, [a.numpy() for a in args], repeat=1)
    return lineage, profile, torch_flops


@pytest.fixture(scope="module")
def reports(run):
    lineage, profile, _ = run
    return {policy: make_report(lineage, profile, policy) for policy in ("anchor", "split")}


def _bias(n, c, h, w):
    return n * c * h * w  # a bias add: one FLOP per output element, which FlopCounterMode leaves out


def test_useful_flops_are_torchs_and_executed_the_tirs_with_the_dilations_zeros_named(run, reports):
    _, _, torch_flops = run
    assert torch_flops["up"] == 2 * 32 * 16 * 2 * 2 * (1 * 16 * 16 + 2 * 8 * 12)  # 2·N·Cin·Cout·K²·Hin·Win, both calls
    sites = sorted(
        (r for r in reports["anchor"].roofline.sites.values() if "conv2d_transpose" in r.name), key=lambda r: r.flops
    )
    assert len(sites) == 2
    for roof, (n, _, h, w) in zip(sites, sorted((X, Z), key=lambda s: s[0] * s[2] * s[3])):
        assert roof.useful == 2 * n * 32 * 16 * 4 * h * w + _bias(n, 16, 2 * h, 2 * w)
        # what TVM runs: a dense 2×2 conv over the input dilated to 2h×2w, each output 32·4 multiply-adds
        assert roof.flops == 2 * n * 16 * (2 * h) * (2 * w) * 32 * 4 + _bias(n, 16, 2 * h, 2 * w)
        assert roof.excess == (DILATION,)
    for report in reports.values():  # the second call of ``up`` is layer up@1
        up, again = report.roofline.layer("up"), report.roofline.layer("up@1")
        assert up.useful + again.useful == torch_flops["up"] + _bias(1, 16, 32, 32) + _bias(2, 16, 16, 24)
        assert sorted((up.flops, again.flops)) == [r.flops for r in sites]
        for layer in (up, again):
            assert layer.executed_ratio == pytest.approx(3.95, abs=0.05) and layer.excess == (DILATION,)
            assert layer.model_gflops_s == pytest.approx(layer.useful / layer.us / 1e3)


def test_a_padded_conv_executes_what_it_asks(run, reports):
    _, _, torch_flops = run
    assert torch_flops["conv"] == 2 * 16 * 32 * 32 * 16 * 9
    for report in reports.values():
        conv = report.roofline.layer("conv")
        assert conv.useful == conv.flops == torch_flops["conv"] + _bias(1, 16, 32, 32)
        assert conv.excess == ()


def test_each_layer_has_its_own_flops_whatever_kernel_and_policy_bill_its_time(run, reports):
    lineage, _, torch_flops = run
    assert torch_flops["fc2"] == torch_flops["fc1"] == 128
    # fc2's conv shares a kernel with the sigmoid and the multiply of other layers
    kernel = next(k for k in lineage.kernels if "conv2d" in k and "sigmoid" in k and "multiply" in k)
    whole = next(r for r in reports["anchor"].roofline.kernels if r.name == kernel)
    assert whole.flops == 128 + 16 + 16 * 32 * 32  # the 16,528 the anchor policy billed to fc2 before
    for policy, report in reports.items():
        roof = report.roofline
        fc2, mul = roof.layer("fc2"), roof.layer("mul")
        assert fc2.flops == torch_flops["fc2"] + _bias(1, 16, 1, 1), policy  # not its kernel's 16,528
        assert mul.flops == 16 * 32 * 32, policy
        assert fc2.useful == fc2.flops and mul.useful == mul.flops
        # the line of the sigmoid is one layer: its mean (a sum of 32x32 and a divide per channel),
        # the relu of fc1's 4 outputs, and the sigmoid, all transcendental (16 exp), no FLOP
        line = roof.layer("sigmoid")
        assert line.flops == 16 * 32 * 32 + 16 + 4 and line.transcendentals == 16, policy
        assert sum(r.flops for r in roof.layers) == pytest.approx(sum(r.flops for r in roof.sites.values()))
        assert roof.policy == policy
    assert reports["anchor"].roofline.layer("mul").us == 0 and reports["split"].roofline.layer("mul").us > 0


def test_the_figures_and_the_policy_are_in_the_csv_the_table_and_the_cli(run, reports, tmp_path):
    rows = {r["layer"]: r for r in csv.DictReader(io.StringIO(layers_csv(reports["split"])))}
    assert float(rows["up"]["useful_flops"]) == reports["split"].roofline.layer("up").useful
    assert "dilat" in rows["up"]["excess"] and rows["conv"]["excess"] == ""
    assert {r["policy"] for r in rows.values()} == {"split"}
    text = roofline_summary(reports["anchor"].roofline, top=20)
    assert "anchor policy" in text and "useful GFLOP" in text
    assert "up executes 3.95x the FLOPs it asks (zeros from dilation" in text
    write_outputs(tmp_path / "out", reports["anchor"], RunSpec("block"))
    assert "billed to layers by the anchor policy" in (tmp_path / "out" / "layers.svg").read_text()
    assert "billed by the anchor policy" in (tmp_path / "out" / "explorer-time.json").read_text()
    assert json.loads((tmp_path / "out" / "trace.json").read_text())["otherData"]["policy"] == "anchor"
    html = tmp_path / "report.html"
    assert (
        cli.main(
            ["--quiet", "render", str(tmp_path / "out"), "--format", "html", "--policy", "split", "--out", str(html)]
        )
        == 0
    )
    page = html.read_text()
    assert "attribution policy split" in page and "split policy bills" in page and "useful_gflop" in page
    assert "4,210,688 FLOPs executed, 1,064,960 useful (3.95x: zeros from dilation" in page  # up's first call site
    parser = cli.build_parser()
    for command in (["profile", "m.py:f", "--out", "d"], ["estimate", "m.py:f"], ["render", "d"]):
        assert parser.parse_args([*command, "--policy", "split"]).policy == "split"
