"""The code of a recorded build (``model.code.Code``), read from the modules the passes left.

``code_later`` picks, and the function it returns prints, each Relax function of the last
module with Relax functions (the
program the VM runs) and each kernel's PrimFunc twice: in the first module that has it
after fusion (as ``FuseTIR`` left it) and in the last (as built, when a schedule
changed it). Blocks, buffers and calls are read from the IR (TVM's structural walk over
the TIR and Relax ASTs), never from the printed text: a block is an ``SBlock`` but the
root, its buffers those its ``reads`` / ``writes`` regions name (an opaque block's: the
buffers it stores to); a call is a binding naming a function or a kernel. The text is
what the user reads, and only the lines come from it (``printed.script_lines``). The
members of a fused kernel are the group FuseOps made, read as ``truth.kernel_members``
reads them (same order).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import tvm_ffi
from tvm import relax
from tvm.ir import GlobalVar, Op, TensorLoad
from tvm.s_tir.stmt import SBlock
from tvm.tirx import BufferType
from tvm.tirx.stmt import BufferStore
from tvm_ffi.structural import WalkResult

from ..model.code import Block, Call, Code, FunctionCode, KernelCode, MemberCode
from . import ir, reader
from .printed import script_lines
from .recorder import FUSE_TIR
from .truth import fusion_groups, group_calls

if TYPE_CHECKING:
    from ..model.lineage import Lineage
    from .recorder import PassRecord


def code_later(passes: Sequence[PassRecord], lineage: Lineage):
    """The code of the build ``passes`` recorded and ``lineage`` describes (every Relax
    function the VM runs, every kernel its sites call and every kernel its KV cache is
    given), made later: the functions and kernels are picked from ``passes`` now (a pass
    may change a module object in place later, and the record is let go), and the
    function returned, ``(lineage, read=reader.read) -> Code``, prints and reads them
    when called (raising what TVM's printer raises). Why: printing the code is a third
    of tracking's time, and only an output that shows the code needs it
    (``Lineage.code``, made at the first ask)."""
    relax_records = [r for r in passes if ir.model_functions(r.functions)]
    if not relax_records:
        return lambda lineage, read=reader.read: Code()
    functions = ir.model_functions(relax_records[-1].functions)
    wanted = [k for k, sites in lineage.kernels.items() if sites and not sites[0].library]
    if lineage.build.kv_cache is not None:
        wanted += [k for k in lineage.build.kv_cache.kernels if k not in lineage.kernels]
    fused_at = _first_prim_funcs(passes, set(wanted))
    built = ir.prim_func_map(relax_records[-1].module)
    groups, members_at, _ = fusion_groups(passes)
    member_funcs = ir.prim_func_map(members_at) if members_at is not None else {}

    def make(lineage: Lineage, read=reader.read) -> Code:
        kernels: dict[str, KernelCode] = {}
        for name in wanted:
            func = fused_at.get(name) or built.get(name)
            if func is not None:
                kernels[name] = _kernel(name, func, built.get(name), groups, member_funcs, lineage, read)
        return Code({name: _function_code(name, func) for name, func in functions.items()}, kernels)

    return make


def _kernel(name: str, func, final, groups, member_funcs, lineage: Lineage, read) -> KernelCode:  # noqa: PLR0913 - its two forms, its fusion and the reader
    """One kernel's code: ``func`` as fusion left it, ``final`` as built (None: not in the
    last module), its members (``groups``' of ``member_funcs``) aligned with the truth's."""
    text, blocks = _kernel_code(func, name)
    params = _params(func)
    members = _aligned(  # an unfused kernel: one member, itself
        _members(groups[name], member_funcs, read, groups)
        if name in groups
        else (MemberCode(name, tuple(b.name for b in blocks), (), True),),
        [m.prim_func for m in lineage.build.kernel_members.get(name, ())],
    )
    owners = [m for m, member in enumerate(members) for _ in member.blocks]
    if len(owners) == len(blocks):
        blocks = [attrs.evolve(b, member=m) for b, m in zip(blocks, owners)]
    scheduled = final is not None and not _same_body(final, func)  # not only attributes added: a symbol
    built_text, built_blocks = _kernel_code(final, name) if scheduled else ("", [])
    return KernelCode(
        name,
        text,
        tuple(blocks),
        _outputs(params, blocks),
        members,
        built_text,
        tuple(_scheduled(built_blocks, blocks, params)),
        ir.buffer_types(final if final is not None else func),
    )


def _function_code(name: str, func) -> FunctionCode:
    """A Relax function's text and the line of each call its bindings make (``_callee``),
    in text order, an ``If``'s branches included."""
    bindings: list = []
    tvm_ffi.structural_walk(func, ((relax.VarBinding, relax.MatchCast), bindings.append), order="pre")
    text, lines = script_lines(func, name, bindings)
    calls: list[Call] = []
    seen: dict[str, int] = {}
    for line, binding in sorted(zip(lines, bindings), key=lambda lb: lb[0]):
        callee = _callee(binding.value)
        if callee is not None:
            calls.append(Call(line, callee, seen.get(callee, 0)))
            seen[callee] = seen.get(callee, 0) + 1
    return FunctionCode(name, text, tuple(calls))


def _callee(value) -> str | None:
    """The function a bound value calls, if it is a call: a global function by name
    (``k(...)``, ``R.call_tir(cls.k, ...)``), a packed function by symbol
    (``R.call_packed("vm.builtin.x", ...)``); a kernel passed as a value, to a KV cache's
    creation, is not called there."""
    if not isinstance(value, relax.Call):
        return None
    target = value.args[0] if isinstance(value.op, Op) and value.args else value.op
    if isinstance(target, GlobalVar):
        return target.name_hint
    return target.global_symbol if isinstance(target, relax.ExternFunc) else None


def _kernel_code(func, name: str) -> tuple[str, list[Block]]:
    """A PrimFunc's text and every block of it but the root, in text order, each with its
    lines (the block's ``with`` and those indented under it) and the buffers its regions
    read and write (a block that declares no writes, opaque hand-written TIR: the
    buffers it stores to)."""
    sblocks = _sblocks(func)
    text, lines = script_lines(func, name, sblocks)
    rows = text.splitlines()
    names = _buffer_names(func)
    out: list[Block] = []
    for block, line in zip(sblocks, lines):
        reads = [names.get(b) or _identifier(b.name) for r in block.reads for b in _region_buffers(r)]
        writes = [names.get(b) or _identifier(b.name) for b in [w.source for w in block.writes] or _stores(block)]
        out.append(
            Block(
                block.name_hint, line, _last_line(rows, line), tuple(dict.fromkeys(reads)), tuple(dict.fromkeys(writes))
            )
        )
    return text, out


def _sblocks(func) -> list:
    """A PrimFunc's blocks but the root, in the order its text prints them."""
    found: list = []
    tvm_ffi.structural_walk(func.body, (SBlock, found.append), order="pre")
    return [b for b in found if b.name_hint != "root"]


def _last_line(rows: list[str], line: int) -> int:
    """The last line of the statement on ``line`` (1-based): those after it indented deeper."""
    indent = len(rows[line - 1]) - len(rows[line - 1].lstrip())
    end = line
    for j in range(line, len(rows)):
        if rows[j].strip() and len(rows[j]) - len(rows[j].lstrip()) <= indent:
            break
        end = j + 1
    return end


def _region_buffers(region) -> list:
    """The buffer a block's region accesses, then each buffer its bounds load (a page
    table's entry that says where a KV page lies)."""
    found: list = [region.source]
    tvm_ffi.structural_walk(region.region, (TensorLoad, lambda load: found.append(load.source)), order="pre")
    return found


def _stores(block) -> list:
    """The buffers a block's body stores to, itself (not a block nested in it)."""
    found: list = []
    tvm_ffi.structural_walk(
        block.body,
        [(SBlock, lambda _: WalkResult.SKIP), (BufferStore, lambda s: found.append(s.buffer))],
        order="pre",
    )
    return found


def _buffer_names(func) -> dict:
    """Each buffer of a PrimFunc (its parameters and the buffers its blocks allocate) ->
    its name as the text writes it (an identifier: ``T_sum.rf_local`` is
    ``T_sum_rf_local``), made unique by a ``_<n>`` suffix where two buffers share one."""
    buffers: list = [p for p in ir.items(func.params) if isinstance(p.ty, BufferType)]
    tvm_ffi.structural_walk(func.body, (SBlock, lambda b: buffers.extend(ir.items(b.alloc_buffers))), order="pre")
    names: dict = {}
    taken: dict[str, int] = {}
    for buffer in buffers:
        if buffer in names:
            continue
        name = _identifier(buffer.name)
        n = taken.get(name, 0)
        taken[name] = n + 1
        names[buffer] = name if n == 0 else f"{name}_{n}"
    return names


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _params(func) -> set[str]:
    """The names of the buffers a PrimFunc takes as parameters."""
    names = _buffer_names(func)
    return {names[p] for p in ir.items(func.params) if isinstance(p.ty, BufferType)}


def _outputs(params: set[str], blocks: list[Block]) -> tuple[str, ...]:
    """The kernel's parameters (``params``, by name) its blocks write: its outputs."""
    written = dict.fromkeys(w for b in blocks for w in b.writes)
    return tuple(w for w in written if w in params)


def _same_body(built, fused) -> bool:
    """Whether a built kernel computes as its fused self does, statement by statement (a
    build makes a kernel public and names its symbol: no change a user reads as a
    schedule)."""
    return tvm_ffi.structural_equal(built.body, fused.body, map_free_vars=True)


def _scheduled(built: list[Block], fused: list[Block], params: set[str]) -> list[Block]:
    """A built kernel's blocks, each with the fused blocks it was made from
    (``Block.sources``), read from what schedules keep: its name (``conv2d_nchw_rf``,
    ``T_add_local`` after the block they split; ``B_reindex_shared`` after the buffer it
    stages, so the block that reads it), the buffers it writes (an epilogue inlined into
    a conv's block writes the ReLU's output) and, for a fused block no built block is
    named after or writes for (inlined), the kernel parameters it reads (a bias add's
    bias) or else its neighbour in the data flow. Read, not checked: a built block's
    verdict says so (``model.code.built_checks``)."""
    names = sorted(fused, key=lambda f: -len(f.name))
    reads = sorted(((r, f) for f in fused for r in f.reads), key=lambda rf: -len(rf[0]))
    writes = sorted(((w, f) for f in fused for w in f.writes), key=lambda wf: -len(wf[0]))
    sources: list[list[Block]] = []
    for b in built:
        named = next((f for f in names if _derived(b.name, f.name)), None)
        found = [named] if named is not None else []
        for w in b.writes:  # the fused block whose buffer this one's is made from (the longest stem)
            writer = next((f for w0, f in writes if _derived(w, w0)), None)
            found += [writer] if writer is not None else []
        if not found:
            found = [f for r, f in reads if _derived(b.name, r)][:1]
        sources.append(found)
    covered = {f.name for found in sources for f in found}
    for f in fused:
        if f.name in covered:
            continue
        bias = set(f.reads) & params
        takers = [i for i, b in enumerate(built) if bias & set(b.reads)]
        if not takers:  # its neighbour's block: the one making what it reads, or reading what it makes
            near = {g.name for g in fused if set(g.writes) & set(f.reads) or set(f.writes) & set(g.reads)}
            takers = [i for i, found in enumerate(sources) if near & {g.name for g in found}]
        for i in takers:
            sources[i].append(f)
    return [attrs.evolve(b, sources=tuple(dict.fromkeys(f.name for f in found))) for b, found in zip(built, sources)]


def _derived(name: str, stem: str) -> bool:
    return name == stem or name.startswith(stem + "_")


def _first_prim_funcs(passes: Sequence[PassRecord], wanted: set[str]) -> dict[str, Any]:
    """Each of ``wanted`` as the first recorded module after fusion has it as a PrimFunc
    (before fusion, a PrimFunc of the same name is a member, not the kernel): FuseTIR's
    own, as it ended (``PassRecord.prim_funcs``), then later modules'."""
    start = next((i for i, r in enumerate(passes) if r.pass_name == FUSE_TIR), 0)
    found: dict[str, Any] = {}
    seen: set[int] = set()
    for record in passes[start:]:
        if record.module.__chandle__() in seen and record.prim_funcs is None:
            continue
        seen.add(record.module.__chandle__())
        prims = record.prim_funcs if record.prim_funcs is not None else ir.prim_func_map(record.module)
        for name, func in prims.items():
            if name in wanted and name not in found:
                found[name] = func
        if len(found) == len(wanted):
            break
    return found


def _aligned(members: tuple[MemberCode, ...], truth: list[str]) -> tuple[MemberCode, ...]:
    """``members`` lined up with the kernel's members in the truth (their PrimFuncs,
    ``truth``), where a PrimFunc computes several ops (``NT_matmul``: a permute_dims and
    a matmul, one member each, in the order its group computed them): its blocks are
    its last member's, which computes its result; each member before reads nothing and
    is read by the next. As they are when the truth does not run through them so (a
    kernel fused again: its blocks then do not line up, and say so)."""
    spans: list[tuple[int, int]] = []  # each member's first and last truth member
    i = 0
    for j, m in enumerate(members):
        if i >= len(truth) or truth[i] != m.prim_func:
            return members
        k = 1
        while i + k < len(truth) and truth[i + k] == m.prim_func and len(truth) - i - k > len(members) - j - 1:
            k += 1
        spans.append((i, i + k - 1))
        i += k
    if i != len(truth) or len(truth) == len(members):
        return members
    out: list[MemberCode] = []
    for m, (first, last) in zip(members, spans):
        out += [MemberCode(m.prim_func, (), (n + 1,)) for n in range(first, last)]
        out.append(attrs.evolve(m, consumers=tuple(spans[c][1] for c in m.consumers)))
    return tuple(out)


def _members(group, member_funcs: dict[str, Any], read, groups: dict[str, Any]) -> tuple[MemberCode, ...]:
    """A group's members in binding order (bookkeeping left out, as in
    ``truth.kernel_members``): each PrimFunc's block names, its consumers, whether its
    value is the group's result. A member that is itself a group fused before (in
    ``groups``: a kernel fused again with another, MLC-LLM's dequantize and matmul) is
    its own members, as the truth counts them, each reading what its group's
    parameters bring."""
    return tuple(_flow(group, member_funcs, read, groups, frozenset())[0])


def _flow(group, member_funcs, read, groups, seen) -> tuple[list[MemberCode], list[set[int]]]:
    """(the members of ``group``, ``_members``, each ``result`` when its value is the
    group's; for each of the group's parameters, the members that read it)."""
    d = read(group)
    calls = group_calls(d)
    params = {h: i for i, h in enumerate(d.params)}
    out = d.output()
    results = {out.handle} | {f.handle for f in out.fields} if out is not None else set()
    members: list[MemberCode] = []
    spans: list[tuple[int, list[MemberCode], list[set[int]] | None]] = []  # per call: first, members, readers
    for _, c in calls:
        if c.global_var and c.callee in groups and c.callee not in seen:
            inner, readers = _flow(groups[c.callee], member_funcs, read, groups, seen | {c.callee})
        else:
            func = member_funcs.get(c.callee) if c.global_var else None
            blocks = tuple(b.name_hint for b in _sblocks(func)) if func is not None else ()
            inner, readers = [MemberCode(c.callee, blocks, (), True)], None
        first = len(members)
        members += [attrs.evolve(m, consumers=tuple(first + k for k in m.consumers)) for m in inner]
        spans.append((first, inner, readers))
    made_by = {d.vars[p]: m for m, (p, _) in enumerate(calls)}
    consumers: dict[int, set[int]] = {}
    param_readers: list[set[int]] = [set() for _ in d.params]
    for m, (_, c) in enumerate(calls):
        first, inner, readers = spans[m]
        k = -1  # the argument an atom is (a tuple's fields: of the tuple before them)
        for atom in c.atoms:
            k += not atom.field
            if readers is None:
                targets = {first}
            elif atom.field or k >= len(readers):  # a field of a tuple argument: any member may read it
                targets = {first + j for j in range(len(inner))}
            else:
                targets = {first + r for r in readers[k]}
            if atom.handle in made_by:
                source_first, source, _ = spans[made_by[atom.handle]]
                for j, member in enumerate(source):
                    if member.result:
                        consumers.setdefault(source_first + j, set()).update(targets)
            elif atom.handle in params:
                param_readers[params[atom.handle]].update(targets)
    for m, (p, _) in enumerate(calls):
        first, inner, _ = spans[m]
        for j, member in enumerate(inner):
            k = first + j
            members[k] = attrs.evolve(
                members[k],
                consumers=tuple(sorted(set(members[k].consumers) | consumers.get(k, set()))),
                result=member.result and d.vars[p] in results,
            )
    return members, param_readers
