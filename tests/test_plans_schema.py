"""The plans file's JSON Schema (``kvplan schema plans``): generated from the setting
declarations, published as examples/plans.schema.json, and it agrees with ``kvplan check``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.check.plans import plans_json_schema
from planner.cli.app import app
from planner.config.fields import SETTINGS

jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parent.parent
PLANS = ["examples/plans.yaml", "tests/golden/plans.yaml", "tests/golden/plans-features.yaml"]


def _validator() -> jsonschema.protocols.Validator:
    schema = plans_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_published_schema_is_the_generated_one() -> None:
    result = CliRunner().invoke(app, ["schema", "plans"])
    assert result.exit_code == 0, result.output
    published = (ROOT / "examples" / "plans.schema.json").read_text()
    assert json.loads(result.stdout) == json.loads(published), (
        "examples/plans.schema.json is stale: kvplan schema plans > examples/plans.schema.json"
    )


def test_the_example_plans_point_editors_at_it() -> None:
    first = (ROOT / "examples" / "plans.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=plans.schema.json"


@pytest.mark.parametrize("path", PLANS)
def test_every_plans_file_we_ship_validates(path: str) -> None:
    errors = list(_validator().iter_errors(yaml.safe_load((ROOT / path).read_text())))
    assert not errors, [e.message for e in errors]


def test_every_declared_setting_is_a_schema_property() -> None:
    properties = plans_json_schema()["$defs"]["deployment"]["properties"]
    for s in SETTINGS:
        assert s.yaml in properties, s.name
        if s.name != "headroom_bytes":  # a plans file also takes 5%: check reads it itself
            assert properties[s.yaml]["description"].startswith(s.help[:20])


@pytest.mark.parametrize(
    ("deployment", "why"),
    [
        ({"name": "a", "model": "m", "tp": "2"}, "'2' is not of type 'integer'"),
        ({"name": "a", "model": "m", "tp": 0}, "0 is less than the minimum of 1"),
        ({"name": "a", "model": "m", "gpu_memory_utilization": 90}, "greater than the maximum"),
        ({"name": "a", "model": "m", "kv_cache_dtype": "int4"}, "is not one of"),
        ({"name": "a", "model": "m", "tensor_paralel_size": 2}, "Additional properties"),
        ({"model": "m"}, "'name' is a required property"),
    ],
)
def test_the_schema_refuses_what_check_refuses(deployment: dict[str, object], why: str) -> None:
    errors = [e.message for e in _validator().iter_errors({"deployments": [deployment]})]
    assert any(why in e for e in errors), errors
