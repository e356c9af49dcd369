"""MetaSchedule tuning tasks of a fused build, mapped to kernels and layers.

A task is one PrimFunc after FuseTIR; its weight is how many call sites run it,
which is also how often each layer's tuning pays off: a tuned conv that runs at eight
sites saves eight times its gain, the weighting a user asks for when summing a tuning
log's costs."""

from __future__ import annotations

from attrs import define, frozen

from ..errors import RelaytraceError


@define(frozen=True)
class TaskRow:
    """One MetaSchedule task: its name, weight (call sites that run it), kernels and layers."""

    name: str
    weight: int
    kernels: tuple[str, ...]
    layers: tuple[str, ...]


def tuning_target(spec):
    """MetaSchedule needs the core count in the target; add this machine's if absent."""
    import os

    import tvm

    target = tvm.target.Target(spec) if isinstance(spec, str) else spec
    if target.kind.name == "llvm" and "num-cores" not in target.attrs:
        config = dict(target.export())
        config["num-cores"] = os.cpu_count() or 1
        target = tvm.target.Target(config)
    return target


def _stages(target):
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    return (
        cpu.library_dispatch_passes(target) + cpu.legalize_passes(target),
        cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target),
    )


def fused_module(mod, target):
    """The module as the fused CPU pipeline has it just after FuseTIR: what MetaSchedule tunes."""
    import tvm

    front, _ = _stages(target)
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(front)(mod)


def extract(mod, target, lineage) -> tuple[TaskRow, ...]:
    """The tuning tasks of ``mod``'s fused build, each mapped through ``lineage`` to its
    layers: those that became a kernel of the build first, heaviest first (a task that
    became no kernel, a reshape run as a VM builtin, after them)."""
    import tvm.s_tir.meta_schedule as ms

    tasks = ms.relax_integration.extract_tasks(fused_module(mod, target), target)
    rows = []
    for task in tasks:
        name = task.task_name
        sites = lineage.kernels.get(name, ())
        layers = tuple(dict.fromkeys(lineage.origins[s.anchor].layer for s in sites if s.anchor))
        rows.append(TaskRow(name, int(task.weight), (name,) if sites else (), layers))
    return tuple(sorted(rows, key=lambda r: (not r.kernels, -r.weight, r.name)))


@frozen
class Trials:
    """How much ``tune`` tunes: ``per_task`` trials for each of the ``tasks`` tasks."""

    per_task: int
    tasks: int


def tune(mod, target, work_dir: str, trials: Trials, progress=None, remote=None):
    """Tune every task for ``trials`` into the database in ``work_dir``; returns the
    pipeline that applies it (``tuned_pipeline``). Candidates are measured here, or on
    the devices of ``remote`` (a ``RemoteDevice`` naming a tracker and key), through
    MetaSchedule's RPC runner."""
    import tvm.s_tir.meta_schedule as ms

    trials_per_task, tasks = trials.per_task, trials.tasks
    if trials_per_task < 1:
        raise RelaytraceError("--tune needs at least 1 trial per task")
    runner = "local" if remote is None else fleet_runner(remote)
    builder = ms.builder.LocalBuilder(f_build=build_candidate)
    fused = fused_module(mod, target)
    if progress:
        where = f", measured on {remote.describe()}" if remote is not None else ""
        progress(f"tuning {tasks} task(s), {trials_per_task} trial(s) each{where}, database in {work_dir}")
    database = ms.relax_integration.tune_relax(
        fused,
        {},
        target,
        work_dir,
        max_trials_global=trials_per_task * tasks,
        max_trials_per_task=trials_per_task,
        num_trials_per_iter=min(trials_per_task, 64),
        cost_model="random",
        strategy="replay-trace",  # a random cost model ranks evolution's candidates at random: sample directly
        seed=0,
        builder=builder,
        runner=runner,
    )
    return tuned_pipeline(target, database)


def build_candidate(mod, target, _params):
    """Build one scheduled candidate in a MetaSchedule build worker, as its default build
    does (the weight-layout rewrite blocks dropped, then ``tvm.build``) but without first
    importing every target's tensor intrinsics: that import parses them all from
    TVMScript, and LocalBuilder starts new workers for each batch, so each batch paid it
    again (most of a tuning run's time on a small machine). A candidate reaches the
    builder already scheduled, with any tensorized block's body in place, so its build
    does not look the intrinsics up."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def fleet_runner(remote):
    """MetaSchedule's RPC runner on the tracker and key of ``remote``; the tracker is
    asked first, so that a wrong address or key is a one-line error, not a tuning run
    whose every measurement failed. ``kernel_timeout_s`` bounds each candidate's session."""
    import tvm.s_tir.meta_schedule as ms

    if remote.tracker is None:
        raise RelaytraceError(
            "MetaSchedule measures candidates on a tracker's devices: give --tracker HOST:PORT "
            "--key KEY (register the board's server with a tracker, docs/remote.md)"
        )
    import math

    from .remote import address

    remote.connect()  # a free device with the key, within the wait
    host, port = address(remote.tracker)
    # MetaSchedule bounds each candidate's whole session (upload, run, time) by this
    config = ms.runner.RPCConfig(
        tracker_host=host,
        tracker_port=port,
        tracker_key=remote.key,
        session_timeout_sec=max(1, math.ceil(remote.kernel_timeout_s)),
    )
    return ms.runner.RPCRunner(rpc_config=config, max_workers=1)


def open_database(work_dir):
    """The MetaSchedule JSON database ``tasks --tune`` wrote into ``work_dir``."""
    from pathlib import Path

    import tvm.s_tir.meta_schedule as ms

    files = [Path(work_dir) / f for f in ("database_workload.json", "database_tuning_record.json")]
    if not all(f.is_file() for f in files):
        raise RelaytraceError(
            f"no MetaSchedule database in {work_dir}: make one with `relaytrace tasks MODEL --tune N --db {work_dir}`"
        )
    return ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)


def failed_tasks(work_dir) -> int:
    """How many tuned workloads in the database of ``work_dir`` have no candidate that
    built and ran: MetaSchedule records a failure with a huge run time and keeps the
    default schedule for them, without a word in the tuned build."""
    from tvm_ffi import structural_hash

    failed_cost = 1e9  # MetaSchedule's MAX_FAIL_COST is 1e10 s
    best: dict = {}
    for record in open_database(work_dir).get_all_tuning_records():
        times = [float(t) for t in record.run_secs or ()]
        key = structural_hash(record.workload.mod)
        best[key] = best.get(key, False) or (bool(times) and max(times) < failed_cost)
    return sum(not ok for ok in best.values())


def tuned_pipeline(target, database):
    """The fused CPU pipeline with the schedules of ``database`` applied after FuseTIR,
    where ``tune`` tuned them (the records are keyed by ``tuning_target(target)``)."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="MetaScheduleApplyDatabase")
    def apply_database(m, ctx):
        with target, database:
            return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(m)

    front, back = _stages(target)

    @tvm.transform.module_pass(opt_level=0, name="tuned_pipeline")
    def pipeline(m, ctx):
        """The fused CPU pipeline with the tuned schedules applied after FuseTIR."""
        with target:
            return tvm.transform.Sequential(front + [apply_database] + back)(m)

    return pipeline
