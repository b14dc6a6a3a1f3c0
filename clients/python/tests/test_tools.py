"""Tools as plain functions: the JSON Schema made from their type hints (Optional, list,
Literal, defaults, pydantic models, Annotated descriptions), the docstring as description, the
context parameter left out, and the service accepting the schemas and checking calls by them."""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field, ValidationError

from reactstep import Client, ReactStepError, Tool, ToolContext, tool

from .support.service import Service


class Range(BaseModel):
    """Lines of a file, both ends included."""

    start: int = Field(ge=1)
    end: Optional[int] = None


class Mode(Enum):
    FAST = "fast"
    THOROUGH = "thorough"


@tool(needs_approval=True)
def read_lines(
    path: Annotated[str, Field(description="A path inside the workspace.")],
    lines: Range | None = None,
    encoding: Literal["utf-8", "latin-1"] = "utf-8",
    tags: list[str] = [],
    limit: Optional[int] = None,
    mode: Mode = Mode.FAST,
    *,
    context: ToolContext,
) -> str:
    """Read some lines of a file.

    The whole file when no range is given.
    """
    return f"{path}:{lines}:{encoding}:{tags}:{limit}:{mode.value}:{context.iteration}"


def test_the_schema_comes_from_the_type_hints() -> None:
    schema = read_lines.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["path"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert list(properties) == ["path", "lines", "encoding", "tags", "limit", "mode"]  # not the context
    assert properties["path"] == {"type": "string", "description": "A path inside the workspace."}
    assert properties["encoding"] == {"type": "string", "enum": ["utf-8", "latin-1"], "default": "utf-8"}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert properties["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    assert properties["lines"] == {"anyOf": [{"$ref": "#/$defs/Range"}, {"type": "null"}], "default": None}
    assert properties["mode"] == {"$ref": "#/$defs/Mode", "default": "fast"}
    assert schema["$defs"]["Range"]["properties"]["start"] == {"type": "integer", "minimum": 1}
    assert schema["$defs"]["Range"]["required"] == ["start"]
    assert schema["$defs"]["Range"]["description"] == "Lines of a file, both ends included."
    assert schema["$defs"]["Mode"]["enum"] == ["fast", "thorough"]
    assert all("title" not in value for value in properties.values())


def test_the_name_and_description_come_from_the_function_unless_given() -> None:
    assert read_lines.name == "read_lines"
    assert read_lines.description == "Read some lines of a file.\n\nThe whole file when no range is given."
    assert read_lines.needs_approval is True

    def plain(x: int) -> int:
        return x

    named = Tool(plain, name="double", description="Twice x.")
    assert (named.name, named.description, named.needs_approval) == ("double", "Twice x.", False)
    assert named.declaration() == {
        "name": "double",
        "description": "Twice x.",
        "parameters": named.parameters,
    }
    assert Tool(plain).description is None


def test_a_decorated_function_is_still_the_function() -> None:
    @tool
    def add(a: int, b: int = 2) -> int:
        """Add two numbers."""
        return a + b

    assert add(1) == 3
    assert add.run({"a": 1, "b": 5}, ToolContext(None, 1)) == "6"


def test_arguments_are_checked_and_converted_before_the_function_runs() -> None:
    context = ToolContext("call_1", 4)
    made = read_lines.run({"path": "a.py", "lines": {"start": 2}, "tags": ["x"], "mode": "thorough"}, context)
    assert made == "a.py:start=2 end=None:utf-8:['x']:None:thorough:4"
    for wrong in (
        {},
        {"path": "a.py", "encoding": "ascii"},
        {"path": "a.py", "lines": {"start": 0}},
        {"path": "a.py", "extra": 1},
    ):
        with pytest.raises(ValidationError):
            read_lines.run(wrong, context)


def test_positional_only_parameters_and_parameters_named_like_model_attributes_work() -> None:
    @tool
    def lookup(key: str, /, json: bool = False, schema: str = "s", copy: int = 0) -> str:
        return f"{key}:{json}:{schema}:{copy}"

    assert set(lookup.parameters["properties"]) == {"key", "json", "schema", "copy"}
    assert lookup.run({"key": "k", "json": True, "copy": 3}, ToolContext(None, 1)) == "k:True:s:3"


def test_a_parameter_without_a_hint_takes_any_value_and_star_args_are_refused() -> None:
    def loose(value):  # type: ignore[no-untyped-def]
        return value

    assert Tool(loose).parameters["properties"] == {"value": {}}
    assert Tool(loose).run({"value": [1, {"a": None}]}, ToolContext(None, 1)) == '[1, {"a": null}]'

    def star(*names: str) -> str:
        return ""

    with pytest.raises(TypeError, match=r"tool star: \*args and \*\*kwargs"):
        Tool(star)


@pytest.mark.parametrize(
    ("value", "observation"),
    [
        ("text", "text"),
        ({"a": [1, 2]}, '{"a": [1, 2]}'),
        (Range(start=3), '{"start": 3, "end": null}'),
        (None, "null"),
        (object, "<class 'object'>"),
    ],
    ids=["str", "dict", "model", "none", "not-json"],
)
def test_what_a_tool_returns_becomes_the_observations_text(value: Any, observation: str) -> None:
    def give() -> Any:
        return value

    assert Tool(give).run({}, ToolContext(None, 1)) == observation


def test_an_async_function_runs_in_either_loop() -> None:
    @tool
    async def later(n: int) -> int:
        """Add one, later."""
        await asyncio.sleep(0)
        return n + 1

    assert later.is_async
    assert later.run({"n": 1}, ToolContext(None, 1)) == "2"
    assert asyncio.run(later.arun({"n": 2}, ToolContext(None, 1))) == "3"


def test_the_service_accepts_the_schemas_and_checks_calls_against_them(service: Service) -> None:
    tools = [read_lines.declaration()]
    base = {
        "user_query": "Read a.py",
        "tools": tools,
        "llm_config": {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 512},
    }
    good = 'Thought: Read it.\nAction: {"name": "read_lines", "arguments": {"path": "a.py", "lines": {"start": 2}, "encoding": "latin-1"}}'
    bad = 'Thought: Read it.\nAction: {"name": "read_lines", "arguments": {"path": "a.py", "encoding": "ascii"}}'
    with Client(service.url) as client:
        step = client.step({**base, "mock_response": good})
        assert step.action_details is not None
        assert step.action_details.tool_args == {"path": "a.py", "lines": {"start": 2}, "encoding": "latin-1"}
        with pytest.raises(ReactStepError) as refused:
            client.step({**base, "mock_response": bad})
    assert refused.value.type == "invalid_model_output"
    assert "encoding" in refused.value.message
