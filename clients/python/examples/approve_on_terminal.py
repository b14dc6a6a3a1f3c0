"""A small agent loop in a folder, whose file writes you approve on the terminal.

    python examples/approve_on_terminal.py "Add a CHANGELOG.md saying what this folder holds"

reactstep must run at --url (``cargo run --release`` serves 127.0.0.1:8080). With
``OPENAI_API_KEY`` set the model is gpt-4o-mini; ``--offline`` plays a scripted model instead
(the service's ``mock_response``), so the loop runs without a key.

Reading and listing run at once; every write stops and asks: [y]es, [n]o (with a reason the
model is told), or [e]dit (new arguments as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from reactstep import (
    ApprovalRequest,
    Approve,
    Client,
    Decision,
    Deny,
    Edit,
    LoopEvent,
    LoopObservation,
    LoopThoughtDelta,
    Tool,
    tool,
)

SCRIPT = [
    'Thought: First I look at what the folder holds.\nAction: list_files(folder=".")',
    'Thought: I write the changelog.\nAction: write_file(path="CHANGELOG.md", content="# Changelog\\n\\n- First entry.\\n")',
    "Thought: The file is written, or the user said why not.\nFinal Answer: I asked to write CHANGELOG.md.",
]


def folder_tools(root: Path) -> list[Tool[..., str]]:
    """Tools confined to ``root``."""

    def inside(path: str) -> Path:
        resolved = (root / path).resolve()
        if not resolved.is_relative_to(root.resolve()):
            raise ValueError(f"{path} is outside the folder")
        return resolved

    @tool
    def list_files(folder: str = ".") -> str:
        """List the files of a folder, one path a line."""
        return "\n".join(sorted(str(p.relative_to(root)) for p in inside(folder).iterdir()))

    @tool
    def read_file(path: str) -> str:
        """Read a text file."""
        return inside(path).read_text()

    @tool(needs_approval=True)
    def write_file(path: str, content: str) -> str:
        """Write a text file, replacing what it held."""
        inside(path).write_text(content)
        return f"wrote {len(content)} characters to {path}"

    return [list_files, read_file, write_file]


def terminal_approver(ask: Callable[[str], str] = input) -> Callable[[ApprovalRequest], Decision]:
    """Asks on the terminal about each call that needs approval."""

    def approve(request: ApprovalRequest) -> Decision:
        print(f"\nThe model wants to run {request.tool}({json.dumps(request.arguments)})")
        while True:
            answer = ask("Run it? [y]es, [n]o, [e]dit: ").strip().lower()
            if answer in ("y", "yes"):
                return Approve()
            if answer in ("n", "no"):
                return Deny(ask("Why not (the model is told)? ").strip() or "the user said no")
            if answer in ("e", "edit"):
                edited = ask("New arguments, as a JSON object: ")
                try:
                    return Edit(json.loads(edited))
                except ValueError as error:
                    print(f"not JSON ({error}); asking again")

    return approve


def show(event: LoopEvent) -> None:
    if isinstance(event, LoopThoughtDelta):
        print(event.delta, end="", flush=True)
    elif isinstance(event, LoopObservation):
        print(f"\n[{event.tool}] {'error: ' if event.is_error else ''}{event.observation[:200]}")


def main(argv: list[str] | None = None, ask: Callable[[str], str] = input) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("question")
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--folder", type=Path, default=Path.cwd())
    parser.add_argument("--offline", action="store_true", help="a scripted model instead of OpenAI")
    args = parser.parse_args(argv)
    key = os.environ.get("OPENAI_API_KEY")
    if key is None and not args.offline:
        parser.error("set OPENAI_API_KEY, or run with --offline")
    with Client(args.url, retry=True) as client:
        result = client.run_loop(
            args.question,
            tools=folder_tools(args.folder),
            llm_config={"modelName": "gpt-4o-mini", "tokenLimit": 128000, "reservedOutputTokens": 2000},
            key=None if args.offline else key,
            mock_responses=SCRIPT if args.offline else None,
            approve=terminal_approver(ask),
            on_event=show,
        )
    print(f"\n\n{result.termination_reason}: {result.answer}")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
