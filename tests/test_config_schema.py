"""The editors' JSON Schema (zerolab/data/deepspeed_config.schema.json) is generated from the key
declarations (zerolab/config/keys.py): it must match them (regenerate it with
``python tools/make_config_schema.py``), and the configs zerolab ships must pass it."""
import json
import pathlib

import pytest

from zerolab.config.keys import config_schema

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "zerolab" / "data" / "deepspeed_config.schema.json"


def test_the_schema_file_matches_the_declarations():
    assert json.loads(SCHEMA.read_text(encoding="utf-8")) == json.loads(json.dumps(config_schema())), \
        "zerolab/data/deepspeed_config.schema.json is stale: run python tools/make_config_schema.py"


def test_the_shipped_configs_pass_the_schema_and_a_typo_does_not():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    for path in sorted((ROOT / "configs").glob("*.json")):
        jsonschema.validate(json.loads(path.read_text(encoding="utf-8")), schema)
    for bad in ({"train_batch_size": 8, "zero_optimization": {"stage": 4}},
                {"train_batch_size": 8, "zero_optimization": {"offload_optimzer": {}}},
                {"train_batch_size": "auto"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    jsonschema.validate({"train_batch_size": 8, "zero_optimization": {"stage": 3, "prefetch_bucket_size": 5e7,
                                                                      "offload_param": {"device": "cpu"}}}, schema)
