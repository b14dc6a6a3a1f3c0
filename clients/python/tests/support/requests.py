"""Requests the tests share: a model for offline steps (``mock_response``) and one whose calls
go to the mock upstream, with a key shaped like OpenAI's."""

from __future__ import annotations

from typing import Any

OFFLINE: dict[str, Any] = {"modelName": "gpt-4o", "tokenLimit": 8192, "reservedOutputTokens": 512}
UPSTREAM_MODEL: dict[str, Any] = {**OFFLINE, "provider": "openai"}
KEY = "sk-test-0000000000000000000000"
TOOLS_SEGMENT = "- code_search(query) - search the code\n- read_file(path) - read a file"


def offline(mock: str, **extra: Any) -> dict[str, Any]:
    """An offline step whose model writes ``mock``."""
    return {
        "user_query": "Where is login handled?",
        "available_tools_prompt_segment": TOOLS_SEGMENT,
        "llm_config": OFFLINE,
        "mock_response": mock,
        **extra,
    }


def via_upstream(query: str = "Where is login handled?", **extra: Any) -> dict[str, Any]:
    """A step that goes to the mock upstream."""
    return {"user_query": query, "llm_config": UPSTREAM_MODEL, "user_api_keys": {"llmKey": KEY}, **extra}
