"""The JSON Schemas in docs/schemas/ are those the records make, and the files a run
writes hold to them (checked by a validator relaytrace does not use itself)."""

import json
import shutil

import jsonschema
import pytest

from relaytrace.errors import FileFormatError
from relaytrace.model.codec import decode
from relaytrace.model.lineage import Lineage
from relaytrace.model.provenance import Provenance
from relaytrace.render.page import PageData
from relaytrace.schemas import saved_files
from tools.schemas import main as write_schemas
from tools.schemas import schema_path, text

SCHEMAS = saved_files()


def test_the_schemas_in_the_docs_are_those_the_records_make():
    stale = [str(schema_path(f)) for f, s in SCHEMAS.items() if schema_path(f).read_text() != text(s)]
    assert not stale, f"run .venv/bin/python tools/schemas.py: {stale}"
    assert write_schemas(["--check"]) == 0
    for schema in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("file", ["lineage.json", "code.json", "profile.json", "provenance.json", "run.json"])
def test_each_file_of_a_run_holds_to_its_schema(tiny_out, file):
    data = json.loads((tiny_out / file).read_text())
    jsonschema.validate(data, SCHEMAS[file], cls=jsonschema.Draft202012Validator)


def test_a_tampered_provenance_file_fails_its_schema_and_its_reader_alike(tiny_out, tmp_path):
    data = json.loads((tiny_out / "provenance.json").read_text())
    assert Provenance.from_json(data).to_json() == data  # read back whole, written again the same
    for where, value in (("status", "maybe"), ("lines", [3]), ("member", None)):
        tampered = json.loads(json.dumps(data))
        next(k for k in tampered["kernels"].values() if k["blocks"])["blocks"][0][where] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(tampered, SCHEMAS["provenance.json"], cls=jsonschema.Draft202012Validator)
        with pytest.raises(FileFormatError, match=rf"blocks\[0\]\.{where}"):
            Provenance.from_json(tampered)
    shutil.copy(tiny_out / "lineage.json", tmp_path / "provenance.json")
    with pytest.raises(FileFormatError, match="not a provenance sidecar"):
        Provenance.from_json(json.loads((tmp_path / "provenance.json").read_text()))


def test_the_reports_page_data_holds_to_its_schema_and_names_each_site_by_its_id(tiny_out):
    page = (tiny_out / "report.html").read_text()
    inlined = page.split('<script type="application/json" id="relaytrace-data">', 1)[1].split("</script>", 1)[0]
    data = json.loads(inlined)
    jsonschema.validate(data, SCHEMAS["report.html"], cls=jsonschema.Draft202012Validator)
    page_data = decode(PageData, data, "report.html")  # the records' own reader takes it too
    lineage = Lineage.load(tiny_out / "lineage.json")
    assert [s.id for s in page_data.sites] == list(range(len(page_data.sites)))
    assert [s.label for s in page_data.sites] == [s.label for s in lineage.call_sites]  # run order
    for layer, ids in page_data.layer_sites:  # a layer's sites by id: those whose ops it owns or that serve it
        assert ids and all(layer in page_data.sites[i].layers or page_data.sites[i].category != "compute" for i in ids)
    assert page_data.memory is not None and page_data.memory.steps
    assert [page_data.sites[i].label for i in page_data.memory.step_sites if i is not None] == list(
        page_data.memory.steps
    )
    assert page_data.code is not None and page_data.code.sites
    assert all(page_data.sites[c.site].label == c.label for c in page_data.code.sites if c.site is not None)
    tampered = json.loads(inlined)
    tampered["layer_sites"][0][1][0] = "conv#0"  # a site named by its label, not its id
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(tampered, SCHEMAS["report.html"], cls=jsonschema.Draft202012Validator)
