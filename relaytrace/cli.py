"""The ``relaytrace`` command. Exit codes: 0 success, 2 usage error, 1 failure, 130 interrupted.

Everything a command prints goes through ``jobs.echo`` (each line through
``safe_text.terminal``), and each name in a line it makes is ``terminal``'s too, so a
name's control characters are shown escaped, never sent to the terminal."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from .errors import RelaytraceError, UsageError, describe
from .frontends.loader import DEMO_MODELS
from .jobs import echo, escape_warnings
from .render.safe_text import terminal



def _progress(args):
    from .jobs import Progress

    return Progress(getattr(args, "quiet", False))


def _build_and_profile(model, args, say, inputs):
    from .build import NHWC, build
    from .profiler import profile

    from .remote import exporter, runs_here, target_name

    remote = _remote(args)
    if remote is not None:  # a missing compiler, an address or key that answers not: said before the build
        exporter(args.target, remote.compiler)
        say(f"checking {remote.describe()}")
        remote.connect()
    elif not runs_here(args.target):
        raise UsageError(f"a build for {target_name(args.target)} does not run on this machine: profile it on its "
                         "device with --rpc HOST:PORT or --tracker HOST:PORT --key KEY (docs/remote.md)")
    say(f"building {getattr(model, 'name', 'model')} ({args.pipeline}, {args.layout}) for {args.target}")
    executable, lineage = build(model, args.target, pipeline=args.pipeline, model=getattr(args, "name", None),
                                convert_layout=NHWC if args.layout == "NHWC" else None,
                                progress=say.passes, database=getattr(args, "db", None))
    entry = lineage.entry(args.entry)
    mode = "isolated" if remote is not None else args.mode or "timeline"
    say(f"profiling {entry} ({mode}{', on ' + remote.describe() if remote else ''}, {args.repeat} run(s))")
    prof = profile(executable, lineage, list(inputs), repeat=args.repeat, mode=mode, progress=say, entry=entry,
                   remote=remote)
    return lineage, prof


def _check_target(text: str):
    """The TVM target ``--target`` names, refused in one line before any work."""
    import tvm

    try:
        return tvm.target.Target(text)
    except Exception as exc:  # TVM's parser: ValueError, TVMError, ...
        raise UsageError(f"--target {text!r} is not a TVM target ({describe(exc, 160)}): give a kind (llvm, "
                         'cuda) or JSON such as \'{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}\'') from None


def _remote(args):
    """The RPC device ``--rpc`` or ``--tracker``/``--key`` name, or None to run here."""
    if not (args.rpc or args.tracker or args.key):
        if args.cc or args.kernel_timeout is not None:
            raise UsageError("--cc and --kernel-timeout apply to a remote device (--rpc or --tracker)")
        return None
    if args.rpc and args.tracker:
        raise UsageError("give --rpc HOST:PORT or --tracker HOST:PORT --key KEY, not both")
    if args.mode == "timeline":
        raise UsageError("a remote device is timed --mode isolated (the VM's per-call timer cannot run there)")
    from .remote import RemoteDevice

    try:
        timeout = {} if args.kernel_timeout is None else {"kernel_timeout_s": args.kernel_timeout}
        return RemoteDevice(rpc=args.rpc, tracker=args.tracker, key=args.key, compiler=args.cc, **timeout)
    except RelaytraceError as exc:
        raise UsageError(str(exc)) from None


def _print_summary(report, out: Path | None, top: int = 10) -> None:
    from .render.table import category_table, coverage_summary, layer_table

    echo(f"{terminal(report.lineage.model)}: {report.profile.summary()}")
    for warning in report.profile.warnings():
        echo(warning)
    echo()
    echo(f"top {top} layers:")
    echo(layer_table(report.layers, top=top))
    echo()
    echo(category_table(report.categories))
    echo()
    echo(coverage_summary(report.lineage))
    if out is not None:
        from .jobs import OUTPUTS

        echo()
        echo(f"written to {out}/: {', '.join(n for n in OUTPUTS if (out / n).exists())}")


def cmd_demo(args) -> int:
    """`relaytrace demo`: build, profile and write every output for a built-in model
    (docs/cli.md)."""
    from .frontends.loader import load
    from .jobs import prepare_out_dir, write_outputs
    from .report import make_report

    say = _progress(args)
    _check_target(args.target)
    _remote(args)
    out = prepare_out_dir(args.out, args.force)
    say(f"importing {args.model}")
    args.name = args.model
    loaded = load(f"demo:{args.model}", entry=args.entry)
    report = make_report(*_build_and_profile(loaded.model, args, say, loaded.inputs))
    write_outputs(out, report, _run_record(args, f"demo:{args.model}"), overwrite=args.force)
    _print_summary(report, out)
    return 0


def cmd_profile(args) -> int:
    """`relaytrace profile MODEL`: build a user's model traced, profile it here or on a
    remote device, write every output."""
    from .frontends.loader import load
    from .jobs import parse_shape, prepare_out_dir, write_outputs
    from .report import make_report

    shapes = [parse_shape(s) for s in args.input_shape]
    if args.dtype and not shapes:
        raise UsageError("--dtype is the dtype of inputs given with --input-shape NAME:DIMS (without their own); "
                         "give the shapes too, e.g. --input-shape x:1x3x224x224 --dtype float16")
    say = _progress(args)
    _check_target(args.target)
    _remote(args)
    out = prepare_out_dir(args.out, args.force)
    say(f"importing {args.model}")
    loaded = load(args.model, shapes=shapes, dtype=args.dtype, entry=args.entry)
    report = make_report(*_build_and_profile(loaded.model, args, say, loaded.inputs))
    spec = str(Path(args.model).resolve()) if args.model.endswith(".onnx") else _absolute_factory(args.model)
    write_outputs(out, report, _run_record(args, spec), collapse=args.collapse, overwrite=args.force)
    _print_summary(report, out)
    return 0


def _run_record(args, spec: str) -> dict:
    """What an output DIR was made from (its run.json): ``tasks DIR`` rebuilds it so."""
    return {"model": spec, "input_shapes": getattr(args, "input_shape", []), "dtype": getattr(args, "dtype", None),
            "db": getattr(args, "db", None), "target": args.target, "pipeline": args.pipeline,
            "layout": args.layout, "entry": args.entry}


def _absolute_factory(spec: str) -> str:
    if spec.startswith("demo:"):
        return spec
    path, _, factory = spec.rpartition(":")
    return f"{Path(path).resolve()}:{factory}"


def cmd_compare(args) -> int:
    """`relaytrace compare MODEL`: each layer's value in the build against the framework's,
    and the first layer beyond tolerance."""
    from .build import NHWC, build
    from .comparison import compare
    from .frontends.loader import load
    from .jobs import parse_shape, prepare_out_dir, write_compare
    from .render.outputs import COMPARE, names
    from .remote import runs_here, target_name
    from .render.table import comparison_table

    say = _progress(args)
    _check_target(args.target)
    if not runs_here(args.target):
        raise UsageError(f"compare runs the build here, and a build for {target_name(args.target)} does not run "
                         "on this machine: compare with a target of this machine (llvm)")
    if args.accumulate and args.precision != "fp16":
        raise UsageError("--accumulate applies to --precision fp16")
    out = prepare_out_dir(args.out, args.force) if args.out else None
    say(f"importing {args.model}")
    loaded = load(args.model, shapes=[parse_shape(x) for x in args.input_shape])
    if loaded.source is None:
        raise UsageError(f"compare runs the model in its own framework, and {args.model} gives only a TVM model (an "
                         "ImportedModel, an nn module or a Relax IRModule): compare an .onnx file or a factory "
                         "returning (torch module, example inputs[, dynamic_shapes])")
    accumulate = (args.accumulate or "float32") if args.precision == "fp16" else None
    precision = f"float16, accumulating in {accumulate}" if accumulate else "float32 as built"
    say(f"building {loaded.model.name} ({args.pipeline}, {args.layout}, {precision}) for {args.target}")
    executable, lineage = build(loaded.model, args.target, pipeline=args.pipeline,
                                convert_layout=NHWC if args.layout == "NHWC" else None,
                                progress=say.passes, mixed_precision=accumulate)
    comparison = compare(executable, lineage, loaded.source, list(loaded.inputs), atol=args.atol, rtol=args.rtol,
                         precision=precision, progress=say)
    echo(comparison_table(comparison))
    echo()
    echo(comparison.summary())
    if out is not None:
        write_compare(out, lineage, comparison, overwrite=args.force)
        echo(f"\nwritten to {out}/: {', '.join(names(COMPARE))}")
    return 0


def cmd_render(args) -> int:
    """`relaytrace render DIR`: draw a saved run again (a graph in another format, the
    report) beside its outputs."""
    from .model.jsonio import write_atomic
    from .model.lineage import Lineage
    from .model.profile import Profile
    from .render import graphviz as G
    from .render.html import html_report
    from .report import make_report

    if args.out and Path(args.out).suffix.lower() not in (f".{args.format}",) + ((".htm",) if args.format == "html" else ()):
        raise UsageError(f"--out {args.out} does not end in .{args.format}, the --format it would be written in: "
                         f"name it ...{'.' + args.format} or give the --format its suffix says")
    if args.compare and args.format != "html":
        raise UsageError("--compare shows each layer's error in the HTML report (--format html); the layer graph "
                         "coloured by error is errors.svg, written by `relaytrace compare --out DIR`")
    if args.format == "html" and args.graph != "layers":
        raise UsageError("the HTML report holds the layer graph and every table: --graph applies to svg, png, pdf "
                         "and dot")
    source = Path(args.source)
    lineage_path = source / "lineage.json" if source.is_dir() else source
    profile_path = Path(args.profile) if args.profile else (
        lineage_path.with_name("profile.json") if lineage_path.with_name("profile.json").is_file() else None)
    lineage = Lineage.load(lineage_path)
    report = make_report(lineage, Profile.load(profile_path)) if profile_path else None
    beside = lineage_path.with_name("compare.json")
    comparison = _comparison(args.compare or (beside if args.format == "html" and beside.is_file() else None), lineage)
    from .jobs import RENDERED

    stem = lineage_path.parent / (RENDERED + ("report" if args.format == "html" else args.graph))
    out = Path(args.out) if args.out else stem.with_suffix(f".{args.format}")  # never one of profile's own names
    if args.format == "html":
        if report is None:
            raise UsageError("the HTML report needs a profile: pass --profile profile.json")
        write_atomic(out, html_report(report, comparison), overwrite=args.force)
    else:
        graph = (G.layer_graph(lineage, report, collapse=args.collapse) if args.graph == "layers"
                 else G.kernel_graph(lineage, report))
        G.render(graph, out, args.format, overwrite=args.force)
    echo(out)
    return 0


def _comparison(path, lineage):
    """The ``relaytrace compare`` result at ``path`` (None without one), refused when it
    is of another model than ``lineage``."""
    from .model.numerics import Comparison

    if path is None:
        return None
    comparison = Comparison.load(path)
    unknown = [e.layer for e in comparison.layers if e.layer not in set(lineage.layers())]
    if comparison.model != lineage.model or unknown:
        raise RelaytraceError(f"{path} compares {comparison.model!r}, not this lineage's model {lineage.model!r}"
                              + (f" (layers {', '.join(unknown[:3])} are not in it)" if unknown else "")
                              + ": pass the compare.json of the same model")
    return comparison


def cmd_query(args) -> int:
    """`relaytrace query DIR|lineage.json`: what a layer, kernel or origin became, from a
    saved lineage (no TVM)."""
    from .model.lineage import Lineage

    asked = next((f"--{k}" for k in ("kernel", "layer", "history") if getattr(args, k) == ""), None)
    if asked:
        raise UsageError(f"{asked} needs a name (see `relaytrace query LINEAGE --{asked[2:]} NAME`)")
    lineage = Lineage.load(Path(args.lineage) / "lineage.json" if Path(args.lineage).is_dir() else args.lineage)
    if args.kernel:
        name, _, call = args.kernel.partition("#")
        if not name or call and not call.isdigit():
            raise UsageError(f"--kernel takes NAME, NAME#CALL or ENTRY:NAME#CALL, not {args.kernel!r}")
        sites = [lineage.site_by_label(args.kernel)] if call else list(lineage.sites(name.rpartition(":")[2]))
        result = [{"site": s.label, "verification": lineage.check(s).status,
                   "reasons": list(lineage.check(s).reasons), "shared": list(lineage.check(s).shared), "origins": [
            {"origin": r.origin, "role": r.role, "layer": lineage.origins[r.origin].layer,
             "op": lineage.origins[r.origin].short_op, "source": lineage.origins[r.origin].source}
            for r in s.roles]} for s in sites]
        text = "\n".join(f"{terminal(s['site'])}: {s['verification'].upper()}\n" + "".join(
            f"  ! {terminal(reason)}\n" for reason in s["reasons"]) + "".join(
            f"  (rests on a fact the tracker relies on too: {terminal(fact)})\n" for fact in s["shared"]) + "\n".join(
            f"  {o['role']:<10} {terminal(o['layer'])}  ({terminal(o['op'])}, {terminal(o['origin'])})"
            + (f"  at {terminal(o['source'])}" if o["source"] else "") for o in s["origins"]) for s in result)
    elif args.layer:
        sites = lineage.kernels_of(args.layer)
        verdict = lineage.verification.by_layer().get(args.layer) if lineage.verification is not None else None
        result = {"layer": args.layer, "kernel_calls": [s.label for s in sites],
                  "source": list(lineage.sources().get(args.layer, ())),
                  "verification": verdict.status if verdict else "unverified",
                  "reasons": list(verdict.reasons) if verdict else ["this lineage has no layer verdicts"]}
        text = (f"{terminal(args.layer)} runs in: " + (", ".join(map(terminal, result["kernel_calls"])) or "no kernel")
                + f"\nverification: {result['verification'].upper()}"
                + "".join(f"\n  ! {terminal(r)}" for r in result["reasons"]))
        if result["source"]:
            text += "\nmade at: " + ", ".join(map(terminal, result["source"]))
        gone = [f"{o} (eliminated by {p})" for o, p in lineage.eliminated().items() if o in lineage.resolve(args.layer)]
        if gone:
            result["eliminated"] = gone
            text += "\n" + "\n".join(map(terminal, gone))
    else:
        steps = lineage.history(args.history)
        result = [{"pass_index": c.index, "pass": c.pass_name, "function": c.function, "callee": c.callee,
                   "rule": c.rule} for c in steps]
        text = f"history of {terminal(args.history)}:\n" + "\n".join(
            f"  #{c['pass_index']:<4} {terminal(c['pass']):<28} -> {terminal(c['callee'])}  [{terminal(c['rule'])}]"
            for c in result)
    echo(json.dumps(result, indent=1) if args.json else text)
    return 0


def cmd_diff(args) -> int:
    """`relaytrace diff A B`: per-layer (or per-kernel) time differences of two runs, with
    their noise."""
    from . import diff as D
    from .jobs import load_pair
    from .render.table import format_table

    lineage_a, profile_a = load_pair(args.a)
    if args.reference:
        rows, unknown = D.compare_reference(lineage_a, profile_a, D.read_reference(args.reference))
        headers = ["layer", "ours (ms)", "reference (ms)", "reference / ours", "noise (ms)", "kernel calls"]
    else:
        if not args.b:
            raise UsageError("diff needs B (a second output DIR or profile.json) or --reference CSV")
        lineage_b, profile_b = load_pair(args.b)
        rows, unknown = D.compare(lineage_a, profile_a, lineage_b, profile_b, by_layer=args.by_layer), ()
        headers = ["layer", "A (ms)", "B (ms)", "B / A", "noise (ms)", "kernel calls A -> B"] + (
            ["match"] if args.by_layer else [])

    def ms(us, why):
        return why if us is None else f"{us / 1e3:.3f}"

    table = [[r.layer, ms(r.a_us, r.absent_a), ms(r.b_us, r.absent_b),
              "-" if r.ratio is None else f"{r.ratio:.3f}" + (" ~" if r.within_noise else ""),
              f"±{r.spread_us / 1e3:.3g}" if r.spread_us else "-",
              " ".join(r.kernels_a) + ("" if args.reference else " -> " + " ".join(r.kernels_b))]
             + ([r.match] if args.by_layer and not args.reference else []) for r in rows]
    echo(format_table(headers, table))
    total_a, total_b = D.totals(rows)
    echo(f"\ntotal: A {total_a / 1e3:.3f} ms, {'reference' if args.reference else 'B'} {total_b / 1e3:.3f} ms"
         + (f", B / A {total_b / total_a:.3f}" if total_a else "") + " (rows sorted by the size of the change)")
    noise = [r.layer for r in rows if r.within_noise]
    echo(f"{len(noise)} layer(s) marked ~ changed by no more than their runs scatter (noise: max - min over "
         "runs): that change may be noise" if noise else
         "noise: how far each layer's time scatters over the runs (max - min); '-': one run, nothing to tell by")
    if args.by_layer and not args.reference:
        echo("\n" + D.match_summary(rows))
    missing = [r.layer for r in rows if r.b_us is None]
    if args.reference and missing:
        echo(f"\n{len(missing)} layer(s) missing from the reference: {', '.join(map(terminal, missing[:10]))}"
             f"{' ...' if len(missing) > 10 else ''}")
    if unknown:
        echo(f"\n{len(unknown)} reference layer(s) not in the model: {', '.join(map(terminal, unknown[:10]))}")
    if args.out and not args.reference:
        from .render.diff_graph import diff_graph
        from .render import graphviz as G

        path = G.render(diff_graph(lineage_a, rows), Path(args.out), overwrite=args.force)
        echo(f"\ngraph coloured by speedup: {path}")
    return 0


def cmd_tasks(args) -> int:
    """`relaytrace tasks MODEL|DIR`: MetaSchedule tuning tasks mapped to kernels and
    layers; `--tune N --db DIR` tunes them."""
    from . import tasks as T
    from .build import build
    from .render.table import format_table

    from .frontends.loader import load
    from .jobs import parse_shape, run_info

    say = _progress(args)
    if args.tune is not None and not args.db:
        raise UsageError("--tune needs --db DIR for the tuning database")
    remote = _remote(args)
    if remote is not None and args.tune is None:
        raise UsageError("--tracker measures tuning candidates: give --tune N --db DIR with it")
    spec, shapes, dtype, target = args.model, args.input_shape, args.dtype, args.target or "llvm"
    if Path(spec).is_dir():  # an output DIR: rebuild the model it was made from, as it was made
        info = run_info(spec)
        if info["pipeline"] != "fused" or info["layout"] != "NCHW":
            raise UsageError(f"{spec} was built {info['pipeline']} with layout {info['layout']}; tasks are those of "
                             "the fused NCHW build: profile the model that way, or pass the model itself")
        spec, shapes, dtype, target = info["model"], info["input_shapes"], info["dtype"], args.target or info["target"]
    target_text = target
    if remote is not None and "num-cores" not in _check_target(target).attrs:
        raise UsageError("tuning on a tracker's devices needs their core count in the target: give --target as JSON "
                         'with "num-cores", e.g. \'{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 4}\'')
    target = T.tuning_target(_check_target(target)) if args.tune else _check_target(target)
    loaded = load(spec, shapes=[parse_shape(s) for s in shapes], dtype=dtype, with_inputs=False)
    mod = loaded.model.mod
    say("building (fused) and extracting MetaSchedule tasks")
    _, lineage = build(loaded.model, target, progress=say.passes)
    rows = T.extract(mod, target, lineage)
    echo(format_table(["task", "weight", "kernels", "layers"],
                      [[r.name, r.weight, " ".join(r.kernels), ", ".join(r.layers)] for r in rows]))
    echo("\n" + _task_totals(rows, len(lineage.call_sites)))
    if args.tune:
        T.tune(mod, target, args.db, args.tune, len(rows), progress=say, remote=remote)
        say("rebuilding with the tuned schedules")
        _, tuned = build(loaded.model, target, progress=say.passes, database=args.db)
        cov = tuned.coverage()
        echo(f"tuned build: {cov.attributed_sites}/{cov.call_sites} kernel call sites attributed"
             f"{'' if cov.complete else ' (INCOMPLETE)'}; {len(tuned.tuned)} of {len(tuned.kernels)} kernels "
             f"took a tuned schedule")
        failed = T.failed_tasks(args.db)
        if failed:
            echo(f"{failed} task(s) kept the default schedule: every candidate failed to build or run "
                 f"(MetaSchedule's logs: {Path(args.db) / 'logs'})")
        echo(f"tuning database written to {args.db}; profile the tuned build with:\n"
             f"  {_profile_command(spec, shapes, dtype, target_text, args.db, remote)}")
        if args.out:
            tuned.save(args.out, overwrite=args.force)
            echo(f"tuned lineage written to {args.out}")
    return 0


def _task_totals(rows, call_sites: int) -> str:
    """The tasks' weights against the build's kernel call sites, said as they are: a
    task that became no kernel of the build (a reshape run as a VM builtin) apart."""
    running = [r for r in rows if r.kernels]
    idle = [r.name for r in rows if not r.kernels]
    weight = sum(r.weight for r in running)
    relation = "=" if weight == call_sites else "!="
    text = f"{len(rows)} tasks; those with a kernel: total weight {weight} {relation} {call_sites} kernel call sites"
    if relation != "=":
        text += " (MetaSchedule's task weights and the lineage's call sites disagree)"
    if idle:
        text += (f"\n{len(idle)} task(s) became no kernel of this build (run as VM builtins or folded): "
                 f"{', '.join(map(terminal, idle[:8]))}{' ...' if len(idle) > 8 else ''}")
    return text


def _profile_command(spec, shapes, dtype, target: str, db, remote) -> str:
    """The ``relaytrace profile`` command that profiles a tuned build as it was tuned."""
    import shlex

    words = ["relaytrace", "profile", spec, "--db", str(db)]
    words += [w for shape in shapes for w in ("--input-shape", shape)]
    words += ["--dtype", dtype] if dtype else []
    words += ["--target", target] if target != "llvm" else []
    words += ["--tracker", remote.tracker, "--key", remote.key] if remote is not None else []
    return " ".join(map(shlex.quote, words + ["--out", "DIR"]))


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as the one line every relaytrace error is (exit 2)."""

    def error(self, message):
        self.exit(2, f"relaytrace: usage error: {message} (see `{self.prog} --help`)\n")


def _at_least(low, kind=int, strict: bool = True):
    """An argparse type: a number of ``kind`` no smaller than ``low`` (above it for
    floats, unless not ``strict``); a float is finite."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        above = kind is not int and strict
        if value != value:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        if not ((value > low if above else value >= low) and value < float("inf")):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'above' if above else 'at least'} {low}")
        return value

    parse.__name__ = "count" if kind is int else "seconds"
    return parse


def _add_build_options(p) -> None:
    p.add_argument("--target", default="llvm", help="TVM target (default llvm)")
    p.add_argument("--pipeline", choices=["fused", "unfused"], default="fused")
    p.add_argument("--layout", choices=["NCHW", "NHWC"], default="NCHW",
                   help="NHWC: ConvertLayout conv2d to NHWC/OHWI before the pipeline")
    p.add_argument("--mode", choices=["timeline", "isolated"], default=None,
                   help="timeline (default here) or isolated (the only mode on a remote device)")
    p.add_argument("--rpc", metavar="HOST:PORT", help="profile on the device of this TVM RPC server")
    p.add_argument("--tracker", metavar="HOST:PORT", help="profile on a device from this TVM RPC tracker's pool")
    p.add_argument("--key", metavar="KEY", help="the device key (needed with --tracker; a server's own key with --rpc)")
    p.add_argument("--cc", metavar="COMPILER",
                   help="links the build for a remote device (default: MTRIPLE-g++ for a target of another CPU)")
    p.add_argument("--kernel-timeout", type=_at_least(0, float), metavar="S",
                   help="seconds one call site may take on a remote device (default 120)")
    p.add_argument("--repeat", type=_at_least(1), default=3, help="profiled runs (default 3)")
    p.add_argument("--entry", metavar="NAME", help="entry function to profile (default main, or the only one)")


def _add_model_options(p) -> None:
    p.add_argument("model", metavar="MODEL", help="an .onnx file or path/to/file.py:factory (tasks: or an output DIR)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:1x3x224x224[:DTYPE]",
                   help="an input's size, and dtype (repeatable); needed for symbolic dims")
    p.add_argument("--dtype", help="dtype of inputs given a shape without one (default: the model's)")


def build_parser() -> argparse.ArgumentParser:
    """The `relaytrace` argument parser: one subcommand per ``cmd_*`` function (and
    ``legacy``), each option checked as it is parsed."""
    parser = _Parser(prog="relaytrace",
                                     description="Map TVM kernels, and their time, back to model layers.")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="import, build, profile and report a built-in model")
    p.add_argument("--model", choices=DEMO_MODELS, default="resnet50")
    p.add_argument("--out", default="relaytrace-out", help="output DIR (default relaytrace-out)")
    p.add_argument("--force", action="store_true", help="write into an existing DIR")
    _add_build_options(p)
    p.set_defaults(run=cmd_demo, name=None)

    p = sub.add_parser("profile", help="build and profile a model file; write every output")
    _add_model_options(p)
    _add_build_options(p)
    p.add_argument("--out", required=True, help="output DIR")
    p.add_argument("--force", action="store_true", help="write into an existing DIR")
    p.add_argument("--collapse", type=_at_least(0), metavar="N",
                   help="group layers.svg by module prefix depth N (0: every op; default: every op up to "
                        "400, else grouped)")
    p.add_argument("--db", metavar="DIR", help="apply the MetaSchedule database `tasks --tune` wrote in DIR")
    p.set_defaults(run=cmd_profile)

    p = sub.add_parser("compare", help="compare every layer's output of the build with the torch model's")
    p.add_argument("model", metavar="MODEL", help="an .onnx file or path/to/file.py:factory returning a torch "
                                                  "module, its inputs [and dynamic_shapes]")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME:1x3x224x224[:DTYPE]",
                   help="an input's size (repeatable): needed for symbolic dims without example inputs")
    p.add_argument("--target", default="llvm", help="TVM target of this machine (default llvm)")
    p.add_argument("--pipeline", choices=["fused", "unfused"], default="fused")
    p.add_argument("--layout", choices=["NCHW", "NHWC"], default="NCHW",
                   help="NHWC: ConvertLayout conv2d to NHWC/OHWI before the pipeline")
    p.add_argument("--precision", choices=["fp32", "fp16"], default="fp32",
                   help="fp16: build through relax.transform.ToMixedPrecision (default fp32: as imported)")
    p.add_argument("--accumulate", choices=["float32", "float16"],
                   help="with --precision fp16: the dtype conv and matmul accumulate in (default float32)")
    p.add_argument("--atol", type=_at_least(0, float, strict=False), default=1e-4, metavar="A",
                   help="absolute tolerance (default 1e-4)")
    p.add_argument("--rtol", type=_at_least(0, float, strict=False), default=1e-4, metavar="R",
                   help="relative tolerance (default 1e-4): beyond when |got - ref| > A + R |ref| anywhere")
    p.add_argument("--out", help="output DIR: lineage.json, compare.json, compare.csv, errors.svg")
    p.add_argument("--force", action="store_true", help="replace an existing DIR")
    p.set_defaults(run=cmd_compare)

    p = sub.add_parser("render", help="draw a saved lineage (and profile)")
    p.add_argument("source", metavar="DIR|lineage.json")
    p.add_argument("--profile", metavar="profile.json")
    p.add_argument("--format", choices=["svg", "png", "pdf", "dot", "html"], default="svg")
    p.add_argument("--graph", choices=["layers", "kernels"], default="layers")
    p.add_argument("--compare", metavar="compare.json",
                   help="html: show each layer's numerical error from `relaytrace compare --out` (default: a "
                        "compare.json beside the lineage)")
    p.add_argument("--collapse", type=_at_least(0), metavar="N",
                   help="group layers by module prefix depth N (0: every op; default: every op up to 400, "
                        "else grouped)")
    p.add_argument("--out", help="output file (default: beside the lineage)")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.set_defaults(run=cmd_render)

    p = sub.add_parser("query", help="ask a saved lineage which layers a kernel runs, and more")
    p.add_argument("lineage", metavar="DIR|lineage.json")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--kernel", metavar="NAME[#CALL]")
    which.add_argument("--layer", metavar="NAME")
    which.add_argument("--history", metavar="LAYER")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_query)

    p = sub.add_parser("diff", help="compare two profiles of one model layer by layer")
    p.add_argument("a", metavar="A", help="output DIR or profile.json")
    p.add_argument("b", metavar="B", nargs="?", help="output DIR or profile.json")
    p.add_argument("--reference", metavar="layers.csv", help="external per-layer times (layer,time_us)")
    p.add_argument("--by-layer", action="store_true",
                   help="match layers by name, not by op: one model through two frontends (torch and ONNX)")
    p.add_argument("--out", metavar="diff.svg", help="also draw the layer graph coloured by speedup")
    p.add_argument("--force", action="store_true")
    p.set_defaults(run=cmd_diff)

    p = sub.add_parser("tasks", help="MetaSchedule tuning tasks, their weights and layers")
    _add_model_options(p)
    p.add_argument("--target", help="TVM target (default llvm, or the one an output DIR was made for)")
    p.add_argument("--tune", type=_at_least(1), metavar="N", help="tune N trials per task, then rebuild")
    p.add_argument("--db", metavar="DIR", help="tuning database directory")
    p.add_argument("--tracker", metavar="HOST:PORT", help="measure tuning candidates on this tracker's devices")
    p.add_argument("--key", metavar="KEY", help="the devices' key in the tracker")
    p.set_defaults(rpc=None, mode=None, cc=None, kernel_timeout=None)
    p.add_argument("--out", metavar="lineage.json", help="write the tuned build's lineage")
    p.add_argument("--force", action="store_true")
    p.set_defaults(run=cmd_tasks)

    from .legacy.cli import add_parser as add_legacy

    add_legacy(sub)
    return parser


def main(argv=None) -> int:
    """Run one command; every failure is one line on stderr and an exit code
    (``failures``): 0 done, 1 failed, 2 bad command line, 130 interrupted."""
    from . import failures

    restore, restore_warnings = failures.watch_interrupts(), escape_warnings()
    # torch.export's own deprecation notice on every torch import: not the user's to act on
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
    try:
        args = build_parser().parse_args(argv)
        code = args.run(args)
    except BrokenPipeError:
        return failures.quiet_broken_pipe()
    except BaseException as exc:  # noqa: BLE001 - the one place failures become exit codes
        if isinstance(exc, SystemExit):
            raise
        code = failures.report(exc)
    finally:
        restore()
        restore_warnings()
    remote = sys.modules.get(f"{__package__}.remote")
    if remote is not None and remote.ABANDONED:  # tearing down a session to a stopped device would hang
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
