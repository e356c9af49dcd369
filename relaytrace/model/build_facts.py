"""What a build was: the facts a lineage is about, apart from what it says of them."""

from __future__ import annotations

from collections.abc import Callable

import attrs
from attrs import define, field

from .codec import apart_field
from .entry import KVCache, Param
from .memory import MemoryPlan
from .names import Name
from .verification import Member
from .work import KernelWork


@define(frozen=True)
class Offload:
    """A group of model ops a build handed to an external codegen
    (``FuseOpsByPattern(annotate_codegen=True)``, ``MergeCompositeFunctions``,
    ``RunCodegen``): the ``codegen`` that compiled it (``cublas``: TVM calls the function
    registered as ``relax.ext.cublas``) and the ``patterns`` of its composite functions
    (``cublas.matmul_transposed_bias_relu``), in order; ``params``: ``(shape, dtype)`` of
    its parameters and its result, as its library call takes them (outputs last), a
    symbolic dim by its name (``VMShapeLower`` later leaves the call's own types open)."""

    codegen: str
    patterns: tuple[str, ...] = ()
    params: tuple[tuple[tuple, str], ...] = ()


class PrecisionPolicy(Name):
    """``ToMixedPrecision``'s policy for an op (TVM's ``MixedPrecisionPolicyKind``):
    ``always`` converted to float16, ``follow`` in float16 when all its inputs are,
    ``never`` kept in float32."""

    ALWAYS = "always"
    FOLLOW = "follow"
    NEVER = "never"


@define(frozen=True)
class BuildOptions:
    """How the model was built, as options (not words): the ``pipeline`` it ran
    (``fused``, ``unfused``, a pipeline registered with TVM, a ``Pass``'s name, or what
    ``trace()`` was told: ``user`` by default), the MetaSchedule ``database`` its
    schedules came from ("" untuned), ``convert_layout`` (op -> desired layouts, empty
    when kept), ``mixed_precision`` (the dtype ``ToMixedPrecision`` accumulated in,
    None when not), ``fold_batch_norm`` and ``lift_params`` (``LiftTransformParams``
    first: what is computed from weights alone runs once, in ``X_transform_params``).
    ``label`` is the one line that shows them."""

    pipeline: str
    database: str = ""
    convert_layout: dict[str, tuple[str, ...]] = field(factory=dict)
    mixed_precision: str | None = None
    fold_batch_norm: bool = False
    lift_params: bool = False

    @property
    def label(self) -> str:
        """``fused+tuned(DB)+convert_layout(conv2d=NHWC/default)+mixed_precision(float16,
        accumulate float32)+fold_batch_norm+lift_params``, each part only when it applies."""
        parts = [f"{self.pipeline}+tuned({self.database})" if self.database else self.pipeline]
        if self.convert_layout:
            layouts = ", ".join(f"{op}={'/'.join(v)}" for op, v in self.convert_layout.items())
            parts.append(f"convert_layout({layouts})")
        if self.mixed_precision:
            parts.append(f"mixed_precision(float16, accumulate {self.mixed_precision})")
        if self.fold_batch_norm:
            parts.append("fold_batch_norm")
        if self.lift_params:
            parts.append("lift_params")
        return "+".join(parts)


def as_options(value: BuildOptions | str) -> BuildOptions:
    """``value`` as ``BuildOptions``: a bare string is a pipeline run with no option
    (what ``trace()`` and a hand-made ``BuildFacts`` give); anything else a TypeError."""
    if isinstance(value, str):
        return BuildOptions(value)
    if not isinstance(value, BuildOptions):
        raise TypeError(f"a build's options are BuildOptions or a pipeline's name, not {type(value).__name__}")
    return value


@define(frozen=True, eq=False)
class BuildFacts:
    """The build a lineage describes, as read from the build and its IR (not from the
    tracker's following of passes): the ``model``'s name, the ``target`` it was built
    for, the ``options`` it was built with (``BuildOptions``; a string is taken as the
    pipeline's name; ``pipeline`` says them in one line); ``entries``: each entry function and the ``(name,
    shape, dtype)`` of each tensor it takes as compiled, a tuple parameter's field by
    field (``packed_params[3]``; a symbolic dim by its name): ``model.entry.signature``
    of its ``params``, the one signature of an entry that runs, estimates, bundles and
    checks of a profile read; ``calls``:
    entry -> the Relax functions its run calls (directly or not: the VM runs them, they
    are no kernels); ``tuned``: the kernels whose schedule a MetaSchedule database gave;
    ``shape_consumers``: shape function -> the kernels whose allocations it sizes;
    ``kernel_members``: kernel -> the PrimFuncs it is made of (the IR's evidence for
    verification); ``accumulate``: the dtype conv and matmul accumulate in when the
    build computes in float16 (``ToMixedPrecision`` through ``relaytrace.build``), None
    when it computes as imported; ``policies``: op -> its ``ToMixedPrecision`` policy
    in the TVM that made that build ("always": converted to float16, "follow": in
    float16 when all its inputs are, "never": kept in float32; an op without one
    registered is "never", as the pass takes it), empty for a build without it;
    ``work``: kernel -> what its TIR computes per call (``model.work.KernelWork``: FLOPs
    as formulas over its symbolic dims); ``memory``: entry -> its memory plan as
    compiled (``model.memory.MemoryPlan``: blocks, their sizes and lifetimes, the
    tensors and weights); ``params``: entry -> its parameters as the VM runs them, after
    every pass (``model.entry.Param``: tensors, tuples of them field by field, objects
    such as a KV cache, shapes); ``kv_cache``: the KV cache the entries share and the
    PrimFuncs handed to it (None without one); ``offloads``: each group handed to an
    external codegen, by its name and by its symbol (the library call's name), as
    ``Offload``. Saved as the lineage's ``build``; the last three read as absent from a
    file written before them.

    A build may put its memory plans off (``memory_later``: what reads them, once, at
    the first read of ``memory``): only outputs need them, and reading them is a tenth
    of tracking. Equality, saving and pickling read them first; ``repr``,
    ``attrs.asdict`` and ``attrs.evolve`` see the fields as they are (``_memory`` empty
    until read; an evolve giving ``memory=`` gives ``memory_later=None`` too, or the
    promise still reads the build's)."""

    model: str
    target: str
    options: BuildOptions = field(converter=as_options)
    entries: dict[str, tuple[tuple[str, tuple, str], ...]] = field(factory=dict)
    calls: dict[str, tuple[str, ...]] = field(factory=dict)
    tuned: tuple[str, ...] = ()
    shape_consumers: dict[str, tuple[str, ...]] = field(factory=dict)
    kernel_members: dict[str, tuple[Member, ...]] = field(factory=dict)
    accumulate: str | None = None
    policies: dict[str, PrecisionPolicy] = field(factory=dict)
    work: dict[str, KernelWork] = field(factory=dict)
    _memory: dict[str, MemoryPlan] = field(factory=dict, alias="memory")  # read as ``memory``
    params: dict[str, tuple[Param, ...]] = field(factory=dict)
    kv_cache: KVCache | None = None
    offloads: dict[str, Offload] = field(factory=dict)
    # what reads the memory plans at the first ask, when the build put them off
    _memory_later: Callable[[], dict[str, MemoryPlan]] | None = apart_field(alias="memory_later")

    @property
    def memory(self) -> dict[str, MemoryPlan]:
        """Entry -> its memory plan (see the class), read now if the build put it off
        (what reads them reads once, for every thread and view asking)."""
        later = self._memory_later
        if later is not None:
            object.__setattr__(self, "_memory", later())
            object.__setattr__(self, "_memory_later", None)
        return self._memory

    def __eq__(self, other) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _compared(self) == _compared(other)

    __hash__ = None  # type: ignore[assignment]  # its dicts are not hashable either

    def __getstate__(self):
        """What pickles it: its fields, the memory plans read first if they were put off
        (what reads them holds TVM's module, which does not pickle)."""
        _ = self.memory
        return {f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if f.name != "_memory_later"}

    def __setstate__(self, state) -> None:
        state = {_RENAMED.get(name, name): value for name, value in state.items()}  # an older pickle's names
        for name, value in {"_memory_later": None, **state}.items():
            object.__setattr__(self, name, value)

    @property
    def pipeline(self) -> str:
        """The build's options in one line (``BuildOptions.label``), for people to read."""
        return self.options.label


def _compared(build: BuildFacts) -> tuple:
    """What two ``BuildFacts`` are compared by: every field by the name it is made with
    (``memory``: the plans as read)."""
    return tuple(getattr(build, f.alias or f.name) for f in attrs.fields(BuildFacts) if f.eq)


_RENAMED = {"memory": "_memory"}  # a field's name in a pickle made before it was read through a property
