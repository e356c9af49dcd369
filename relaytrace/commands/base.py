"""The interface every ``relaytrace`` command implements (``relaytrace.commands``
lists them)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from attrs import frozen


@frozen
class Command:
    """One subcommand: ``relaytrace NAME`` (``help`` in ``--help``'s list);
    ``add_arguments(parser)`` declares its arguments, each checked as it is parsed;
    ``run(args)`` does it and returns the exit code."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
