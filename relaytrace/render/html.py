"""One self-contained HTML file: a header in words; where the time goes as an icicle
over the module hierarchy (click to zoom); one run's call sites as a timeline; the
roofline chart of the layers and its table (sorted by time above the bound); the
memory chart (live bytes at each kernel call, the peak; what is live at the call
clicked, and whose); a
detail pane for any layer, module or call site (ops with shapes, sites with roles,
pass history, source lines, median/min/max, verdicts); coverage, eliminated, inserted
and unresolved ops; the sortable, searchable tables; the layer graph, laid out in the
page by dagre, with pan, zoom, search and grouping by module depth.

No network: the data is inline JSON (``render.page``'s records); the script, styles
and the vendored d3-hierarchy and dagre (``assets/``, refreshed by
``tools/refresh_assets.sh``) are inlined at render time. The page is the template
``assets/report.html``, rendered by Jinja2 with autoescape: every value put in it is
text, except the data, styles and scripts, which are made ``Markup`` here, each made
safe for its element first.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
from markupsafe import Markup

from ..analysis import attribution
from ..model.codec import encode
from ..model.origin import Kind
from ..model.profile import ESTIMATE
from ..model.verification import Status
from .page import page_data

ASSETS = Path(__file__).parent / "assets"
_PAGE = jinja2.Environment(
    loader=jinja2.FileSystemLoader(ASSETS),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
).get_template("report.html")

_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_json(data) -> str:
    """``data`` as JSON to put inside a ``<script>`` element: ``<``, ``>`` and ``&`` are
    written as ``\\u`` escapes (so no ``</script>``, ``<!--`` or ``<script`` can end or
    derail the element, whatever a name holds), and so is every non-ASCII character
    (``ensure_ascii``: U+2028 and U+2029 too). ``JSON.parse`` of the element's text
    gives ``data`` back unchanged."""
    return json.dumps(data, ensure_ascii=True).translate(_SCRIPT_ESCAPES)


def _asset(name: str) -> str:
    return (ASSETS / name).read_text()


# The closed sets the page's scripts compare values with, mirrored into the page from
# the enums themselves (``NAMES.Kind.INSERTED``), never spelled in the scripts: a member
# renamed in Python cannot leave a comparison in JavaScript silently false.
PAGE_NAMES = (Kind, Status, attribution.Category)


def names_script() -> str:
    """``const NAMES = {...};``: each of ``PAGE_NAMES`` as ``{MEMBER: value}``."""
    return f"const NAMES = {script_json({e.__name__: {m.name: m.value for m in e} for e in PAGE_NAMES})};"


def _target_words(target: str) -> str:
    """``llvm, x86_64, 2 cores`` from a target's JSON (the raw text when it is not JSON)."""
    try:
        config = json.loads(target)
    except ValueError:
        return target
    if not isinstance(config, dict):
        return target
    words = [str(config.get("kind", "?"))]
    triple = str(config.get("mtriple", ""))
    words += [triple.split("-")[0]] if triple else []
    words += [str(config[k]) for k in ("mcpu", "arch", "model") if config.get(k)]
    words += [f"{config['num-cores']} cores"] if config.get("num-cores") else []
    return ", ".join(words)


def html_report(report, comparison=None) -> str:
    """The report page of a ``Report``: one self-contained HTML file. With a
    ``Comparison`` of the same model (``relaytrace compare``), each layer's pane also
    shows its output's error against the reference."""
    lineage, profile, cats, cov = report.lineage, report.profile, report.categories, report.coverage
    data = page_data(report, comparison)
    return _PAGE.render(
        model=lineage.build.model,
        header=_header(report),
        summary=profile.summary().splitlines(),
        sites=len(lineage.call_sites),
        kernels=len(lineage.kernels),
        policy=report.policy,
        caused=[(layer, us / 1e3) for layer, us in cats.inserted_by_layer[:6]],
        warnings=profile.warnings(),
        numerics=comparison.summary().splitlines()[0] if comparison is not None else "",
        divergence=comparison.divergence.summary() if comparison is not None and comparison.divergence else "",
        verdict=_verdict(report),
        verdict_class=(
            "bad"
            if cov.suspect or cov.problems or cov.suspect_layers
            else "warn"
            if cov.unverified or cov.unverified_layers
            else "good"
        ),
        problems=cov.problems,
        checks=bool(data.checks),
        inside=bool(data.inside),
        code=data.code is not None,
        coverage=cov,
        eliminated=[
            (o, lineage.origins[o].layer, lineage.origins[o].short_op, p) for o, p in lineage.eliminated().items()
        ],
        inserted=[
            (o.id, o.short_op, o.pass_name, ", ".join(dict.fromkeys(lineage.origins[x].layer for x in o.serves)))
            for o in lineage.inserted()
        ],
        unresolved=[(o.id, o.short_op, o.pass_name) for o in lineage.unresolved()],
        # Markup: relaytrace's own assets, and the data with no "<", ">" or "&" left in it
        styles=Markup(_asset("report.css")),
        data=Markup(script_json(encode(data))),
        scripts=[
            Markup(_asset("d3-hierarchy.min.js")),
            Markup(_asset("dagre.min.js")),
            Markup(names_script() + "\n" + _asset("pure.js")),
            Markup(_asset("report.js")),
            Markup(_asset("code.js")),
        ],
    )


def _verdict(report) -> str:
    """How much of the attribution was verified, in words."""
    cov, cats = report.coverage, report.categories
    layers = (
        f"; {cov.layers - len(cov.suspect_layers) - len(cov.unverified_layers)} of {cov.layers} layers "
        f"verified against the frontend's program"
        if cov.layers
        else ""
    )
    return (
        f"{cov.verified_sites} of {cov.call_sites} call sites verified against the compiled IR; "
        f"{len(cov.suspect)} suspect, {len(cov.unverified)} unverified{layers}"
        + (
            ""
            if not (cov.suspect or cov.unverified)
            else f": {(cats.suspect_us + cats.unverified_us) / 1e3:.3f} ms ran there, and may be billed "
            f"to the wrong layers below"
        )
    )


def _header(report) -> list[tuple[str, str]]:
    """The run in words: model, target, pipeline, entry and inputs, tuning, where and how
    it was measured, coverage and verification."""
    lineage, profile, cov = report.lineage, report.profile, report.coverage
    where = profile.remote or f"this machine ({profile.device})"
    build = lineage.build
    tuned = f"{len(build.tuned)} of {len(lineage.kernels)} kernels tuned" if build.tuned else "not tuned"
    status = (
        "complete and verified"
        if cov.complete
        else f"{cov.verified_sites} of {cov.call_sites} call sites verified, {len(cov.suspect)} suspect, "
        f"{len(cov.unverified)} unverified, {len(cov.unaccounted)} ops unaccounted"
        + (", degraded" if cov.degraded else "")
    )
    return [
        ("model", build.model),
        ("target", _target_words(build.target)),
        ("pipeline", build.pipeline),
        ("entry", profile.entry + _inputs(profile)),
        ("tuning", tuned),
        (
            "measured",
            f"on {where}, {profile.mode}, {profile.runs} run(s); figures are medians over runs"
            if profile.mode != ESTIMATE
            else f"NOT MEASURED: an estimate, each kernel's roofline lower bound on {profile.device}",
        ),
        ("lineage", f"{cov.attributed_sites} of {cov.call_sites} kernel call sites attributed; {status}"),
    ]


def _inputs(profile) -> str:
    """The concrete input shapes a profile ran, for the header."""
    if not profile.inputs:
        return ""
    shown = ", ".join(f"{n} {d}{list(sh)}" for n, sh, d in profile.inputs[:2])
    more = f", +{len(profile.inputs) - 2} more inputs" if len(profile.inputs) > 2 else ""
    return f" ({shown}{more})"
