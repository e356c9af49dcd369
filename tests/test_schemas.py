"""The JSON Schemas in docs/schemas/ are those the records make, and the files a run
writes hold to them (checked by a validator relaytrace does not use itself)."""

import json
import shutil

import jsonschema
import pytest

from relaytrace.errors import FileFormatError
from relaytrace.model.provenance import Provenance
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
