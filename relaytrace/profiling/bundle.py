"""A build and its lineage as a directory that profiles itself where it is copied
(``relaytrace bundle``): for a host with TVM's runtime libraries but no compiler, no
``tvm`` package and no relaytrace, that no RPC reaches.

The directory holds the exported library (``model.so``), the peak kernels for its
device (``peaks.so``: ``profiling.peaks.fixed_kernels``), the lineage (``lineage.json``,
its code beside it, ``code.json``),
the entry's inputs (``inputs/N.npy``, a tuple parameter's tensors each a file), TVM's
runtime libraries copied from the installed wheel (``lib/libtvm_runtime.so``, and
``lib/libtvm_runtime_cuda.so`` for a CUDA build), ``bundle.json`` (what the runner
needs: the entry, its inputs, the kernels and their call counts to check the library
against, each site's layers for NVTX ranges, a template of ``profile.json`` and how
the build was made), ``runner/`` (the package ``profiling/runner``, relaytrace's own
timing, which needs only ``tvm_ffi`` and numpy) and ``run.py`` (its ``run.py``, which runs
it). ``python DIR/run.py`` writes
``DIR/profile.json``; ``relaytrace report DIR`` reads it back with the lineage.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import attrs
import numpy as np

from ..errors import RelaytraceError, UsageError
from ..model.codec import decode, encode
from ..model.entry import default_context
from ..model.lineage import Lineage
from ..model.profile import Mode
from ..model.run_spec import RunSpec
from . import peaks, runner
from .manifest import Manifest, PeakKernels, SavedInput, Seal
from .runner import files as runner_files
from .serve import Serving, served_spec, takes_cache

LIBRARY = "model.so"
PEAKS = "peaks.so"  # the device's peak kernels (profiling.peaks.fixed_kernels), which run.py times there
MANIFEST = "bundle.json"
RUNNER = "run.py"


def device_of(target_text: str) -> str:
    """The runner's device for a build's target: ``cpu`` for an llvm (or c) build of this
    machine, ``cuda`` for a CUDA one; any other is refused in one line."""
    import tvm

    from .remote import target_name

    kind = tvm.target.Target(target_text).kind.name
    if kind in ("llvm", "c"):
        return "cpu"
    if kind == "cuda":
        return "cuda"
    raise UsageError(
        f"a bundle runs on a CPU (llvm) or an NVIDIA GPU (cuda), not {target_name(target_text)}: "
        "profile that build over RPC instead (docs/remote.md)"
    )


def write_bundle(  # noqa: PLR0913 - public API: keyword options, checked and then held in records
    executable,
    lineage: Lineage,
    inputs,
    out: Path,
    entry: str | None = None,
    run: RunSpec | None = None,
    say=None,
    serving: Serving | None = None,
) -> Path:
    """Write the bundle of ``executable`` (``lineage`` its build's) into the new
    directory ``out``, whole or not at all (written beside it, then renamed): see the
    module docstring. ``inputs``: the entry's, as ``profile`` takes them (checked
    against its parameters). ``run``: the build's record (``run.json`` of the outputs
    ``report`` writes). An entry that takes a KV cache is served by the runner as
    ``profile`` serves it (``serving``, default: ``profile``'s), its inputs made there;
    ``inputs`` are not taken."""
    from .vm import Measured, Runs, _kernel_library, _profile, check_inputs

    say = say or (lambda message: None)
    entry = lineage.entry(entry)
    served = None
    if takes_cache(lineage, entry):
        served = served_spec(lineage, entry, serving or Serving(context=default_context(lineage.build.params[entry])))
    view = lineage.for_entry(entry)
    arrays = check_inputs(lineage, list(inputs), entry) if served is None else []
    _kernel_library(executable, view)
    device = device_of(lineage.build.target)
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists: bundle into a new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.bundle-", dir=out.parent))
    try:
        say(f"exporting the library ({LIBRARY}) and the peak kernels ({PEAKS})")
        executable.export_library(str(staging / LIBRARY))
        peak_library, peak_kernels = peaks.peak_library(lineage.build.target)
        peak_library.export_library(str(staging / PEAKS))
        runtime = _copy_runtime(staging, device)
        lineage.save(staging / "lineage.json")
        if lineage.code is not None:  # the report made where it ran shows the code
            lineage.code.save(staging / "code.json")
        params = _save_inputs(staging, lineage, entry, arrays)
        template = _profile(lineage, entry, arrays, Runs(Mode.TIMELINE, 1), Measured([], {}, [], ""))
        manifest = Manifest(
            schema=runner_files.BUNDLE_SCHEMA,
            library=LIBRARY,
            runtime=tuple(runtime),
            device=device,
            entry=entry,
            inputs=params,
            kernels={k: len(sites) for k, sites in view.kernels.items()},
            library_calls=tuple(sorted(view.library_calls)),
            subfunctions=tuple(view.subfunctions),
            builtins=tuple(sorted({b.name for b in view.builtins})),
            layers=_site_layers(view),
            profile=template,
            run=portable(run) if run else None,
            tvm_ffi=metadata.version("apache-tvm-ffi"),
            peaks=decode(PeakKernels, {"library": PEAKS, **peak_kernels}, "the peak kernels"),
            serve=served,
        )
        package = Path(runner.__file__).parent
        (staging / "runner").mkdir()
        for source in sorted(package.glob("*.py")):
            shutil.copyfile(source, staging / "runner" / source.name)
        shutil.copyfile(package / "run.py", staging / RUNNER)
        manifest = attrs.evolve(manifest, files=_seals(staging))
        (staging / MANIFEST).write_text(json.dumps(encode(manifest), indent=1))
        os.chmod(staging, 0o755)
        os.rename(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _seals(root: Path) -> dict[str, Seal]:
    """Each file under ``root`` (``run.py`` and the rest; ``bundle.json`` is written
    after): ``{relative path: {bytes, sha256}}``, which ``run.py`` checks before it
    loads anything (``runner.files.check_seal``)."""
    return {
        path.relative_to(root).as_posix(): Seal(path.stat().st_size, runner_files.file_sha256(path))
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def portable(run: RunSpec) -> RunSpec:
    """``run`` without the paths of the machine that bundled it: the model's file and
    the tuning database by their names alone (``m.py:make``, not ``/home/me/m.py:make``)."""
    path, colon, factory = run.model.partition(":")
    return attrs.evolve(run, model=Path(path).name + colon + factory, db=Path(run.db).name if run.db else None)


def _copy_runtime(out: Path, device: str) -> list[str]:
    """TVM's runtime libraries from the installed wheel into ``out/lib``, and for CUDA
    the CUDA runtime the wheel's CUDA library was linked against (``libcudart.so.13``,
    which a host with another toolkit, or only PyTorch's, lacks): the paths, in the
    order they load. The driver's ``libcuda.so.1`` is the host's own."""
    import tvm

    source = Path(tvm.__file__).parent / "lib"
    files = [source / "libtvm_runtime.so"]
    if device == "cuda":
        files += [_cudart(), source / "libtvm_runtime_cuda.so"]
    (out / "lib").mkdir()
    for path in files:
        if not path.is_file():
            raise RelaytraceError(
                f"{path} is missing from the installed apache-tvm: reinstall it "
                "(pip install --force-reinstall apache-tvm)"
            )
        shutil.copyfile(path, out / "lib" / path.name)
    return [f"lib/{p.name}" for p in files]


CUDART = "libcudart.so.13"  # what apache-tvm 0.27's libtvm_runtime_cuda.so is linked against


def _cudart() -> Path:
    """The CUDA runtime library TVM's CUDA runtime needs: in ``CUDA_HOME``, a usual CUDA
    install, or pip's ``nvidia-cuda-runtime``; an error saying where it was looked for."""
    import sys

    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(map(str, Path("/usr/local").glob("cuda-*")))]
    roots += [str(Path(p) / "nvidia" / sub) for p in sys.path for sub in ("cu13", "cuda_runtime")]
    for root in filter(None, roots):
        for lib in ("lib", "lib64"):
            if (Path(root) / lib / CUDART).is_file():
                return Path(root) / lib / CUDART
    raise RelaytraceError(
        f"{CUDART} (the CUDA runtime TVM's CUDA library needs on the host) was not found in "
        "CUDA_HOME or /usr/local/cuda*: set CUDA_HOME to a CUDA 13 toolkit, or pip install "
        "nvidia-cuda-runtime"
    )


def _save_inputs(out: Path, lineage: Lineage, entry: str, arrays) -> tuple[SavedInput, ...]:
    """Each input as ``inputs/N.npy`` (a tuple parameter's tensors one file each):
    ``[{name, files, tuple}]`` in parameter order."""
    (out / "inputs").mkdir()
    params = lineage.build.params.get(entry)
    names = [p.name for p in params] if params else [name for name, _, _ in lineage.build.entries.get(entry, ())]
    saved, n = [], 0
    for i, value in enumerate(arrays):
        files = []
        for array in value if isinstance(value, list) else [value]:
            np.save(out / "inputs" / f"{n}.npy", np.asarray(array), allow_pickle=False)
            files.append(f"inputs/{n}.npy")
            n += 1
        saved.append(SavedInput(names[i] if i < len(names) else f"input{i}", tuple(files), isinstance(value, list)))
    return tuple(saved)


def mismatches(manifest: Manifest, lineage: Lineage):
    """What ``bundle.json`` (``manifest``) says that the bundle's lineage does not, each
    in words naming the field: the entry, the kernels and their call counts, each site's
    layers, a served step for an entry that takes no KV cache or the cache's kernels.
    ``relaytrace report`` reads a bundle's profile through both; ``run.py`` ran by the
    manifest alone."""
    entry = manifest.entry
    if entry not in lineage.build.entries:
        yield f"entry is {entry!r}, not an entry of the lineage ({', '.join(lineage.build.entries)})"
        return
    view = lineage.for_entry(entry)
    if manifest.kernels != {k: len(sites) for k, sites in view.kernels.items()}:
        yield f"kernels are not the kernels {entry} calls and their call counts"
    if manifest.layers != _site_layers(view):
        yield f"layers are not the layers of {entry}'s call sites"
    serve, cache = manifest.serve, lineage.build.kv_cache
    if serve and not takes_cache(lineage, entry):
        yield f"serve describes a served step, but {entry} takes no KV cache"
    elif serve and (cache is None or serve.cache.kernels != tuple(cache.kernels)):
        yield "serve.cache.kernels are not the KV cache's kernels of the lineage"


def _site_layers(lineage: Lineage) -> dict[str, str]:
    """``kernel#call`` -> the layers its ops come from (what an NVTX range is named)."""
    out = {}
    for site in lineage.call_sites:
        layers = dict.fromkeys(lineage.origins[o].layer for o in site.origin_ids if o in lineage.origins)
        out[site.key.in_entry] = ", ".join(layers)
    return out
