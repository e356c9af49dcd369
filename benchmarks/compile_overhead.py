"""Traced / plain compile time, measured side by side (interleaved runs, median).

Each run builds the model plainly and traced, back to back (the order alternating),
and takes the ratio of the two; the ratio printed is the median of these per-run
ratios, with their interquartile range. Pairing the two builds of a run cancels the
drift of this machine's speed over the minute a model takes (on a shared 2-core VM
it moves the plain build's median by several percent between invocations), which a
ratio of the two sides' medians does not. Also printed: bindings, the plain and
traced medians, the extra time, and the same ratio of the process's CPU time (both
threads: what tracking costs when no core is free, and less moved by other
processes on a shared machine than the wall time). Each build starts after a full garbage
collection, so that one side does not pay for garbage the other left. With
``--beside``, another process builds deep_chain(2000) plainly, over and over, for as long
as the measurement runs: a second build running beside it (a build farm running one
build per core), so that the follow-ahead thread finds no free core either.
Targets: ratio <= 1.05 on the 32-block decoder (``zoo.nn_decoder``, prefill and
decode, through ``from_nn``), <= 1.10 on deep_chain(2000), <= 1.03 on resnet_style and
zoo resnet50, <= 1.10 on the MLC-style Llama (``zoo.mlc_llama``, 2 and 32 blocks) as
MLC-LLM builds it: weights packed in one tuple, or bundled into one by
``BundleModelParams``, and ``LiftTransformParams`` before TVM's pipeline (both passes
on packed weights make TVM's own FuseTIR fail, so the packed build lifts alone).

For the decoder and the 32-block Llama it then prints what a user of its lineage waits for: the size of
``lineage.json``, its load time, ``kernels_of`` over every layer and ``origins_of``
over every kernel (mean per call), and ``relaytrace query DIR --kernel K`` as a
command (median of 5), relaytrace's modules compiled to bytecode first, as a pip
install or ``make setup`` leaves them.

``--only scale``: the ratio as the model grows (``scale``): deep_chain of 1,000 /
2,000 / 4,000 bindings and the decoder of 8 / 32 / 80 blocks, each series' spread of
CPU ratios, each side's CPU time per 1,000 bindings, and the decoder lineage's size
and load time per block.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import tvm
from tvm import relax

import relaytrace
from relaytrace.zoo.relax_models import deep_chain, resnet_style


def _resnet50():
    from relaytrace import zoo
    from relaytrace.frontends.torch import from_torch

    module, example = zoo.get("resnet50")
    return from_torch(module, (example,), name="resnet50").mod


def _decoder(layers: int = 32):
    from relaytrace.frontends.nn import from_nn
    from relaytrace.zoo.nn_decoder import decoder

    return from_nn(*decoder(layers=layers), name=f"decoder{layers}")


def _llama(layers: int, param_mode: str):
    from relaytrace.frontends.nn import from_nn
    from relaytrace.zoo.mlc_llama import llama

    return from_nn(*llama(layers=layers, param_mode=param_mode), name=f"mlc_llama{layers}")


LLAMA_BUILDS = (  # (label, param_mode, the passes run before TVM's pipeline)
    ("packed", "packed", ()),
    ("packed+lift", "packed", ("LiftTransformParams",)),
    ("plain+bundle+lift", "plain", ("BundleModelParams", "LiftTransformParams")),
)


class Measured(NamedTuple):
    """One model's paired builds: the median wall and CPU ratios, a lineage of its
    traced build, and the median CPU seconds of each side."""

    wall: float
    lineage: object
    cpu: float
    plain_cpu: float
    traced_cpu: float


def _bindings(mod) -> int:
    from relaytrace.tracking import ir

    return sum(len(ir.bindings(f)) for f in ir.model_functions(ir.function_map(mod)).values())


def _pipeline(target, passes: tuple[str, ...]):
    """TVM's default pipeline, after ``passes`` (names in ``relax.transform``) when given."""
    base = relax.get_default_pipeline(target)
    if not passes:
        return base
    return tvm.transform.Sequential([*(getattr(relax.transform, p)() for p in passes), base])


def _plain(mod, target, passes=()):
    with tvm.transform.PassContext(opt_level=3):
        tvm.compile(mod, target, relax_pipeline=_pipeline(target, passes))


def _traced(model, target, passes=()):
    return relaytrace.build(model, target, pipeline=_pipeline(target, passes) if passes else "fused")[1]


def measure(name, model, runs: int, passes: tuple[str, ...] = ()):
    """The ratio for ``model`` (an IRModule, or a frontend's ImportedModel: traced with
    its layer names, built plainly from its module), ``passes`` run before TVM's
    pipeline on both sides."""
    target = tvm.target.Target("llvm")
    mod = getattr(model, "mod", model)
    _plain(mod, target, passes)  # warm caches on both sides
    lineage = _traced(model, target, passes)
    plain, traced, plain_cpu, traced_cpu = [], [], [], []
    for i in range(runs):
        for traced_side in (False, True) if i % 2 == 0 else (True, False):
            gc.collect()
            start, cpu = time.perf_counter(), time.process_time()
            _traced(model, target, passes) if traced_side else _plain(mod, target, passes)
            (traced if traced_side else plain).append(time.perf_counter() - start)
            (traced_cpu if traced_side else plain_cpu).append(time.process_time() - cpu)
    p, t = statistics.median(plain), statistics.median(traced)
    ratio, low, high = _ratio(plain, traced)
    cpu_ratio, cpu_low, cpu_high = _ratio(plain_cpu, traced_cpu)
    print(
        f"{name:<24} bindings={_bindings(mod):>5}  plain={p:6.3f}s  traced={t:6.3f}s  "
        f"ratio={ratio:.3f} (IQR {low:.3f}-{high:.3f})  extra={(t - p) * 1e3:4.0f}ms  "
        f"cpu ratio={cpu_ratio:.3f} (IQR {cpu_low:.3f}-{cpu_high:.3f})",
        flush=True,
    )
    return Measured(ratio, lineage, cpu_ratio, statistics.median(plain_cpu), statistics.median(traced_cpu))


def _ratio(plain: list[float], traced: list[float]) -> tuple[float, float, float]:
    """The median of the per-run ratios traced / plain, and their quartiles."""
    ratios = sorted(b / a for a, b in zip(plain, traced))
    quartiles = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), quartiles[0], quartiles[2]


def lineage_figures(lineage) -> tuple[float, float]:
    """Size, load and query times of a saved lineage (see the module docstring), printed;
    returns (size in MB, median load seconds)."""
    from relaytrace.model.lineage import Lineage

    with tempfile.TemporaryDirectory() as tmp:
        path = lineage.save(Path(tmp) / "lineage.json")
        loads = []
        for _ in range(5):
            gc.collect()
            start = time.perf_counter()
            loaded = Lineage.load(path)
            loads.append(time.perf_counter() - start)
        layers, kernels = loaded.layers(), list(loaded.kernels)
        start = time.perf_counter()
        for layer in layers:
            loaded.kernels_of(layer)
        per_layer = (time.perf_counter() - start) / len(layers)
        start = time.perf_counter()
        for kernel in kernels:
            loaded.origins_of(kernel)
        per_kernel = (time.perf_counter() - start) / len(kernels)
        compileall.compile_dir(Path(relaytrace.__file__).parent, quiet=1)  # as pip install (or make setup) leaves it
        command = [
            str(Path(sys.executable).parent / "relaytrace"),
            "query",
            tmp,
            "--kernel",
            kernels[len(kernels) // 2],
        ]
        queries = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            queries.append(time.perf_counter() - start)
        print(
            f"  lineage.json {path.stat().st_size / 1e6:.2f} MB ({len(loaded.call_sites)} sites, "
            f"{len(loaded.origins)} origins)  load={statistics.median(loads) * 1e3:.0f}ms  "
            f"kernels_of={per_layer * 1e6:.0f}us/layer ({len(layers)})  "
            f"origins_of={per_kernel * 1e6:.0f}us/kernel ({len(kernels)})  "
            f"query --kernel={statistics.median(queries) * 1e3:.0f}ms",
            flush=True,
        )
        return path.stat().st_size / 1e6, statistics.median(loads)


@contextlib.contextmanager
def _beside(on: bool):
    """A process building deep_chain(2000) plainly, again and again, while the block runs (``on``)."""
    if not on:
        yield
        return
    busy = subprocess.Popen([sys.executable, __file__, "--busy"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # its imports done, its first build under way
        yield
    finally:
        busy.kill()
        busy.wait()


def _busy() -> None:
    """What ``--beside`` runs in the other process: plain builds of deep_chain(2000), forever."""
    mod, target = deep_chain(2000), tvm.target.Target("llvm")
    while True:
        _plain(mod, target)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--beside", action="store_true", help="measure with a second build running beside")
    parser.add_argument("--busy", action="store_true", help=argparse.SUPPRESS)  # the process --beside starts
    parser.add_argument("--deep", type=int, default=2000, help="bindings of the generated deep model")
    parser.add_argument("--blocks", type=int, default=32, help="blocks of the decoder")
    parser.add_argument("--llama-blocks", type=int, nargs="+", default=[2, 32], help="blocks of the MLC-style Llama")
    parser.add_argument(
        "--only",
        choices=("decoder", "llama", "small", "scale"),
        help="the decoder alone, the MLC-style Llama alone, the rest alone, or the scale series alone "
        "(deep_chain of 1,000 / 2,000 / 4,000 bindings, the decoder of 8 / 32 / 80 blocks: --deep and --blocks "
        "are not read)",
    )
    args = parser.parse_args(argv)
    if args.busy:
        _busy()
    with _beside(args.beside):
        return _measure_all(args)


def _measure_all(args) -> int:
    if args.only == "scale":
        return scale(args.runs)
    if args.only in (None, "decoder"):
        lineage_figures(measure(f"decoder({args.blocks} blocks)", _decoder(args.blocks), args.runs).lineage)
    if args.only in (None, "llama"):
        for blocks in args.llama_blocks:
            for label, mode, passes in LLAMA_BUILDS:
                lineage = measure(f"llama({blocks}) {label}", _llama(blocks, mode), args.runs, passes).lineage
                if blocks == max(args.llama_blocks):
                    lineage_figures(lineage)
    if args.only in ("decoder", "llama"):
        return 0
    measure("resnet_style(blocks=3)", resnet_style(blocks=3), args.runs)
    measure("zoo resnet50 (torch)", _resnet50(), args.runs)
    measure(f"deep_chain({args.deep})", deep_chain(args.deep), args.runs)
    measure(f"deep_chain({args.deep // 2})", deep_chain(args.deep // 2), args.runs)
    return 0


DEEP_SIZES = (1000, 2000, 4000)
DECODER_BLOCKS = (8, 32, 80)


def scale(runs: int) -> int:
    """Item 2 of the overhead target: the ratio as the model grows, on deep_chain of
    ``DEEP_SIZES`` bindings and the decoder of ``DECODER_BLOCKS`` blocks (80: a
    70-B-shaped graph). Per series: the spread of the CPU ratios (flat: within 0.02),
    and the least-squares slope of each side's CPU time per 1,000 bindings (tracking is
    flat when the traced side's slope over the plain side's is the ratio itself); for
    the decoders, the slopes of the lineage's size and load time per block."""
    series = {
        "deep_chain": [(n, f"deep_chain({n})", deep_chain(n)) for n in DEEP_SIZES],
        "decoder": [(b, f"decoder({b} blocks)", _decoder(b)) for b in DECODER_BLOCKS],
    }
    for label, models in series.items():
        rows = []
        for size, name, model in models:
            got = measure(name, model, runs)
            files = lineage_figures(got.lineage) if label == "decoder" else None
            # the figures alone: a lineage kept would weigh on the larger models' builds and loads
            rows.append((size, _bindings(getattr(model, "mod", model)), got._replace(lineage=None), files))
        ratios = [got.cpu for _, _, got, _ in rows]
        bindings = [n / 1000 for _, n, _, _ in rows]
        plain = _slope(bindings, [got.plain_cpu for _, _, got, _ in rows])
        traced = _slope(bindings, [got.traced_cpu for _, _, got, _ in rows])
        print(
            f"{label}: CPU ratios {' / '.join(f'{r:.3f}' for r in ratios)}, spread {max(ratios) - min(ratios):.3f} "
            f"({'flat' if max(ratios) - min(ratios) <= 0.02 else 'not flat'} within 0.02); CPU per 1,000 bindings: "
            f"plain {plain * 1e3:.0f} ms, traced {traced * 1e3:.0f} ms, marginal ratio {traced / plain:.3f}",
            flush=True,
        )
        if label == "decoder":
            blocks = [size for size, _, _, _ in rows]
            size_slope = _slope(blocks, [files[0] for _, _, _, files in rows])
            load_slope = _slope(blocks, [files[1] for _, _, _, files in rows])
            print(f"  lineage per block: {size_slope * 1e3:.0f} KB, load {load_slope * 1e3:.1f} ms", flush=True)
    return 0


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


if __name__ == "__main__":
    sys.exit(main())
