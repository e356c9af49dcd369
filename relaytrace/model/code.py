"""The code a build made, linked by origin down to TIR blocks: the data of ``code.json``.

What a user asks after "this layer is slow" is what the compiler made of it: the
Relax bindings that run it, the kernel, and which blocks of that kernel compute the
layer rather than the norm and ReLU fused after it. ``Code`` holds the answer as the
build left it: each Relax function's TVMScript with the line of every call
(``FunctionCode``), and each kernel's TIR as fusion left it and, where a schedule
changed it, as built (``KernelCode``), with every block's line span, the buffers it
reads and writes, and the member PrimFunc it came from.

Which member a block came from rests on what ``FuseTIR`` keeps: it concatenates its
members' bodies in binding order and keeps each block's name (a repeat gets a number),
so the blocks of the fused kernel are the members' blocks, in order. ``check_blocks``
holds each block to it, as verification holds sites to their members: a block whose
name is not its member's block, or whose result no block of the consuming member reads
(or, for the kernel's result, that no output buffer holds) is suspect. Which op and
layer a block is then comes from the call site (``block_origins``: the site's origins
matched to the kernel's members as verification matches them).

Saved apart from the lineage (a lineage loads without it) and loaded only when asked:
``Code.load(path)`` or ``Lineage.with_code``, which holds it to the lineage
(``mismatches``): the code of another model, or of the same model at another input
size, is refused, never shown as this build's.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import attrs
from attrs import field, frozen

from ..errors import FileFormatError, UsageError
from .codec import decode, encode
from .entry import APPEND, PAGED_DECODE, PAGED_PREFILL, RAGGED_PREFILL, kernel_role, of_any_length, runs_attention
from .jsonio import migrate, read_record, write_json
from .shapes import ANY_RANK
from .sitekey import builtin_keys
from .verification import SUSPECT, UNVERIFIED, VERIFIED, Member, Status, matching

SCHEMA = "relaytrace.code/2"
# /1 -> /2: kernels record their buffers' types (``KernelCode.params``); a /1 file has none
_MIGRATIONS = {"relaytrace.code/1": lambda data, where: {**data, "schema": SCHEMA}}


@frozen
class Call:
    """A line of a Relax function's text that calls ``callee`` (a kernel, a library
    function, a builtin), 1-based; the ``n``-th call of that callee in the text."""

    line: int
    callee: str
    n: int


@frozen
class FunctionCode:
    """One Relax function of the module the VM runs, as TVMScript, and its calls."""

    name: str
    text: str
    calls: tuple[Call, ...] = ()


@frozen
class Block:
    """One TIR block of a kernel's text: its name, its lines (1-based, ``end``
    inclusive), the buffers it reads and writes, and the index of the kernel member it
    came from (``KernelCode.members``; -1: none). A block of the built text names the
    fused blocks it was scheduled from (``sources``: a conv's block with its epilogue
    inlined, the conv's, the bias add's and the ReLU's)."""

    name: str
    line: int
    end: int
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    member: int = -1
    sources: tuple[str, ...] = ()


@frozen
class MemberCode:
    """A member PrimFunc of a kernel, in the order of the kernel's members
    (``BuildFacts.kernel_members``): its own blocks' names in order, the members that
    read its result, and whether its result is the kernel's. A member that is no
    PrimFunc (a Relax op left in the group) has no blocks."""

    prim_func: str
    blocks: tuple[str, ...] = ()
    consumers: tuple[int, ...] = ()
    result: bool = False


@frozen
class KernelCode:
    """A kernel's TIR as fusion left it (``fused``) and as built (``built``: "" when no
    schedule changed it), the blocks of each, its output buffers and its members, and
    the (shape, dtype) of each buffer the built kernel takes (``params``, in order; a
    symbolic dim by its name): what its call sites pass (``CallSite.arguments``)."""

    kernel: str
    fused: str
    blocks: tuple[Block, ...] = ()
    outputs: tuple[str, ...] = ()
    members: tuple[MemberCode, ...] = ()
    built: str = ""
    built_blocks: tuple[Block, ...] = ()
    params: tuple[tuple[tuple, str], ...] = ()


@frozen
class BlockCheck:
    """The verdict on one block of a kernel's fused text (``index`` into its blocks)."""

    index: int
    status: Status
    reasons: tuple[str, ...] = ()


@frozen
class Code:
    """Every Relax function the VM runs and every kernel's TIR, of one build."""

    functions: dict[str, FunctionCode] = field(factory=dict)
    kernels: dict[str, KernelCode] = field(factory=dict)
    problems: tuple[str, ...] = ()  # why some or all of the code is missing
    schema: str = SCHEMA

    @functools.cached_property
    def checks(self) -> dict[str, tuple[BlockCheck, ...]]:
        """Kernel -> the verdict on each block of its fused text (``check_blocks``), made
        once: the code view, the page and provenance.json all read these."""
        return {name: check_blocks(kernel) for name, kernel in self.kernels.items()}

    @functools.cached_property
    def built_checks(self) -> dict[str, tuple[BlockCheck, ...]]:
        """Kernel -> the verdict on each block of its built text (``built_checks``), made once."""
        return {name: built_checks(kernel) for name, kernel in self.kernels.items()}

    def to_json(self) -> dict:
        """The code as plain JSON data, as ``save`` writes it."""
        return {"schema": self.schema, **encode(self)}

    def save(self, path, overwrite: bool = False) -> Path:
        """Write JSON atomically; an existing file is kept unless ``overwrite``."""
        return write_json(path, self.to_json(), overwrite)

    @classmethod
    def load(cls, path) -> Code:
        """The code saved at ``path``; a file that is not one is a one-line
        ``FileFormatError`` naming the file and the field."""
        return read_record(path, "code", _code_of)


def _code_of(data, where: str) -> Code:
    """The code a ``code.json``'s JSON value holds (``where`` names the file), migrated
    from an earlier schema, checked field by field and against itself."""
    data = migrate(data, _MIGRATIONS, SCHEMA, "code", where, "`relaytrace profile` (it writes code.json)")
    code = decode(Code, data, where)
    problem = next(contradictions(code), None)
    if problem:
        raise FileFormatError(f"{where}: {problem}: write it again with `relaytrace profile`")
    return code


def contradictions(code: Code):
    """What in ``code`` contradicts itself, each in words naming the field: a call at a
    line its function's text does not have, a block whose lines are not within its
    kernel's text (a range to line 10⁹ froze the report's page), a block's member or a
    member's consumer that is no member of its kernel."""
    for name, function in code.functions.items():
        count = function.text.count("\n") + 1
        for i, call in enumerate(function.calls):
            if not 1 <= call.line <= count:
                yield f"functions[{name!r}].calls[{i}].line is {call.line}, not a line of its {count}"
    for name, kernel in code.kernels.items():
        members = len(kernel.members)
        for part, text, blocks in (
            ("blocks", kernel.fused, kernel.blocks),
            ("built_blocks", kernel.built, kernel.built_blocks),
        ):
            count = text.count("\n") + 1
            for i, block in enumerate(blocks):
                where = f"kernels[{name!r}].{part}[{i}]"
                if not 1 <= block.line <= block.end <= count:
                    yield f"{where} spans lines {block.line} to {block.end}, not within its text's {count}"
                if not -1 <= block.member < members:
                    yield f"{where}.member is {block.member}, not one of the kernel's {members} members"
        for i, member in enumerate(kernel.members):
            for consumer in member.consumers:
                if not 0 <= consumer < members:
                    yield f"kernels[{name!r}].members[{i}] is read by member {consumer}, not one of its {members}"


def mismatches(lineage, code: Code):
    """What in ``code`` says it is not the code of ``lineage``'s build, each in words
    naming the field: a kernel that is neither one its sites call nor one its KV cache
    is given, a buffer of another dtype or fixed size than a call site of the kernel
    passes (the same model at another input size), a function the lineage's sites run
    in that the code lacks."""
    cache = lineage.build.kv_cache
    known = set(lineage.kernels) | set(cache.kernels if cache is not None else ())
    for name, kernel in code.kernels.items():
        where = f"kernels[{name!r}]"
        if name not in known:
            yield f"{where} is no kernel of this build ({lineage.build.model})"
            continue
        problem = next(
            (
                f"{where}.{p} {s.label} passes"
                for s in lineage.kernels.get(name, ())
                if (p := _params_problem(kernel.params, s.arguments))
            ),
            None,
        )
        if problem:
            yield problem
    if code.functions:
        for function in dict.fromkeys(text_of(s) for s in lineage.call_sites if not s.library):
            if function not in code.functions:
                yield f"functions lacks {function!r}, which this build's kernels are called in"


def _params_problem(params, arguments) -> str:
    """How a kernel's buffer types (``KernelCode.params``) differ from what a call of
    it passes (a dim compared where both are fixed), in words, or ""; a kernel saved
    without them (schema /1), or a site whose arguments were not read, is not judged."""
    if not params or not arguments:
        return ""
    if len(params) != len(arguments):
        return f"params are {len(params)} buffers, not the {len(arguments)}"
    for i, ((shape, dtype), (given, given_dtype)) in enumerate(zip(params, arguments)):
        ranked = len(shape) == len(given) or ANY_RANK in (*shape, *given)
        agree = all(a == b for a, b in zip(shape, given) if isinstance(a, int) and isinstance(b, int))
        if dtype != given_dtype or not ranked or not agree:
            return f"params[{i}] is {list(shape)} {dtype}, not the {list(given)} {given_dtype}"
    return ""


_SUFFIX = re.compile(r"_?\d+$")


def check_blocks(kernel: KernelCode) -> tuple[BlockCheck, ...]:
    """Each fused block held to its member (see the module's docstring): its name is
    its member's block at the same place (a repeat numbered), and the member's result
    reaches what the members' data flow says (each consumer reads it; the kernel's
    result lands in an output buffer). Pure; a kernel whose blocks do not line up with
    its members' is unverified, block by block."""
    by_member: dict[int, list[int]] = {}
    for i, b in enumerate(kernel.blocks):
        by_member.setdefault(b.member, []).append(i)
    expected = sum(len(m.blocks) for m in kernel.members)
    if expected != len(kernel.blocks):
        why = f"the kernel has {len(kernel.blocks)} blocks, its members {expected}: they do not line up"
        return tuple(BlockCheck(i, UNVERIFIED, (why,)) for i in range(len(kernel.blocks)))
    reasons: dict[int, list[str]] = {i: [] for i in range(len(kernel.blocks))}
    for i, b in enumerate(kernel.blocks):
        if not 0 <= b.member < len(kernel.members):
            reasons[i].append(f"block {b.name} is given to no member of the kernel")
            continue
        member = kernel.members[b.member]
        place = by_member[b.member].index(i)
        own = member.blocks[place] if place < len(member.blocks) else None
        if own is None or (b.name != own and _SUFFIX.sub("", b.name) != _SUFFIX.sub("", own)):
            reasons[i].append(f"block {b.name} is not {member.prim_func}'s block {own or '(none left)'}")
    for m, member in enumerate(kernel.members):
        blocks = by_member.get(m, [])
        if not blocks:
            continue
        last = kernel.blocks[blocks[-1]]
        for c in member.consumers:
            read = {r for j in by_member.get(c, []) for r in kernel.blocks[j].reads}
            if by_member.get(c) and not read.intersection(last.writes):
                reasons[blocks[-1]].append(
                    f"block {last.name} writes {', '.join(last.writes) or 'nothing'}, which no block of "
                    f"{kernel.members[c].prim_func} (its consumer) reads"
                )
        if member.result and not set(last.writes).intersection(kernel.outputs):
            reasons[blocks[-1]].append(
                f"block {last.name} writes {', '.join(last.writes) or 'nothing'}, not the kernel's output "
                f"({', '.join(kernel.outputs)})"
            )
    return tuple(BlockCheck(i, SUSPECT if r else VERIFIED, tuple(r)) for i, r in reasons.items())


def built_checks(kernel: KernelCode) -> tuple[BlockCheck, ...]:
    """The verdict on each block of a kernel's built text: never verified. Which fused
    blocks a schedule made it from is read from names and buffers
    (``tracking.code._scheduled``), not checked against anything independent."""
    out = []
    for i, b in enumerate(kernel.built_blocks):
        why = (
            f"a block a schedule made, from {', '.join(b.sources)} by its name and buffers (read, not checked)"
            if b.sources
            else "a block a schedule made from no fused block its name or buffers name"
        )
        out.append(BlockCheck(i, UNVERIFIED, (why,)))
    return tuple(out)


def block_origins(
    site, members: tuple[Member, ...], kernel: KernelCode, origins, edges: set
) -> tuple[dict[int, str], bool]:
    """(member index -> the origin id it computes at call site ``site``, whether data flow
    left a choice open). The site's origins are given to the kernel's members one to one
    by op; where a kernel has two members of one op (a conv's bias add and a residual
    add), the way that makes the most of the members' data flow (``MemberCode.consumers``)
    the origins' (``edges``: (producer, consumer) origin ids) wins, and when two ways tie
    the first is taken and the answer says so. A member that computes part of an op
    (``Member.part``) is given the origin of the member its result flows into that does
    the same op. Past ``_TRIES`` ways, the first one-to-one match by op, said open. When
    the code's members are not the truth's (``tracking.code`` could not line them up),
    no block is given an origin: a member's index names different PrimFuncs in each."""
    if len(kernel.members) != len(members):
        return {}, False
    known = [i for i, m in enumerate(members) if m.ops and not m.part]
    claimants = [origins[o] for o in site.origin_ids]
    options = [[c.id for c in claimants if c.op in members[i].ops] for i in known]
    ways = 1
    for o in options:
        ways *= max(len(o), 1)
    if ways > _TRIES:
        match = matching([members[i] for i in known], claimants)
        found = {known[i]: claimants[j].id for i, j in match.items()}
        return _with_parts(found, members, kernel, origins), ways > 1
    flows = [(a, c) for a, m in enumerate(kernel.members) for c in m.consumers]
    leaves: list[tuple[int, int, dict[int, str]]] = []
    _search_blocks(0, {}, known, options, flows, edges, leaves)
    top = max((score, size) for score, size, _ in leaves)
    best = [found for score, size, found in leaves if (score, size) == top]
    return _with_parts(best[0], members, kernel, origins), len(best) > 1


def _search_blocks(  # noqa: PLR0913 - the search's state, passed down rather than closed over
    k: int, taken: dict[int, str], known: list[int], options: list[list[str]], flows, edges: set, leaves: list
) -> None:
    """``block_origins``' search from member ``known[k]`` on, ``taken`` (member index ->
    origin id) so far: each way to give the rest an origin of its ``options`` one to one
    (a member whose options are all taken, or that has none, goes without) is appended
    to ``leaves`` as (the data-flow edges it keeps, how many members it gives an origin,
    the assignment), in search order. A function of the module, not a closure that
    calls itself: that is a reference cycle per call, left for the collector."""
    if k == len(known):
        leaves.append((sum((taken.get(a), taken.get(c)) in edges for a, c in flows), len(taken), dict(taken)))
        return
    used = set(taken.values())
    for oid in options[k]:
        if oid not in used:
            taken[known[k]] = oid
            _search_blocks(k + 1, taken, known, options, flows, edges, leaves)
            del taken[known[k]]
    if not options[k] or all(o in used for o in options[k]):
        _search_blocks(k + 1, taken, known, options, flows, edges, leaves)


def _with_parts(found: dict[int, str], members, kernel: KernelCode, origins) -> dict[int, str]:
    """``found`` with each member computing part of an op given the origin of the first
    member downstream of it (``MemberCode.consumers``) that computes that op."""
    out = dict(found)
    for i, m in enumerate(members):
        if not (m.part and m.ops) or i in out:
            continue
        queue, seen = list(kernel.members[i].consumers), {i}
        while queue:
            j = queue.pop(0)
            if j in seen:
                continue
            seen.add(j)
            if j in found and origins[found[j]].op in m.ops:
                out[i] = found[j]
                break
            queue += kernel.members[j].consumers
    return out


_TRIES = 720  # ways of giving a kernel's members their origins tried before settling for the first


def require(code: Code | None) -> Code:
    """``code``, or a one-line error saying how to have it."""
    if code is None:
        raise UsageError(
            "this lineage carries no code: a build traced by this version saves it (code.json beside "
            "lineage.json); load it with Code.load(path) and lineage.with_code(code)"
        )
    return code


@frozen
class SiteCode:
    """One call of a kernel in the code: the Relax function and line that call it (0:
    not found in the text), its kernel, the origin each of the kernel's blocks computes
    there (``owners``: (block index, origin id); a block of no model op left out),
    whether data flow left the choice between like ops open (``ambiguous``), the
    verdict on each block, and, in a layer's code, the blocks computing that layer
    (``blocks``)."""

    label: str
    kernel: str
    function: str
    line: int
    owners: tuple[tuple[int, str], ...] = ()
    ambiguous: bool = False
    checks: tuple[BlockCheck, ...] = ()
    blocks: tuple[int, ...] = ()


@frozen
class LayerCode:
    """What the compiler made of one layer: its origins and, for each call site running
    one of them, where the Relax program calls it and which blocks compute it."""

    layer: str
    origins: tuple[str, ...]
    sites: tuple[SiteCode, ...] = ()


def text_of(site) -> str:
    """The Relax function whose text calls ``site``: its innermost subfunction, else its entry."""
    return site.scope[-1].function if site.scope else site.function


def call_lines(code: Code) -> dict[tuple[str, str], list[int]]:
    """(function, callee) -> the lines of the function's text that call it, in order."""
    out: dict[tuple[str, str], list[int]] = {}
    for name, function in code.functions.items():
        for c in function.calls:
            out.setdefault((name, c.callee), []).append(c.line)
    return out


def site_lines(lineage, code: Code) -> dict[int, int]:
    """Site position -> the line of its call in its function's text (``text_of``): the
    ``n``-th call of its kernel in that text is the ``n``-th site of the kernel in one
    run of the function, in run order; a function whose text calls a kernel another
    number of times than it has sites has none of that kernel's lines."""
    frames: dict[tuple[str, str, str], list] = {}
    for sites in lineage.kernels.values():
        for s in sites:
            frames.setdefault((text_of(s), s.scope, s.kernel), []).append(s)
    calls = call_lines(code)
    out: dict[int, int] = {}
    for (name, _, kernel), sites in frames.items():
        lines = calls.get((name, kernel), [])
        if len(lines) == len(sites):
            out.update((s.position, line) for s, line in zip(sorted(sites, key=lambda s: s.position), lines))
    return out


@frozen
class CacheRun:
    """A KV cache's kernel run inside a VM builtin (``attention_with_fused_qkv``): the
    builtin's call in the Relax text, the kernel, and the origin the builtin computes
    (its attention op), whose layer every block of the kernel computes there."""

    label: str
    kernel: str
    function: str
    line: int
    origin: str


def cache_runs(lineage, code: Code) -> tuple[CacheRun, ...]:
    """The KV-cache kernels (``BuildFacts.kv_cache``) each builtin call that runs
    attention through the cache (``entry.runs_attention``) runs, in run order: the
    append, and the ragged and paged prefill in an entry that takes any number of tokens
    (``entry.of_any_length``), the paged decode in one that takes one (``kernel_role``).
    What a served profile bills to the attention layers, which no kernel call site names."""
    cache = lineage.build.kv_cache
    if cache is None:
        return ()
    calls = call_lines(code)
    keys = builtin_keys(lineage.builtins)
    seen: dict[tuple[str, str], int] = {}
    out = []
    for b in sorted(lineage.builtins, key=lambda b: b.position):
        if b.scope:  # a subfunction's builtin: its text is the subfunction's
            continue
        n = seen[(b.function, b.name)] = seen.get((b.function, b.name), -1) + 1  # its line: the n-th of its text's
        if not runs_attention(b.name) or not b.origins:
            continue
        lines = calls.get((b.function, b.name), [])
        line = lines[n] if n < len(lines) else 0
        prefill = of_any_length(lineage.build.params.get(b.function, ()))
        roles = (APPEND, RAGGED_PREFILL, PAGED_PREFILL) if prefill else (APPEND, PAGED_DECODE)
        out += [
            CacheRun(f"{b.function}:{keys[b.position].in_entry}", k, b.function, line, b.origins[0])
            for k in cache.kernels
            if k in code.kernels and kernel_role(cache, k) in roles
        ]
    return tuple(out)


def code_sites(lineage, code: Code) -> tuple[SiteCode, ...]:
    """Every call of a kernel in the code, in run order: each call site (its kernel's
    blocks given their origins by ``block_origins``; a library call's kernel has no
    code, and no blocks), then each KV-cache kernel's runs in attention builtins
    (``cache_runs``: every block the attention op's)."""
    lines = site_lines(lineage, code)
    edges = set(lineage.edges)
    checks = code.checks
    out = []
    for site in lineage.call_sites:
        kernel = code.kernels.get(site.kernel)
        owners: tuple[tuple[int, str], ...] = ()
        ambiguous = False
        if kernel is not None:
            members = lineage.build.kernel_members.get(site.kernel, ())
            found, ambiguous = block_origins(site, members, kernel, lineage.origins, edges)
            owners = tuple((i, found[b.member]) for i, b in enumerate(kernel.blocks) if b.member in found)
        out.append(
            SiteCode(
                site.label,
                site.kernel,
                text_of(site),
                lines.get(site.position, 0),
                owners,
                ambiguous,
                checks.get(site.kernel, ()),
            )
        )
    for run in cache_runs(lineage, code):
        kernel = code.kernels[run.kernel]
        owners = tuple((i, run.origin) for i in range(len(kernel.blocks)))
        out.append(
            SiteCode(f"{run.label} {run.kernel}", run.kernel, run.function, run.line, owners, False, checks[run.kernel])
        )
    return tuple(out)


def layer_code(lineage, code: Code, layer: str) -> LayerCode:
    """The code of ``layer`` (a name ``lineage.resolve`` accepts): each call of a kernel
    that runs one of its origins (``code_sites``, in run order), the blocks computing
    them marked."""
    # its ops, and the ops a pass inserted for it (a layout transform bears its layer's name)
    wanted = set(lineage.resolve(layer)) | {o.id for o in lineage.origins.values() if o.layer == layer}
    by_label = {s.label: s for s in lineage.call_sites}
    out = []
    for site in code_sites(lineage, code):
        ran = by_label[site.label].origin_ids if site.label in by_label else ()
        mine = tuple(i for i, o in site.owners if o in wanted)
        if mine or wanted.intersection(ran):
            out.append(attrs.evolve(site, blocks=mine))
    return LayerCode(layer, tuple(sorted(wanted)), tuple(out))
