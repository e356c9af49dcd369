"""The ``relaytrace`` command."""

from __future__ import annotations

import argparse
import sys

from .errors import RelaytraceError


def _demo(args) -> int:
    from .build import build
    from .relax_models import resnet_style
    from .render.table import coverage_summary, kernel_layers_table

    print(f"building a ResNet-style Relax model ({args.blocks} residual blocks), pipeline {args.pipeline} ...",
          file=sys.stderr)
    layout = {"relax.nn.conv2d": ["NHWC", "OHWI"]} if args.layout == "NHWC" else None
    _, lineage = build(resnet_style(blocks=args.blocks), args.target, pipeline=args.pipeline,
                       convert_layout=layout, model="resnet_style")
    print(kernel_layers_table(lineage))
    print()
    print(coverage_summary(lineage))
    if args.save:
        lineage.save(args.save, overwrite=args.force)
        print(f"lineage written to {args.save}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relaytrace", description="Map TVM kernels back to model layers.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build a built-in model and show which layers each kernel runs")
    demo.add_argument("--blocks", type=int, default=3, help="residual blocks (default 3)")
    demo.add_argument("--pipeline", choices=["fused", "unfused"], default="fused")
    demo.add_argument("--layout", choices=["NCHW", "NHWC"], default="NCHW")
    demo.add_argument("--target", default="llvm")
    demo.add_argument("--save", metavar="LINEAGE.json", help="also write the lineage as JSON")
    demo.add_argument("--force", action="store_true", help="overwrite existing output files")
    demo.set_defaults(run=_demo)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (RelaytraceError, FileExistsError, FileNotFoundError) as exc:
        print(f"relaytrace: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
