"""`relaytrace report`: every output of a bundle's profile (or a saved run), written as a local profile's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import RelaytraceError
from ..render.safe_text import terminal
from .base import Command
from .shared import add_peak_options, add_policy_option, given_peaks, print_summary, summary

if TYPE_CHECKING:
    from ..profiling.manifest import Manifest


def add_arguments(p) -> None:
    """`relaytrace report`'s arguments and options (docs/cli.md#report)."""
    p.add_argument("dir", metavar="DIR", help="a bundle DIR holding the profile.json its run.py wrote")
    p.add_argument("--out", help="output DIR (default: DIR/report)")
    p.add_argument("--force", action="store_true", help="replace an existing output DIR")
    add_peak_options(p)
    add_policy_option(p)


def run(args) -> int:
    """`relaytrace report DIR`: the bundle's lineage and the profile its runner wrote,
    every output written (``jobs.write_outputs``) into DIR/report (the bundle itself
    holds files that are not outputs, so the outputs go in a directory of their own)
    and the summary printed, as `relaytrace profile` does."""
    import attrs

    from ..analysis.report import make_report
    from ..jobs import load_pair, prepare_out_dir, write_outputs
    from ..model.run_spec import RunSpec
    from ..profiling import bundle
    from ..profiling.bundle import MANIFEST, RUNNER

    source = Path(args.dir)
    if not (source / MANIFEST).is_file():
        raise RelaytraceError(f"{source} is not a bundle (no {MANIFEST}): give the DIR `relaytrace bundle --out` wrote")
    if not (source / "profile.json").is_file():
        raise FileNotFoundError(
            f"{source / 'profile.json'} is missing: run `python {source / RUNNER}` where the "
            "bundle was copied and bring its profile.json back into the DIR"
        )
    peaks = given_peaks(args)
    manifest = _sealed_manifest(source)
    lineage, profile = load_pair(source)
    problem = next(bundle.mismatches(manifest, lineage), None)
    if problem:
        raise RelaytraceError(f"{source / MANIFEST}'s {problem}: bundle the model again")
    if profile.model != lineage.build.model or profile.target != lineage.build.target:
        raise RelaytraceError(
            f"{source / 'profile.json'} is of {profile.model} for {profile.target}, not this "
            "bundle's build: run this bundle's run.py again"
        )
    out = prepare_out_dir(args.out or source / "report", args.force)
    if peaks is not None:  # given here, they replace what the runner measured (run.py --no-peaks measures none)
        profile = attrs.evolve(profile, peaks=peaks)
    run = manifest.run or RunSpec(lineage.build.model)
    report = make_report(lineage, profile, policy=args.policy)
    text = summary(report)
    if lineage.code is None:
        text += f"\nno code.json in {terminal(str(source))}: report.html has no Code section (bundle the model again)"
    write_outputs(out, report, attrs.evolve(run, policy=args.policy), overwrite=args.force)
    print_summary(text, out)
    return 0


def _sealed_manifest(source: Path) -> Manifest:
    """The bundle's ``bundle.json`` read checked (``manifest.read_manifest``), once the
    lineage and the code beside it (when there is one) are shown to be the files it
    sealed (``runner.files.check_files``: a lineage or a code.json of another build put in the
    bundle is refused); a one-line error otherwise."""
    from ..model.codec import encode
    from ..profiling.bundle import MANIFEST
    from ..profiling.manifest import read_manifest
    from ..profiling.runner.errors import BundleError
    from ..profiling.runner.files import check_files

    manifest = read_manifest(source / MANIFEST)
    if not manifest.files:
        raise RelaytraceError(
            f"{source / MANIFEST} seals no files (a bundle of an earlier relaytrace?): bundle the model again"
        )
    names = ["lineage.json"] + ["code.json"] * (source / "code.json").exists()  # without it: no Code section
    try:
        check_files(source, encode(manifest.files), names)
    except BundleError as exc:
        raise RelaytraceError(f"{source}: {exc}") from exc
    return manifest


COMMAND = Command("report", "write every output of a bundle's profile (after `python DIR/run.py`)", add_arguments, run)
