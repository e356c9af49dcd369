"""``bundle.json`` and the serve spec as records: the contract between relaytrace, which
writes a bundle, and its ``run.py`` (``runner``), which reads the same JSON with the
standard library alone where only TVM's runtime is installed.

``Manifest`` is what ``bundle.write_bundle`` writes and ``relaytrace report`` reads
back checked (``read_manifest``: every field of its type, a ``FileFormatError``
naming the field otherwise); ``ServeSpec`` is how an entry that takes a KV cache is
served (``serve.served_spec``), in the manifest and given to ``runner.kvcache.Server`` as its
JSON. docs/schemas/bundle.schema.json is made from these records.
"""

from __future__ import annotations

import builtins

from attrs import field, frozen

from ..errors import FileFormatError
from ..model.codec import decode
from ..model.entry import ParamKind
from ..model.jsonio import read_record
from ..model.profile import Profile
from ..model.run_spec import RunSpec
from .runner.files import BUNDLE_SCHEMA

Shape = tuple[int | str, ...]  # a dim by its value, or a symbolic one by its name


@frozen
class ServedParam:
    """One parameter of a served entry: a tensor, a tuple of them (``tensors`` field by
    field: each ``[shape, dtype]``) or the KV cache (``object``)."""

    name: str
    kind: ParamKind
    tensors: tuple[tuple[Shape, str], ...]


@frozen
class CacheSpec:
    """The KV cache: the entry that makes it, the builtin that entry calls, the kernels
    that builtin is handed (in its order) and the one that appends (None: not known)."""

    entry: str
    builtin: str
    kernels: tuple[str, ...]
    append: str | None


@frozen
class PrefillSpec:
    """The entry that fills a sequence's context before a step, its parameters, and the
    ``[tokens, dims]`` of each chunk it is called with."""

    entry: str
    params: tuple[ServedParam, ...]
    chunks: tuple[tuple[int, dict[str, int]], ...]


@frozen
class ServeSpec:
    """One served step of ``entry``: ``tokens`` of each of ``sequences`` after a
    ``context`` of tokens each, the value of each symbolic dim (``dims``) and where the
    ones the step does not give came from (``bound``: ``[dim, value, where]``), the
    cache's pages and the bytes a token slot holds (0: not known), the cache and the
    prefill that fills the context (None without one)."""

    entry: str
    params: tuple[ServedParam, ...]
    tokens: int
    sequences: int
    dims: dict[str, int]
    bound: tuple[tuple[str, int, str], ...]
    context: int
    page_size: int
    kv_bytes_per_token: int
    cache: CacheSpec
    prefill: PrefillSpec | None


@frozen
class SavedInput:
    """One input of the entry, saved as ``.npy`` files (a tuple parameter's tensors one
    file each, ``tuple`` true)."""

    name: str
    files: builtins.tuple[str, ...]
    tuple: bool


@frozen
class PeakKernel:
    """A peak kernel of ``peaks.so``: its name, dtype, buffer shape, FLOPs and bytes per call."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    flops: float
    bytes: float


@frozen
class PeakKernels:
    """The device's peak kernels: the library they are in, each kernel, what they were
    built for and how the rates are measured."""

    library: str
    kernels: tuple[PeakKernel, ...]
    built_for: str
    method: str


@frozen
class Seal:
    """A file of the bundle as it was written: its size and sha256."""

    bytes: int
    sha256: str


@frozen
class Manifest:
    """``bundle.json``: the library and runtime to load on ``device``, the ``entry`` and
    its saved inputs, each kernel's calls per run, the library calls, Relax
    subfunctions and builtins, each call site's layers (NVTX ranges' names), the profile
    the runner fills in, the build's ``run`` record, the tvm_ffi it was made with, the
    peak kernels, how to serve an entry that takes a KV cache, and each file's seal."""

    schema: str
    library: str
    runtime: tuple[str, ...]
    device: str
    entry: str
    inputs: tuple[SavedInput, ...]
    kernels: dict[str, int]
    library_calls: tuple[str, ...]
    subfunctions: tuple[str, ...]
    builtins: tuple[str, ...]
    layers: dict[str, str]
    profile: Profile
    run: RunSpec | None
    tvm_ffi: str
    peaks: PeakKernels
    serve: ServeSpec | None = None
    files: dict[str, Seal] = field(factory=dict)


def read_manifest(path) -> Manifest:
    """The manifest at ``path``, every field checked; one of another runner's schema is
    refused saying to bundle again."""
    return read_record(path, "bundle", _manifest_of)


def _manifest_of(data, where: str) -> Manifest:
    """The manifest a bundle.json's JSON value holds (``where`` names the file)."""
    if not isinstance(data, dict) or data.get("schema") != BUNDLE_SCHEMA:
        raise FileFormatError(
            f"{where} is not a relaytrace bundle of this runner ({BUNDLE_SCHEMA}): bundle the model again"
        )
    return decode(Manifest, data, where)
