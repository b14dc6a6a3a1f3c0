"""What a scripted model writes when asked for a plan or an evaluation, and the tool the plans
name: shared by the tests of plan() and evaluate(), their streams, and the loop's plan and reflect."""

from __future__ import annotations

import json
from typing import Any

READ_FILE: dict[str, Any] = {
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}

TWO_STEPS = (
    'Thought: Read it, then explain.\nFinal Answer: {"complexity": "medium", "steps": ['
    '{"step_number": 1, "description": "Read the test", "tool_name": "read_file", "parameters": {"path": "tests/login.rs"}}, '
    '{"step_number": 2, "description": "Explain the fix", "depends_on": [1], "required": false}], "estimated_iterations": 2}'
)


def scored(completeness: int, needs_retry: bool, missing: list[str] | None = None) -> str:
    """What the model says of an answer, as an evaluation's final answer."""
    evaluation = {
        "completeness_score": completeness,
        "quality_score": 6,
        "missing_info": missing or [],
        "suggestions": [f"find {m}" for m in missing or []],
        "needs_retry": needs_retry,
    }
    return f"Thought: Scored.\nFinal Answer: {json.dumps(evaluation)}"


def planned(estimated: int, first: str = "Read where login is", path: str = "src/auth.ts") -> str:
    """A plan's output for the workspace's tools: read ``path``, then answer."""
    plan = {
        "complexity": "medium",
        "steps": [
            {"step_number": 1, "description": first, "tool_name": "read_file", "parameters": {"path": path}},
            {"step_number": 2, "description": "Say what login returns", "depends_on": [1]},
        ],
        "estimated_iterations": estimated,
    }
    return f"Thought: Read, then answer.\nFinal Answer: {json.dumps(plan)}"
