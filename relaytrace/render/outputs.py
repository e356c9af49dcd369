"""The files a run writes into its output directory, each listed once.

An ``Output`` names the files it writes and writes them from what the run produced
(a ``ProfileRun``, ``CompareRun``, ``LegacyRun`` or ``SweepRun``) into a directory.
``PROFILE``, ``COMPARE``, ``LEGACY`` and ``SWEEP`` are the lists
``jobs.write_outputs`` / ``write_compare`` / ``write_legacy`` / ``write_sweep`` write, ``NAMES`` is what
``--force`` accepts as relaytrace's own files, and the CLI's "written to" line names
the files that exist. Why one list: an output added to the writer but not to the
ownership check made the next ``--force`` refuse the directory as holding files
relaytrace did not write. Adding an output is one ``Output`` in one list
(docs/architecture.md shows one)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from attrs import frozen

from .explorer import FILES as EXPLORER_FILES
from .memory import memory_csv
from .verification_csv import verification_csv

if TYPE_CHECKING:
    from ..analysis.report import Report
    from ..model.lineage import Lineage
    from ..model.numerics import Comparison
    from ..model.run_spec import RunSpec


@frozen
class ProfileRun:
    """What ``profile`` and ``demo`` write from: the report, the record of how the run
    was made (``run.json``: ``tasks DIR`` rebuilds from it), the layer graph's
    grouping depth (None: the renderer's default) and, for an LLM served as a prefill
    then a decode step, the prefill's report (``report`` is the decode's)."""

    report: Report
    run: RunSpec
    collapse: int | None = None
    prefill: Report | None = None  # an LLM served with no entry named: the prefill step before ``report``'s decode


@frozen
class CompareRun:
    """What ``compare --out`` writes from: the lineage of the compared build and its
    ``Comparison``."""

    lineage: Lineage
    comparison: Comparison


@frozen
class LegacyRun:
    """What ``legacy --out`` writes from: the matches of the artifacts it read, as the
    JSON object ``matches.json`` holds."""

    matches: dict


@frozen
class SweepRun:
    """What ``sweep --out`` writes from: the ``Sweep``, the context its fits are
    projected to (None: none) and, with ``--device``, the estimated ``Sweep``."""

    sweep: object
    project: int | None = None
    device: object = None  # the same points bounded on a named device (``sweep --device``), fitted alike


R = TypeVar("R", ProfileRun, CompareRun, LegacyRun, SweepRun)


@frozen
class Output(Generic[R]):
    """``names``: the files ``write(run, directory)`` writes (all of them, or, for an
    output that applies to some models only, none); ``about``: one line for the docs."""

    names: tuple[str, ...]
    write: Callable[[R, Path], object]
    about: str


def _text(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text, encoding="utf-8")


def _layers_csv(run: ProfileRun, d: Path) -> None:
    from . import export

    _text(d, "layers.csv", export.layers_csv(run.report))


def _kernels_csv(run: ProfileRun, d: Path) -> None:
    from . import export

    _text(d, "kernels.csv", export.kernels_csv(run.report))


def _layers_svg(run: ProfileRun, d: Path) -> None:
    from . import graphviz

    graphviz.render(graphviz.layer_graph(run.report.lineage, run.report, collapse=run.collapse), d / "layers.svg")


def _kernels_svg(run: ProfileRun, d: Path) -> None:
    from . import graphviz

    graphviz.render(graphviz.kernel_graph(run.report.lineage, run.report), d / "kernels.svg")


def _report_html(run: ProfileRun, d: Path) -> None:
    from .html import html_report

    _text(d, "report.html", html_report(run.report))


def _trace(run: ProfileRun, d: Path) -> None:
    from .chrome_trace import chrome_trace

    _text(d, "trace.json", json.dumps(chrome_trace(run.report)))


def _explorer(run: ProfileRun, d: Path) -> None:
    from .explorer import node_data

    for name, data in node_data(run.report).items():
        _text(d, name, json.dumps(data, indent=1))


def _code(run: ProfileRun, d: Path) -> None:
    from .provenance import provenance

    lineage = run.report.build_lineage
    if lineage.code is not None:
        lineage.code.save(d / "code.json")
        _text(d, "provenance.json", json.dumps(provenance(lineage).to_json(), indent=1))


def _steps_csv(run: ProfileRun, d: Path) -> None:
    from .steps import steps_csv

    if run.prefill is not None:
        _text(d, "steps.csv", steps_csv(run.prefill, run.report))


def _inside_csv(run: ProfileRun, d: Path) -> None:
    from . import export

    if run.report.inside:
        _text(d, "inside.csv", export.inside_csv(run.report))


def _compare_csv(run: CompareRun, d: Path) -> None:
    from . import export

    _text(d, "compare.csv", export.comparison_csv(run.comparison))


def _errors_svg(run: CompareRun, d: Path) -> None:
    from . import graphviz
    from .diff_graph import error_graph

    graphviz.render(error_graph(run.lineage.for_entry(run.comparison.entry), run.comparison), d / "errors.svg")


PROFILE: tuple[Output[ProfileRun], ...] = (
    Output(
        ("lineage.json",),
        lambda run, d: run.report.build_lineage.save(d / "lineage.json"),
        "the build's lineage, every entry (query, render, diff and tasks read it)",
    ),
    Output(
        ("profile.json",),
        lambda run, d: run.report.profile.save(d / "profile.json"),
        "every timed call of the profiled entry",
    ),
    Output(("layers.csv",), _layers_csv, "time per layer, with its work, achieved rates and roofline bound"),
    Output(("kernels.csv",), _kernels_csv, "time per kernel, with its layers, work and roofline bound"),
    Output(("layers.svg",), _layers_svg, "the layer graph coloured by time"),
    Output(("kernels.svg",), _kernels_svg, "the kernel graph"),
    Output(("report.html",), _report_html, "the interactive report"),
    Output(("trace.json",), _trace, "a Chrome / Perfetto trace"),
    Output(("run.json",), lambda run, d: run.run.save(d), "how the run was made"),
    Output(
        EXPLORER_FILES,
        _explorer,
        "Model Explorer node data: time, kernels, category, roofline efficiency (torch and ONNX models)",
    ),
    Output(
        ("verification.csv",),
        lambda run, d: _text(d, "verification.csv", verification_csv(run.report)),
        "each layer's verdict, its call sites' verdicts and the verifier's reasons",
    ),
    Output(
        ("code.json", "provenance.json"),
        _code,
        "the compiled Relax program and each kernel's TIR, and which block computes which layer (when saved)",
    ),
    Output(
        ("steps.csv",),
        _steps_csv,
        "an LLM served with no entry named: each layer's time in the prefill and in the decode step",
    ),
    Output(
        ("inside.csv",),
        _inside_csv,
        "profiled --inside: each fused kernel's loop nests timed, beside the split the model gives them",
    ),
    Output(
        ("memory.csv",),
        lambda run, d: _text(d, "memory.csv", memory_csv(run.report)),
        "each value's block, bytes, writer, layer and lifetime; weights and inputs",
    ),
)

COMPARE: tuple[Output[CompareRun], ...] = (
    Output(("lineage.json",), lambda run, d: run.lineage.save(d / "lineage.json"), "the compared build's lineage"),
    Output(("compare.json",), lambda run, d: run.comparison.save(d / "compare.json"), "every layer's comparison"),
    Output(("compare.csv",), _compare_csv, "the comparison as a table"),
    Output(("errors.svg",), _errors_svg, "the layer graph coloured by error"),
)


LEGACY: tuple[Output[LegacyRun], ...] = (
    Output(
        ("matches.json",),
        lambda run, d: _text(d, "matches.json", json.dumps(run.matches, indent=1)),
        "the old artifacts' kernels, tasks and log records matched to Relay ops",
    ),
)


def _device_sweep(run: SweepRun, d: Path) -> None:
    if run.device is not None:
        _text(d, "device.csv", _sweep().sweep_csv(run.device))
        _text(d, "device_fits.csv", _sweep().fits_csv(run.device, run.project))


def _sweep():
    from . import sweep

    return sweep


SWEEP: tuple[Output[SweepRun], ...] = (
    Output(
        ("sweep.csv",),
        lambda run, d: _text(d, "sweep.csv", _sweep().sweep_csv(run.sweep)),
        "each layer's time at each measured (context, batch) point, and its fit there",
    ),
    Output(
        ("fits.csv",),
        lambda run, d: _text(d, "fits.csv", _sweep().fits_csv(run.sweep, run.project)),
        "each layer's fitted curve, its error, and its time at the projected context",
    ),
    Output(
        ("device.csv", "device_fits.csv"),
        _device_sweep,
        "with --device: each layer's roofline bound on it at each point, and the fits of those",
    ),
    Output(
        ("sweep.svg",),
        lambda run, d: _text(d, "sweep.svg", _sweep().sweep_svg(run.sweep)),
        "the slowest layers' time against context per batch size, measured and fitted",
    ),
    Output(
        ("report.html",),
        lambda run, d: _text(d, "report.html", _sweep().sweep_html(run.sweep, run.project, run.device)),
        "the plot and every layer's fit on one page (and the device bound's, with --device)",
    ),
)


def names(outputs: tuple[Output[R], ...]) -> tuple[str, ...]:
    """Every file ``outputs`` may write, in list order."""
    return tuple(name for output in outputs for name in output.names)


NAMES = tuple(
    dict.fromkeys(names(PROFILE) + names(COMPARE) + names(LEGACY) + names(SWEEP))
)  # what a directory of ours may hold


def write_all(outputs: tuple[Output[R], ...], run: R, directory: Path) -> None:
    """Each of ``outputs`` written from ``run`` into ``directory``, in list order."""
    for output in outputs:
        output.write(run, directory)
