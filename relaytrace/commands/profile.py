"""`relaytrace profile`: build a user's model traced, profile it here or on a remote device, write every output."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .base import Command
from .shared import absolute_factory, add_build_options, add_model_options, at_least, profile_into_out


def add_arguments(p) -> None:
    """`relaytrace profile`'s arguments and options (docs/cli.md#profile)."""
    add_model_options(p)
    add_build_options(p)
    p.add_argument("--out", required=True, help="output DIR")
    p.add_argument("--force", action="store_true", help="write into an existing DIR")
    p.add_argument(
        "--collapse",
        type=at_least(0),
        metavar="N",
        help="group layers.svg by module prefix depth N (0: every op; default: every op up to 400, else grouped)",
    )
    p.add_argument("--db", metavar="DIR", help="apply the MetaSchedule database `tasks --tune` wrote in DIR")


def run(args) -> int:
    """`relaytrace profile MODEL`: build a user's model traced, profile it here or on a
    remote device, write every output."""
    from ..jobs import parse_shape

    shapes = [parse_shape(s) for s in args.input_shape]
    if args.dtype and not shapes:
        raise UsageError(
            "--dtype is the dtype of inputs given with --input-shape NAME:DIMS (without their own); "
            "give the shapes too, e.g. --input-shape x:1x3x224x224 --dtype float16"
        )
    spec = str(Path(args.model).resolve()) if args.model.endswith(".onnx") else absolute_factory(args.model)
    return profile_into_out(args, args.model, args.model, spec, collapse=args.collapse, shapes=shapes, dtype=args.dtype)


COMMAND = Command("profile", "build and profile a model file; write every output", add_arguments, run)
