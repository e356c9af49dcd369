"""The ``relaytrace`` commands, each one module behind one small interface.

A ``Command`` is a name, a line of help, a function that adds its arguments to an
``argparse`` parser and a function that runs it (the parsed arguments in, the exit
code out: 0 done; a failure is raised, and ``cli.main`` makes it one line and an exit
code). ``COMMANDS`` lists them in the order ``relaytrace --help`` shows; the parser is
built from it and nothing else. Adding a command is one module defining ``COMMAND``
and one line here (docs/architecture.md shows one). A command's module imports TVM,
torch and the renderers inside ``run``, so building the parser (every command's) stays
fast and ``query`` never loads TVM.

Modules:

- ``advise``: ``relaytrace advise``
- ``base``: the interface every ``relaytrace`` command implements
  (``relaytrace.commands`` lists them)
- ``bundle``: ``relaytrace bundle``
- ``compare``: ``relaytrace compare``
- ``demo``: ``relaytrace demo``
- ``diff``: ``relaytrace diff``
- ``estimate``: ``relaytrace estimate``
- ``legacy``: ``relaytrace legacy``
- ``memory``: ``relaytrace memory``
- ``options``: the profiling options as records, made once from the command line
- ``peaks``: ``relaytrace peaks``
- ``profile``: ``relaytrace profile``
- ``query``: ``relaytrace query``
- ``render``: ``relaytrace render``
- ``report``: ``relaytrace report``
- ``shared``: what several commands share
- ``sweep``: ``relaytrace sweep``
- ``tasks``: ``relaytrace tasks``
"""

from __future__ import annotations

from . import (
    advise,
    bundle,
    compare,
    demo,
    diff,
    estimate,
    legacy,
    memory,
    peaks,
    profile,
    query,
    render,
    report,
    sweep,
    tasks,
)
from .base import Command

COMMANDS: tuple[Command, ...] = (
    demo.COMMAND,
    profile.COMMAND,
    bundle.COMMAND,
    report.COMMAND,
    compare.COMMAND,
    estimate.COMMAND,
    sweep.COMMAND,
    peaks.COMMAND,
    render.COMMAND,
    query.COMMAND,
    diff.COMMAND,
    memory.COMMAND,
    advise.COMMAND,
    tasks.COMMAND,
    legacy.COMMAND,
)
