"""Whether a saved build's facts make sense together, beyond each field's type, and
whether a profile is a run of that build: pure checks that ``Lineage.from_json`` runs
on every file it reads (``check_lineage``: all of them, here and nowhere else), and
``analysis.attribution.check_match`` on every pair.

The decoder checks each field's type and the references check that every name points
at something; an edited or corrupt file can still pass both and contradict itself (a
memory block of 10^30 bytes, a tensor live from step 99 to step -3, a negative FLOP
count, a stored verdict its own evidence does not give). Each such file is refused
with one line naming the file, the field and what a sound build has there, rather
than drawn as a figure that cannot be right.
"""

from __future__ import annotations

import math

from ..errors import FileFormatError, RelaytraceError
from .entry import cache_param, signature
from .roles import roles_for
from .shapes import ANY_RANK, bind
from .verification import verify
from .work import LIMIT, Poly, itemsize

_REDO = "the file was edited or is corrupt; trace the build again"
MAX_BYTES = 2**60  # a memory block beyond an exbibyte is no device's


def check_lineage(lineage, where: str, derived: bool = True) -> None:
    """A ``Lineage`` just read makes sense: every name it holds points at something it
    has, its counts and plans are ones a build can have, its memory plans name its own
    call sites, and (``derived``: a file of the current schema, made by today's rules)
    what the build derived from its facts is what they give now. A
    ``FileFormatError`` naming the file (``where``) and the field otherwise."""
    _check_references(lineage, where)
    _check_facts(lineage.build, where)
    _check_steps(lineage, where)
    if derived:
        _check_derived(lineage, where)


def _check_facts(build, where: str) -> None:
    """``build`` (``BuildFacts``) holds counts and plans a build can have: every work
    formula's coefficients within ``LIMIT`` and its constant ones at least 0, its
    parameters' dims sizes or symbols; every
    memory plan's block sizes so within ``MAX_BYTES``, its steps, lifetimes, shapes
    and dtypes in range and naming its own steps. A ``FileFormatError`` naming the field otherwise."""
    for kernel, work in build.work.items():
        for name in ("flops", "transcendentals"):
            _check_poly(getattr(work, name), f"{where}: build.work[{kernel!r}].{name}")
        for i, (shape, _) in enumerate(work.params):
            _check_dims(shape, f"{where}: build.work[{kernel!r}].params[{i}]")
    for entry, plan in build.memory.items():
        _check_plan(plan, f"{where}: build.memory[{entry!r}]")


def _check_steps(lineage, where: str) -> None:
    """Each entry's memory plan names its steps as the lineage names its call sites: in
    the sites' run order, every step a site of that entry (a plan leaves out the host
    functions that run after its steps are read: shape functions, symbolic
    expressions), so that a value's writer is a site the tables show."""
    for entry, plan in lineage.build.memory.items():
        labels = iter(s.label for s in sorted(lineage.call_sites, key=lambda s: s.position) if s.function == entry)
        for i, step in enumerate(plan.steps):
            if step not in labels:  # consumes the sites up to it: the steps must come in their order
                raise FileFormatError(
                    f"{where}: build.memory[{entry!r}].steps[{i}] {step!r} is no call site of "
                    f"{entry} after the one before it; {_REDO}"
                )


def _check_references(lineage, where: str) -> None:
    """Every origin id a site, builtin, history, elimination, served op or data-flow
    edge names is one of the lineage's origins; every edge and verdict is about a site
    that exists (kinds, roles and verdicts were checked as they were read: ``Name``)."""
    known = lineage.origins
    for kernel, sites in lineage.kernels.items():
        calls: dict[str, list[int]] = {}
        for site in sites:
            if site.kernel != kernel:
                raise FileFormatError(f"{where}: kernels[{kernel!r}] holds a site of {site.kernel!r}")
            calls.setdefault(site.function, []).append(site.call)
        for function, numbers in calls.items():
            if sorted(numbers) != list(range(len(numbers))):
                raise FileFormatError(
                    f"{where}: kernels[{kernel!r}] calls in {function} are {sorted(numbers)}, "
                    f"not 0 to {len(numbers) - 1}"
                )
    named = [(f"kernels[{s.kernel!r}] call {s.call}", r.origin) for s in lineage.call_sites for r in s.roles]
    named += [(f"builtin {b.name!r}", o) for b in lineage.builtins for o in b.origins]
    named += [("journal.history_by_origin", o) for o in lineage.journal.history_by_origin]
    named += [("journal.eliminated_by", o) for o in lineage.journal.eliminated_by]
    named += [("journal.explained", o) for o in lineage.journal.explained if o not in lineage.journal.eliminated_by]
    named += [(f"origin {o.id!r} serves", s) for o in known.values() for s in o.serves]
    named += [(f"edges[{i}]", o) for i, edge in enumerate(lineage.edges) for o in edge]
    for what, origin in named:
        if origin not in known:
            raise FileFormatError(f"{where}: {what} names origin {origin!r}, which the lineage does not have")
    positions = {s.position for s in lineage.call_sites} | {b.position for b in lineage.builtins}
    stray = [p for edge in lineage.site_edges for p in edge if p not in positions]
    if stray:
        raise FileFormatError(f"{where}: site_edges name call site position {stray[0]}, which no site has")
    if lineage.verification is not None:
        stray = [c.position for c in lineage.verification.sites if c.position not in positions]
        if stray:
            raise FileFormatError(f"{where}: verification names call site position {stray[0]}, which no site has")


def _check_derived(lineage, where: str) -> None:
    """What the build derived from the lineage's own facts is what they give now: each
    entry's tensors (``signature`` of its recorded params: one signature per entry),
    each site's roles (``roles_for`` its origins: one anchor, the heaviest model op) and
    the verification (``verify`` against the kernel members the file holds). A stored
    verdict its evidence does not give is an edited file, not a verified layer."""
    for entry, params in lineage.build.params.items():
        if lineage.build.entries.get(entry) != signature(params):
            raise FileFormatError(
                f"{where}: build.entries[{entry!r}] is not the tensors its build.params pass (each "
                "entry's inputs are derived from its parameters); the file was edited or is "
                "corrupt; trace the build again"
            )
    for site in lineage.call_sites:
        if site.roles != roles_for(site.origin_ids, lineage.origins):
            anchor = site.anchor or "none"
            raise FileFormatError(
                f"{where}: kernels[{site.kernel!r}] call {site.call} has roles its origins do "
                f"not give (anchor {anchor!r}; a site's anchor is its heaviest model op); the "
                "file was edited or is corrupt; trace the build again"
            )
    if lineage.verification is not None and lineage.verification != verify(lineage):
        derived = verify(lineage)
        stored_sites, sites = lineage.verification.by_position(), derived.by_position()
        odd = next(
            (
                f"call site position {p}"
                for p in sorted(set(stored_sites) | set(sites))
                if stored_sites.get(p) != sites.get(p)
            ),
            None,
        )
        stored_layers, layers = lineage.verification.by_layer(), derived.by_layer()
        odd = odd or next(
            (
                f"layer {name!r}"
                for name in sorted(set(stored_layers) | set(layers))
                if stored_layers.get(name) != layers.get(name)
            ),
            "its other problems",
        )
        raise FileFormatError(
            f"{where}: verification of {odd} is not what the lineage's own evidence gives "
            "(verification is derived from the sites and kernel members the file holds); "
            "the file was edited or is corrupt; trace the build again"
        )


def _check_poly(poly: Poly | None, where: str, limit: float = LIMIT) -> None:
    for coef, atoms in poly or ():
        if abs(coef) > limit or (not atoms and coef < 0):
            raise FileFormatError(
                f"{where} has the term {coef}{'*' if atoms else ''}{'*'.join(atoms)}: a count "
                f"is at least 0 and at most {limit:g}; {_REDO}"
            )


def _check_plan(plan, where: str) -> None:
    steps = len(plan.steps)
    known = set(plan.steps)
    for b, block in enumerate(plan.blocks):
        at = f"{where}.blocks[{b}]"
        _check_poly(block.bytes, f"{at}.bytes", MAX_BYTES)
        _check_lifetime(block.start, block.end, steps, at)
        for t, held in enumerate(block.tensors):
            there = f"{at}.tensors[{t}]"
            if held.site and held.site not in known:  # "": written by no kernel (a library call's output)
                raise FileFormatError(f"{there}.site {held.site!r} is none of the plan's steps; {_REDO}")
            _check_lifetime(held.first, held.last, steps, there)
            _check_tensor(held.shape, held.dtype, there)
    for w, weight in enumerate(plan.weights):
        there = f"{where}.weights[{w}]"
        _check_tensor(weight.shape, weight.dtype, there)
        stray = [s for s in weight.sites if s not in known]
        if stray:
            raise FileFormatError(f"{there}.sites name {stray[0]!r}, none of the plan's steps; {_REDO}")
    for i, (name, shape, dtype) in enumerate(plan.inputs + plan.unplanned):
        _check_tensor(
            shape,
            dtype,
            f"{where}.inputs[{i}] ({name!r})" if i < len(plan.inputs) else f"{where}.unplanned[{i - len(plan.inputs)}]",
        )


def _check_lifetime(first: int, last: int, steps: int, where: str) -> None:
    """A lifetime as ``tracking.memory`` reads one: from the first step after the
    allocation (``steps`` when none is) to the last step at or before the end (-1 when
    none is), so ``last`` is ``first - 1`` when no step falls between them."""
    if not (0 <= first <= steps and -1 <= last < steps and last >= first - 1):
        raise FileFormatError(
            f"{where} is live from step {first} to {last}: in a plan of {steps} steps a "
            f"lifetime starts at 0 to {steps} and ends at -1 to {steps - 1}, not before "
            f"the step before its start; {_REDO}"
        )


def _check_tensor(shape, dtype: str, where: str) -> None:
    if itemsize(dtype) is None:
        raise FileFormatError(f"{where}.dtype {dtype!r} is not a dtype TVM has (float32, float16, int64, ...); {_REDO}")
    _check_dims(shape, where)


def _check_dims(shape, where: str) -> None:
    """Each dim a size from 0 to ``LIMIT`` or a symbolic dim's name or expression."""
    if any(not isinstance(d, (int, str)) or isinstance(d, bool) for d in shape):
        raise FileFormatError(
            f"{where}.shape {list(shape)} has a dim that is neither a size nor a symbolic dim; {_REDO}"
        )
    if any(isinstance(d, int) and not 0 <= d <= LIMIT for d in shape):
        raise FileFormatError(f"{where}.shape {list(shape)} has a dim below 0 or beyond {LIMIT:g}; {_REDO}")


def profile_mismatches(lineage, profile) -> list[str]:
    """How ``profile`` contradicts being a run of ``lineage``'s build beyond its kernel
    calls (``Lineage.call_count_mismatches``): the inputs it ran with against the
    entry's parameters (``shapes.bind``), each call site's arguments as they ran
    against the site's as compiled (rank, dtype, every static dim), and a served step
    recorded for an entry that takes no KV cache. The same kernels at another width or
    batch are another build; its times are not this one's."""

    declared = {n: (n, s, d) for n, s, d in lineage.build.entries.get(profile.entry, ())}
    problems = [
        f"input {n!r}: the entry {profile.entry} takes no such input" for n, _, _ in profile.inputs if n not in declared
    ]
    if profile.inputs and not problems:
        try:
            bind(
                tuple(declared[n] for n, _, _ in profile.inputs),
                [(tuple(s), d) for _, s, d in profile.inputs],
                f"{lineage.build.model}.{profile.entry}",
            )
        except RelaytraceError as exc:
            problems.append(str(exc))
    for site in lineage.call_sites:
        ran = profile.arg(site.key)
        if ran is None or not site.arguments:
            continue
        if len(ran.shapes) != len(site.arguments):
            problems.append(
                f"{site.label} ran with {len(ran.shapes)} argument(s), the lineage's has {len(site.arguments)}"
            )
            continue
        for i, ((shape, dtype), got, got_dtype) in enumerate(zip(site.arguments, ran.shapes, ran.dtypes)):
            if tuple(shape) == (ANY_RANK,):
                continue
            if (
                dtype != got_dtype
                or len(shape) != len(got)
                or any(isinstance(d, int) and d != g for d, g in zip(shape, got))
            ):
                problems.append(
                    f"{site.label} argument {i} ran as {got_dtype}{list(got)}, compiled as {dtype}{list(shape)}"
                )
                break
    if profile.step and cache_param(lineage.build.params.get(profile.entry, ())) is None:
        problems.append(f"it records a served step {list(profile.step)}, but {profile.entry} takes no KV cache")
    sites = {(s.kernel, s.call): s for s in lineage.call_sites if s.function == profile.entry}
    for inside in profile.inside:
        problems += _inside_problems(inside, sites.get((inside.kernel, inside.call)))
    return problems


def _inside_problems(inside, site) -> list[str]:
    """How what was measured inside a kernel call (``model.inside.InsideSite``)
    contradicts the call site it names: no such site, parts timed in different numbers
    of runs, a time below 0 or not finite, an origin the site does not run."""
    where = f"inside {inside.kernel}#{inside.call}"
    if site is None:
        return [f"{where}: the entry has no such call site"]
    problems = []
    runs = sorted({len(p.us) for p in inside.parts})
    if len(runs) > 1:
        problems.append(f"{where}: its parts were timed in different numbers of runs ({runs})")
    if any(not math.isfinite(us) or us < 0 for p in inside.parts for us in p.us):
        problems.append(f"{where}: a part's time is below 0 or not finite")
    stray = [o for p in inside.parts for o in p.origins if o not in site.origin_ids]
    if stray:
        problems.append(f"{where}: a part computes origin {stray[0]!r}, which the call site does not run")
    return problems
