"""Match Relay-era report rows, AutoTVM tasks and log records to Relay ops.

Evidence, strongest first: the op sequence spelled in a fused name
(``fused_nn_contrib_conv2d_NCHWc_add_nn_relu`` -> conv2d, add, relu), the output
shape with packed layouts unpacked (NCHW16c ``(1, 4, 56, 56, 16)`` is NCHW
``(1, 64, 56, 56)``), the weight shape (``OIHW16i16o`` unpacked), how many calls a
function has, and program order. When several ops still fit, all are reported as
candidates: nothing is guessed silently.
"""

from __future__ import annotations

import re
from collections import Counter

from attrs import define

from .autotvm import LogRecord, Task, Workload
from .common import Shape, unpack, unpack_kernel
from .relay_ir import RelayGraph, RelayOp
from .reports import ReportRow

ANCHORS = (
    "conv2d",
    "dense",
    "max_pool2d",
    "avg_pool2d",
    "global_avg_pool2d",
    "softmax",
    "batch_flatten",
    "batch_matmul",
    "matmul",
)
ELEMENTWISE = ("add", "relu", "multiply", "subtract", "clip", "sigmoid", "tanh", "divide")
_CANON = {
    "bias_add": "add",
    "contrib_conv2d_NCHWc": "conv2d",
    "contrib_dense_pack": "dense",
    "contrib_depthwise_conv2d_NCHWc": "conv2d",
    "depthwise_conv2d_nchw": "conv2d",
}
_VOCAB = (
    "nn_contrib_depthwise_conv2d_NCHWc",
    "nn_contrib_conv2d_NCHWc",
    "nn_contrib_dense_pack",
    "nn_global_avg_pool2d",
    "nn_batch_flatten",
    "nn_max_pool2d",
    "nn_avg_pool2d",
    "nn_batch_matmul",
    "layout_transform",
    "nn_bias_add",
    "nn_conv2d",
    "nn_dense",
    "nn_softmax",
    "nn_relu",
    "nn_pad",
    "multiply",
    "subtract",
    "divide",
    "add",
    "clip",
    "sigmoid",
    "tanh",
    "concatenate",
    "reshape",
    "squeeze",
    "transpose",
)


def canonical(op: str) -> str:
    """An op's name as matching compares it: namespace and ``nn_`` prefix dropped,
    variants folded (``bias_add`` -> ``add``, ``contrib_conv2d_NCHWc`` -> ``conv2d``)."""
    name = op.rsplit(".", 1)[-1]
    name = name[3:] if name.startswith("nn_") else name
    return _CANON.get(name, name)


def fused_ops(function: str) -> tuple[str, ...]:
    """The ops a Relay fused function's name spells, in order."""
    name = re.sub(r"^tvmgen_default_", "", function)
    name = re.sub(r"^fused_", "", name)
    name = re.sub(r"_\d+$", "", name)
    ops, rest = [], name
    while rest:
        word = next((w for w in _VOCAB if rest == w or rest.startswith(w + "_")), None)
        if word is None:
            head, _, rest = rest.partition("_")
            ops.append(canonical(head))
            continue
        ops.append(canonical(word))
        rest = rest[len(word) + 1 :]
    return tuple(ops)


@define(frozen=True)
class Chain:
    """An anchor op and the elementwise ops Relay would fuse after it."""

    index: int
    ops: tuple[RelayOp, ...]
    data: Shape | None
    weight: Shape | None

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical names of the chain's ops, anchor first."""
        return tuple(canonical(o.op) for o in self.ops)

    @property
    def out_shape(self) -> Shape:
        """The output shape of the chain's last op: what its fused kernel writes."""
        return self.ops[-1].out_shape

    @property
    def label(self) -> str:
        """The chain as tables print it: each op's var (``%out`` for the returned
        expression) and short name, joined by a plus: ``%3 conv2d + %4 add``."""
        return " + ".join(f"{o.var or '%out'} {o.short}" for o in self.ops)

    @property
    def flops(self) -> float:
        """The anchor's work: 2 x its output elements x its weight's elements per output
        channel when it has a weight, else its output element count."""
        anchor, out = self.ops[0], 1
        for d in self.ops[0].out_shape:
            out *= d
        if anchor.weights and len(anchor.weights[0]) > 1:
            per = 1
            for d in anchor.weights[0][1:]:
                per *= d
            return 2.0 * out * per
        return float(out)

    def workload(self) -> Workload | None:
        """The AutoTVM workload of a conv2d or dense chain (strides and padding from a
        conv2d's attributes); None for other ops or when the data or weight shape is unknown."""
        anchor = self.ops[0]
        kind = canonical(anchor.op)
        if kind not in ("conv2d", "dense") or self.data is None or not anchor.weights:
            return None
        strides = _ints(anchor.attrs.get("strides", "[1, 1]")) if kind == "conv2d" else ()
        padding = _ints(anchor.attrs.get("padding", "[0, 0]")) if kind == "conv2d" else ()
        return Workload(kind, self.data, anchor.weights[0], strides, padding)


def _ints(text: str) -> Shape:
    return tuple(int(d) for d in re.findall(r"-?\d+", text))


def chains(graph: RelayGraph) -> tuple[Chain, ...]:
    """The graph's ops as chains, in program order: an elementwise op joins the chain
    before it when its first input is the previous op's var and that var's only use."""
    uses = Counter(ref for op in graph.ops for ref in op.inputs)
    out: list[list[RelayOp]] = []
    for op in graph.ops:
        name = canonical(op.op)
        last = out[-1][-1] if out else None
        extends = (
            name in ELEMENTWISE
            and last is not None
            and last.var
            and op.inputs
            and op.inputs[0] == last.var
            and uses[last.var] == 1
        )
        if extends:
            out[-1].append(op)
        else:
            out.append([op])
    return tuple(
        Chain(
            i,
            tuple(ops),
            graph.shape_of(ops[0].inputs[0]) if ops[0].inputs else None,
            ops[0].weights[0] if ops[0].weights else None,
        )
        for i, ops in enumerate(out)
    )


@define(frozen=True)
class RowMatch:
    """A report row and the Relay op chains it ran: ``matched`` when decided, else every
    chain that fits as ``candidates`` (``likely``: a time ~ FLOPs hint), with the
    evidence that decided (``basis``)."""

    row: ReportRow
    ops: tuple[str, ...]  # from the fused name
    matched: tuple[Chain, ...]  # decided
    candidates: tuple[Chain, ...]  # when undecided: every chain that fits
    basis: str
    likely: Chain | None = None  # undecided, but time ~ FLOPs suggests this one

    @property
    def decided(self) -> bool:
        """Whether the row was matched to the chain(s) it ran."""
        return bool(self.matched)


def _row_fits(row: ReportRow, ops: tuple[str, ...], chain: Chain) -> bool:
    if tuple(o for o in ops if o != "layout_transform") != chain.names:
        return False
    layout = row.columns.get("out_layout") or None
    out = unpack(row.out_shape, layout) if row.out_shape else None
    if out is not None and out != chain.out_shape:
        return False
    if len(row.arg_shapes) > 1 and chain.weight is not None and len(row.arg_shapes[1]) in (4, 6):
        if unpack_kernel(row.arg_shapes[1]) != chain.weight and chain.names[0] == "conv2d":
            return False
    return True


def match_rows(rows, graph: RelayGraph) -> tuple[RowMatch, ...]:
    """Each report row to the chain(s) it ran. Rows of one fused function run one
    workload; a function called n times takes a group of n identical chains."""
    all_chains = chains(graph)
    calls: Counter = Counter(r.function for r in rows)
    results = []
    for row in rows:
        ops = fused_ops(row.function)
        if all(o == "layout_transform" for o in ops):
            results.append(RowMatch(row, ops, (), (), "layout transform inserted by AlterOpLayout: no Relay op"))
            continue
        fits = [c for c in all_chains if _row_fits(row, ops, c)]
        n = row.count if row.count > 1 else calls[row.function]
        groups: dict[tuple, list[Chain]] = {}
        for c in fits:
            groups.setdefault((c.data, c.weight, c.names), []).append(c)
        sized = [g for g in groups.values() if len(g) == n]
        if len(fits) == 1:
            results.append(RowMatch(row, ops, tuple(fits), (), "op sequence and shape"))
        elif len(sized) == 1 and n == 1:
            results.append(RowMatch(row, ops, tuple(sized[0]), (), "op sequence, shape and call count"))
        elif len(sized) == 1:
            chosen = _by_order(row, rows, sized[0])
            results.append(
                RowMatch(
                    row,
                    ops,
                    chosen,
                    () if row.count > 1 else tuple(sized[0]),
                    "op sequence, shape and call count" + ("" if row.count > 1 else "; call by order"),
                )
            )
        else:
            results.append(RowMatch(row, ops, (), tuple(fits), "ambiguous" if fits else "no Relay op fits"))
    return _likely(results)


def _likely(results):
    """Rows that share one candidate set as large as themselves: pair the slowest row
    with the heaviest op. Only a hint; the rows stay undecided."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(results):
        if not r.matched and r.candidates:
            groups.setdefault(tuple(c.index for c in r.candidates), []).append(i)
    results = list(results)
    for members in groups.values():
        chains_ = sorted(results[members[0]].candidates, key=lambda c: -c.flops)
        if len(members) != len(chains_):
            continue
        for i, chain in zip(sorted(members, key=lambda i: -results[i].row.duration_us), chains_):
            r = results[i]
            results[i] = RowMatch(r.row, r.ops, (), r.candidates, r.basis, chain)
    return tuple(results)


def _by_order(row, rows, group):
    """A report row per call: graph-executor nodes are numbered by program order, the
    first call bearing the function's name and later ones a suffix."""
    if row.count > 1:
        return tuple(group)
    same = sorted((r.name for r in rows if r.function == row.function), key=lambda n: (len(n), n))
    return (group[same.index(row.name)],) if len(same) == len(group) else ()


@define(frozen=True)
class TaskMatch:
    """An AutoTVM task and the chains with its workload's op, data and weight shape: the
    layers its schedule serves."""

    task: Task
    chains: tuple[Chain, ...]  # every layer the task's schedule serves (its repeats)


def match_tasks(tasks, graph: RelayGraph) -> tuple[TaskMatch, ...]:
    """Each task to the chains of ``graph`` with its workload's op, data and weight shape
    (none when no op fits)."""
    all_chains = chains(graph)
    out = []
    for task in tasks:
        w = task.workload
        hits = tuple(
            c
            for c in all_chains
            if (cw := c.workload()) is not None and cw.op == w.op and c.data == w.data and c.weight == w.weight
        )
        out.append(TaskMatch(task, hits))
    return tuple(out)


@define(frozen=True)
class LogMatch:
    """A tuning-log record, the position of its workload among the listed ones (None
    when not listed), and how many layers of the model run that workload."""

    record: LogRecord
    workload_index: int | None  # position in the listed workloads
    repeats: int  # how many layers of the model run this workload


def match_log(records, workloads, repeats: Counter) -> tuple[LogMatch, ...]:
    """Each record to the position of its workload among ``workloads`` (None when not
    listed) and its count in ``repeats`` (0 when absent), both by ``Workload.key``."""
    keys = [w.key() for w in workloads]
    return tuple(
        LogMatch(
            r, keys.index(r.workload.key()) if r.workload.key() in keys else None, repeats.get(r.workload.key(), 0)
        )
        for r in records
    )


def repeats_in_graph(graph: RelayGraph) -> Counter:
    """How many conv2d and dense chains of ``graph`` run each workload, by ``Workload.key``."""
    return Counter(w.key() for c in chains(graph) if (w := c.workload()) is not None)


def repeats_in_torch(module, example) -> Counter:
    """Workloads of a torch model's conv and linear layers, counted (runs it once)."""
    import torch

    seen: Counter = Counter()

    def hook(mod, inputs, output):
        data = tuple(inputs[0].shape)
        if isinstance(mod, torch.nn.Conv2d):
            kind = "depthwise_conv2d" if mod.groups > 1 and mod.groups == mod.in_channels else "conv2d"
            w = Workload(kind, data, tuple(mod.weight.shape), tuple(mod.stride), _padding(mod))
        else:
            w = Workload("dense", data, tuple(mod.weight.shape))
        seen[w.key()] += 1

    handles = [
        m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))
    ]
    with torch.no_grad():
        module(example)
    for h in handles:
        h.remove()
    return seen


_PADDED_BY_NAME = {"valid": False, "same": True}  # torch's padding by name: none, or half the kernel


def _padding(conv) -> tuple[int, ...]:
    """A torch conv's padding as AutoTVM spells it, per spatial dim: ``"valid"`` is none,
    ``"same"`` is half the dilated kernel (torch puts an odd remainder after; AutoTVM's
    two-value form keeps the leading half, as Relay's import of such a conv does)."""
    if not isinstance(conv.padding, str):
        return tuple(conv.padding)
    padded = _PADDED_BY_NAME[conv.padding]
    return tuple(d * (k - 1) // 2 if padded else 0 for d, k in zip(conv.dilation, conv.kernel_size))


def weighted_total_s(matches) -> float:
    """Seed 003's question: conv2d time as the sum of each workload's cost times how
    often the model runs it."""
    return sum(m.record.cost_s * m.repeats for m in matches if m.record.cost_s is not None)


def layout_transform_share(report) -> tuple[float, float, float]:
    """(pure layout-transform time, time of kernels fused with a layout transform,
    total) of one report, in microseconds."""
    pure = sum(r.duration_us for r in report.rows if set(fused_ops(r.function)) == {"layout_transform"})
    mixed = sum(r.duration_us for r in report.rows if "layout_transform" in fused_ops(r.function))
    return pure, mixed, report.total_us or report.kernel_us
