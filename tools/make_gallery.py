"""Regenerate docs/gallery/: real pictures of zoo models (run: python tools/make_gallery.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import relaytrace
from relaytrace.frontends.loader import load
from relaytrace.render import graphviz as G
from relaytrace.render.html import html_report
from relaytrace.report import make_report

OUT = Path(__file__).resolve().parent.parent / "docs" / "gallery"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, layout in (("resnet50", None), ("resnet50", {"relax.nn.conv2d": ["NHWC", "OHWI"]}),
                         ("mobilenet_v2", None)):
        tag = name + ("_nhwc" if layout else "")
        executable, lineage = relaytrace.build(load(f"demo:{name}").model, "llvm", convert_layout=layout, model=tag)
        x = np.random.default_rng(0).standard_normal(lineage.inputs[0][1]).astype("float32")
        prof = relaytrace.profile(executable, lineage, [x], repeat=1)
        report = make_report(lineage, prof)
        G.render(G.layer_graph(lineage, report, collapse=2), OUT / f"{tag}_layers_depth2.png", overwrite=True)
        G.render(G.kernel_graph(lineage, report), OUT / f"{tag}_kernels.svg", overwrite=True)
        G.render(G.layer_graph(lineage, report), OUT / f"{tag}_layers.svg", overwrite=True)
        (OUT / f"{tag}_report.html").write_text(html_report(report))
        print(tag, prof.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
