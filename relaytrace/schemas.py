"""Each file relaytrace writes from a record, and its JSON Schema (``model.schema``):
``tools/schemas.py`` writes them into docs/schemas/, and a test holds the written ones
to what this module makes and the files a run writes to them. ``report.html``'s is the
schema of the data inlined in the page (``<script id="relaytrace-data">``,
``render.page``), what its scripts read."""

from __future__ import annotations

import attrs

from .model.code import Code
from .model.lineage import Lineage
from .model.numerics import Comparison
from .model.profile import Profile
from .model.provenance import Provenance
from .model.run_spec import RunSpec
from .model.schema import json_schema
from .profiling.manifest import Manifest
from .profiling.runner.files import BUNDLE_SCHEMA
from .render.page import PageData


def saved_files() -> dict[str, dict]:
    """Each file relaytrace writes through the codec -> its JSON Schema: the record it
    holds, its ``schema`` field pinned to the version this relaytrace writes, and the
    fields written beside the record's own for scripts (derived, not read back)."""
    number, name = {"type": "number"}, {"type": ["string", "null"]}
    files = {
        "lineage.json": (Lineage, "relaytrace lineage", {}),
        "code.json": (Code, "relaytrace code", {}),
        "profile.json": (
            Profile,
            "relaytrace profile",
            {"site_times": {"type": "object", "additionalProperties": _triple(number)}},
        ),
        "compare.json": (Comparison, "relaytrace comparison", {"first_beyond": name, "first_nan": name}),
        "provenance.json": (Provenance, "relaytrace provenance", {}),
        "run.json": (RunSpec, "relaytrace run", {}),
        "bundle.json": (Manifest, "relaytrace bundle manifest", {}),
        "report.html": (PageData, "relaytrace report page data", {}),
    }
    out = {}
    for file, (cls, title, derived) in files.items():
        schema = json_schema(cls, title)
        top = schema["$defs"][cls.__name__]
        version = (
            BUNDLE_SCHEMA
            if cls is Manifest
            else next((f.default for f in attrs.fields(cls) if f.name == "schema"), None)
        )
        if isinstance(version, str):
            top["properties"]["schema"] = {"const": version}
        top["properties"].update(derived)
        out[file] = schema
    return out


def _triple(item: dict) -> dict:
    return {"type": "array", "prefixItems": [item] * 3, "minItems": 3, "maxItems": 3}
