"""The contract and the client cannot drift apart: the committed models are what
datamodel-codegen makes of openapi.yaml now, the literal lists written by hand equal the
generated ones, the statuses equal the spec's table, and the spec's own examples read as the
client's models."""

from __future__ import annotations

import filecmp
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, get_args

import yaml

from reactstep import STATUS_OF, ErrorBody, ErrorType, StepResponse, StepStatus
from reactstep._generated import StepFields

PACKAGE = Path(__file__).resolve().parent.parent
REPOSITORY = PACKAGE.parent.parent
COMMITTED = PACKAGE / "src" / "reactstep" / "_generated.py"


def test_the_committed_models_are_what_datamodel_codegen_generates_from_openapi_yaml(tmp_path: Path) -> None:
    settings = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["tool"]["datamodel-codegen"]
    assert settings["input"] == "../../openapi.yaml"
    assert settings["output"] == "src/reactstep/_generated.py"
    fresh = tmp_path / "_generated.py"
    # The very command README.md gives, with the output sent to a temporary file.
    generator = Path(sys.executable).parent / "datamodel-codegen"
    run = subprocess.run([str(generator), "--output", str(fresh)], cwd=PACKAGE, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert filecmp.cmp(fresh, COMMITTED, shallow=False), (
        "src/reactstep/_generated.py differs from openapi.yaml: in clients/python run `datamodel-codegen --output "
        "/tmp/_generated.py && cp /tmp/_generated.py src/reactstep/_generated.py` (README.md) and commit it"
    )


def test_the_literal_lists_written_by_hand_equal_the_generated_ones() -> None:
    assert set(get_args(ErrorType)) == set(get_args(ErrorBody.model_fields["type"].annotation))
    status = StepFields.model_fields["status"].annotation
    assert set(get_args(StepStatus)) == set(get_args(status))
    assert set(STATUS_OF) == set(get_args(ErrorType))


def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPOSITORY / "openapi.yaml").read_text())
    return loaded


def test_each_error_types_status_is_the_one_of_the_specs_table() -> None:
    rows = re.findall(r"^\| (\d{3}) \| `(\w+)` \|", spec()["info"]["description"], flags=re.MULTILINE)
    assert len(rows) == len(STATUS_OF)
    assert {kind: int(status) for status, kind in rows} == STATUS_OF


def test_the_specs_examples_read_as_the_clients_models() -> None:
    paths = spec()["paths"]
    answers = paths["/api/agent/react_step"]["post"]["responses"]["200"]["content"]["application/json"]["examples"]
    for example in answers.values():
        step = StepResponse.model_validate(example["value"])
        assert step.status == "action_proposed" and step.action_details is not None
    refusals = spec()["components"]["responses"]["BadRequest"]["content"]["application/json"]["examples"]
    for example in refusals.values():
        error = StepResponse.model_validate(example["value"])
        assert error.error is not None and error.error.fields
