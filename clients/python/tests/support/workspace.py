"""Tools that record their calls and answer from a small fake workspace: plain functions, their
schemas made from their type hints."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from reactstep import Tool, ToolContext, tool

FILES = {
    "src/auth.ts": "export function login(user: string) { return session(user); }\n",
    "src/session.ts": "export function session(user: string) { return { user }; }\n",
}


@dataclass
class Call:
    tool: str
    args: dict[str, Any]
    tool_call_id: str | None
    thread: str


@dataclass
class Workspace:
    calls: list[Call] = field(default_factory=list)
    tools: list[Tool[Any, Any]] = field(default_factory=list)

    def tool_names(self) -> list[str]:
        return [call.tool for call in self.calls]


def workspace(*, read_needs_approval: bool = False) -> Workspace:
    made = Workspace()

    def note(name: str, args: dict[str, Any], context: ToolContext) -> None:
        made.calls.append(Call(name, args, context.tool_call_id, threading.current_thread().name))

    @tool(needs_approval=read_needs_approval)
    def read_file(path: str, context: ToolContext) -> str:
        """Read a file of the workspace."""
        note("read_file", {"path": path}, context)
        if path not in FILES:
            raise FileNotFoundError(f"no such file: {path}")
        return FILES[path]

    @tool
    def search(query: str, context: ToolContext) -> str:
        """Search the workspace for a text; the paths of the files holding it."""
        note("search", {"query": query}, context)
        return "\n".join(path for path, text in FILES.items() if query in text)

    made.tools = [read_file, search]
    return made
