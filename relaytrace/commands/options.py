"""The profiling options of a command as records: what ``shared.profile_built`` and
``shared.serving`` take, made once from the parsed command line (``from_args``) or by a
command itself (``advise --verify``, ``sweep``), so that nothing past the command line
reads an argparse Namespace. How a model is built is ``model.run_spec.RunSpec``."""

from __future__ import annotations

from attrs import field, frozen

from ..model.peaks import Peaks
from ..model.profile import Mode


@frozen
class Served:
    """How an entry that takes a KV cache is served: ``--tokens`` per sequence per step,
    ``--context`` tokens before it, ``--batch`` sequences, ``--bind`` DIM=VALUE (None
    and empty: the defaults)."""

    tokens: int | None = None
    context: int | None = None
    batch: int | None = None
    bind: tuple[tuple[str, int], ...] = field(default=(), converter=tuple)

    @classmethod
    def from_args(cls, args) -> Served:
        """The options of a command that takes all four (``add_serving_options``)."""
        return cls(args.tokens, args.context, args.batch, args.bind or ())

    @property
    def given(self) -> bool:
        """Whether any of them was given."""
        return self.tokens is not None or self.context is not None or self.batch is not None or bool(self.bind)


@frozen
class Timing:
    """How a built model is profiled: its ``entry`` (None: main, or the only one), the
    ``mode`` (None: the default where it runs), ``repeat`` runs, the device's ``peaks``
    (None: measured where it runs), how a KV-cache entry is ``served``, and whether
    each fused kernel is timed ``inside`` too (``profiling.inside``)."""

    entry: str | None = None
    mode: Mode | None = None
    repeat: int = 3
    peaks: Peaks | None = None
    served: Served = Served()
    inside: bool = False
