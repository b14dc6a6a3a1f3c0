"""A function's parameters as a pydantic model: the JSON Schema the model is shown, and the
check that turns a call's JSON arguments into the function's Python arguments."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode
from pydantic_core import CoreSchema

_ARGS = inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD


@dataclass(frozen=True)
class Signature:
    """What the loop needs of a tool function's signature."""

    model: type[BaseModel]
    """The arguments' model: one field per parameter, named by alias after the parameter."""
    positional: tuple[str, ...]
    """Positional-only parameters, in order."""
    context: str | None
    """The parameter that takes the ``ToolContext``, left out of the schema."""

    def schema(self) -> dict[str, Any]:
        return self.model.model_json_schema(schema_generator=_Untitled)

    def call_arguments(self, arguments: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The function's positional and keyword arguments; ``ValidationError`` when they fail."""
        checked = self.model.model_validate(dict(arguments))
        values = {
            info.alias or name: getattr(checked, name) for name, info in type(checked).model_fields.items()
        }
        positional = [values.pop(name) for name in self.positional]
        return positional, values


def read_signature(fn: Callable[..., Any], name: str, context_type: type) -> Signature:
    """The signature of ``fn`` from its type hints (a parameter without one takes any value)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    positional: list[str] = []
    context: str | None = None
    for index, parameter in enumerate(inspect.signature(fn).parameters.values()):
        if parameter.kind in _ARGS:
            raise TypeError(f"tool {name}: *args and **kwargs cannot be described to a model")
        hint = hints.get(parameter.name, Any)
        if hint is context_type:
            context = parameter.name
            continue
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append(parameter.name)
        fields[f"p{index}"] = (hint, _field(parameter))
    model = create_model(f"{name}_arguments", __config__=_CONFIG, **fields)
    return Signature(model=model, positional=tuple(positional), context=context)


_CONFIG = ConfigDict(extra="forbid")


def _field(parameter: inspect.Parameter) -> Any:
    if parameter.default is inspect.Parameter.empty:
        return Field(alias=parameter.name)
    return Field(default=parameter.default, alias=parameter.name)


class _Untitled(GenerateJsonSchema):
    """JSON Schema without the titles pydantic makes up from names: tokens the model need not read."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> dict[str, Any]:
        made = super().generate(schema, mode)
        made.pop("title", None)
        return made
