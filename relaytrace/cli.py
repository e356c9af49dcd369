"""The ``relaytrace`` command."""

from __future__ import annotations

import argparse
import sys

from .errors import RelaytraceError


DEMO_MODELS = ("resnet50", "resnet18", "vgg16", "mobilenet_v2", "resnet_style")


def load_demo_model(name: str):
    """A built-in model, ready for build(): a zoo model imported from torch, or the
    small ResNet-style model written in Relax (no torch needed)."""
    if name == "resnet_style":
        from .relax_models import resnet_style

        return resnet_style(blocks=3)
    from . import zoo
    from .frontends.torch import from_torch

    module, example = zoo.get(name)
    return from_torch(module, (example,), name=name)


def _demo(args) -> int:
    from .build import build
    from .render.table import coverage_summary, kernel_layers_table

    print(f"importing {args.model} ...", file=sys.stderr)
    model = load_demo_model(args.model)
    print(f"building ({args.pipeline}, {args.layout}) for {args.target} ...", file=sys.stderr)
    layout = {"relax.nn.conv2d": ["NHWC", "OHWI"]} if args.layout == "NHWC" else None
    _, lineage = build(model, args.target, pipeline=args.pipeline, convert_layout=layout, model=args.model)
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
    demo.add_argument("--model", choices=DEMO_MODELS, default="resnet50", help="built-in model (default resnet50)")
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
