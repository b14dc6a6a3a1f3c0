"""Tools as plain Python functions: the JSON Schema the model is shown comes from the type hints,
the description from the docstring, and a call's JSON arguments are checked and converted before
the function runs."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

from pydantic_core import to_jsonable_python

from ._signature import Signature, read_signature

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ToolContext:
    """What a tool may ask for by annotating a parameter with this type (it is not shown to the
    model)."""

    tool_call_id: str | None
    iteration: int
    cancel: threading.Event | asyncio.Event | None = None
    """The loop's cancel event: a long tool should stop when it is set."""

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


class Tool(Generic[P, R]):
    """A function the model may call.

    The name is the function's unless given; the description its docstring unless given. A tool
    that ``needs_approval`` runs only once the loop's ``approve`` callback agrees.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        needs_approval: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description if description is not None else inspect.getdoc(fn)
        self.needs_approval = needs_approval
        self.signature: Signature = read_signature(fn, self.name, ToolContext)
        self.parameters: dict[str, Any] = self.signature.schema()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, needs_approval={self.needs_approval})"

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def declaration(self) -> dict[str, Any]:
        """The tool as the request's ``tools`` declares it."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Runs the call in this thread (an async function in an event loop of its own)."""
        args, kwargs = self._arguments(arguments, context)
        result = self._any()(*args, **kwargs)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return observation_of(result)

    async def arun(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Runs the call: an async function in this event loop, another in a worker thread."""
        args, kwargs = self._arguments(arguments, context)
        if self.is_async:
            result = await self._any()(*args, **kwargs)
        else:
            result = await asyncio.to_thread(self._any(), *args, **kwargs)
        return observation_of(result)

    def _any(self) -> Callable[..., Any]:
        return self.fn

    def _arguments(
        self, arguments: Mapping[str, Any], context: ToolContext
    ) -> tuple[list[Any], dict[str, Any]]:
        args, kwargs = self.signature.call_arguments(arguments)
        if self.signature.context is not None:
            kwargs[self.signature.context] = context
        return args, kwargs


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, needs_approval: bool = False
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """``@tool`` or ``@tool(needs_approval=True)``: the function as a ``Tool``, still callable."""

    def made(function: Callable[P, R]) -> Tool[P, R]:
        return Tool(function, name=name, description=description, needs_approval=needs_approval)

    return made if fn is None else made(fn)


def as_tool(value: Tool[Any, Any] | Callable[..., Any]) -> Tool[Any, Any]:
    return value if isinstance(value, Tool) else Tool(value)


def observation_of(result: object) -> str:
    """What a tool returned, as the observation's text: a string as it is, anything else as JSON."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(to_jsonable_python(result), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


async def _awaited(value: Awaitable[object]) -> object:
    return await value
