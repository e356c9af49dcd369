"""`relaytrace demo`: build, profile and report a built-in model (no model file needed)."""

from __future__ import annotations

from ..frontends.loader import DEMO_MODELS
from .base import Command
from .shared import add_build_options, profile_into_out


def add_arguments(p) -> None:
    """`relaytrace demo`'s arguments and options (docs/cli.md#demo)."""
    p.add_argument("--model", choices=DEMO_MODELS, default="resnet50")
    p.add_argument("--out", default="relaytrace-out", help="output DIR (default relaytrace-out)")
    p.add_argument("--force", action="store_true", help="write into an existing DIR")
    add_build_options(p)


def run(args) -> int:
    """`relaytrace demo`: build, profile and write every output for a built-in model
    (docs/cli.md)."""
    return profile_into_out(args, f"demo:{args.model}", args.model, f"demo:{args.model}", name=args.model)


COMMAND = Command("demo", "import, build, profile and report a built-in model", add_arguments, run)
