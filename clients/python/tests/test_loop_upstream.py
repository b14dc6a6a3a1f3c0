"""The loop against the server with its model at the mock upstream: native parallel calls
answered by the provider's own ids on the wire, fallback models each with its own key, and a
loop cancelled while the model is writing (the service stops the upstream call)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from reactstep import AsyncClient, Client, LoopEvent, LoopResult, LoopThoughtDelta, arun_loop, run_loop

from .support.drive import Kind, run
from .support.requests import UPSTREAM_MODEL
from .support.service import Service
from .support.upstream import Exchange, Hang, Upstream, completion, failure, tool_calls
from .support.workspace import FILES, workspace

NATIVE = {**UPSTREAM_MODEL, "tool_mode": "native"}
FIRST_KEY = "sk-first-model-key-0000000000"
FALLBACK_KEY = "sk-fallback-model-key-1111111111"
WELL_BEFORE_THE_SERVICES_LIMIT = 20.0


@pytest.mark.parametrize("stream", [True, False])
def test_native_parallel_calls_are_answered_on_the_wire_by_the_providers_ids(
    upstream_service: Service, upstream: Upstream, kind: Kind, stream: bool
) -> None:
    space = workspace()
    upstream.script.extend(
        [
            tool_calls(
                [
                    ("call_A1", "read_file", {"path": "src/auth.ts"}),
                    ("call_B2", "read_file", {"path": "src/session.ts"}),
                ]
            ),
            completion("Thought: login wraps session.\nFinal Answer: login returns session(user)."),
        ]
    )
    result = run(
        kind,
        upstream_service.url,
        "How does login work?",
        tools=space.tools,
        llm_config=NATIVE,
        key=FIRST_KEY,
        stream=stream,
    )
    assert result.termination_reason == "success", result.answer
    assert [(step.tool_call_id, step.args["path"]) for step in result.steps] == [
        ("call_A1", "src/auth.ts"),
        ("call_B2", "src/session.ts"),
    ]
    assert [request.stream for request in upstream.requests] == [stream, stream]
    # The second call to the model carries both results, each as the `tool` message of its call.
    messages = upstream.requests[1].body["messages"]
    calls = [call["id"] for message in messages for call in message.get("tool_calls") or []]
    answers = [
        (message["tool_call_id"], message["content"]) for message in messages if message["role"] == "tool"
    ]
    assert calls == ["call_A1", "call_B2"]
    assert [call_id for call_id, _ in answers] == ["call_A1", "call_B2"]
    assert FILES["src/auth.ts"].strip() in answers[0][1] and FILES["src/session.ts"].strip() in answers[1][1]
    # The tools' schemas reached the model as made from their type hints.
    declared = {
        tool["function"]["name"]: tool["function"]["parameters"]
        for tool in upstream.requests[0].body["tools"]
    }
    assert declared["read_file"] == {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }


def test_a_rate_limited_first_model_falls_back_each_model_called_with_its_own_key(
    upstream_service: Service, upstream: Upstream, kind: Kind
) -> None:
    limited = failure(429)
    answer = completion("Thought: The session wraps the user.\nFinal Answer: login returns a session.")

    def by_model(exchange: Exchange) -> None:
        (limited if exchange.request.body["model"] == "gpt-4o" else answer)(exchange)

    upstream.fallback = by_model
    llm_config = {**UPSTREAM_MODEL, "fallbacks": [{"provider": "openai", "modelName": "gpt-4o-mini"}]}
    result = run(
        kind,
        upstream_service.url,
        "What does login return?",
        tools=[],
        llm_config=llm_config,
        key=FIRST_KEY,
        provider_keys={"openai": FALLBACK_KEY},
        request={"session_id": "fallback-session"},
    )
    assert result.termination_reason == "success", result.answer
    assert result.answer == "login returns a session."
    assert [(request.body["model"], request.headers["authorization"]) for request in upstream.requests] == [
        ("gpt-4o", f"Bearer {FIRST_KEY}"),
        ("gpt-4o-mini", f"Bearer {FALLBACK_KEY}"),
    ]
    assert result.session_id == "fallback-session"
    assert result.usage.prompt_tokens == 100 and result.usage.completion_tokens == 12


def test_cancelling_a_sync_loop_while_the_model_writes_cuts_the_stream_and_the_service_stops(
    upstream_service: Service, upstream: Upstream
) -> None:
    held = Hang("Thought: I will take a long look at everything first.\n")
    upstream.script.append(held)
    cancel = threading.Event()

    def on_event(event: LoopEvent) -> None:
        if isinstance(event, LoopThoughtDelta):
            cancel.set()

    started = time.monotonic()
    with Client(upstream_service.url) as client:
        result = run_loop(
            client,
            "Look",
            tools=workspace().tools,
            llm_config=UPSTREAM_MODEL,
            key=FIRST_KEY,
            cancel=cancel,
            on_event=on_event,
        )
    # At once: not when the service gives up on the silent model (its limit is 60 s).
    assert time.monotonic() - started < WELL_BEFORE_THE_SERVICES_LIMIT
    assert (result.termination_reason, result.answer, result.iterations) == (
        "cancelled",
        "the loop was cancelled",
        0,
    )
    assert result.errors == []
    assert held.closed.wait(20)


def test_cancelling_an_async_loop_while_the_model_writes_stops_the_step_at_once(
    upstream_service: Service, upstream: Upstream
) -> None:
    held = Hang("Thought: I will take a long look at everything first.\n")
    upstream.script.append(held)

    async def main() -> LoopResult:
        cancel = asyncio.Event()

        def on_event(event: LoopEvent) -> None:
            if isinstance(event, LoopThoughtDelta):
                cancel.set()

        async with AsyncClient(upstream_service.url) as client:
            return await arun_loop(
                client,
                "Look",
                tools=workspace().tools,
                llm_config=UPSTREAM_MODEL,
                key=FIRST_KEY,
                cancel=cancel,
                on_event=on_event,
            )

    started = time.monotonic()
    result = asyncio.run(main())
    assert time.monotonic() - started < WELL_BEFORE_THE_SERVICES_LIMIT
    assert (result.termination_reason, result.iterations) == ("cancelled", 0)
    assert held.closed.wait(20)


def test_the_usage_of_every_step_is_summed(upstream_service: Service, upstream: Upstream, kind: Kind) -> None:
    upstream.script.extend(
        [
            completion('Thought: Search first.\nAction: search(query="login")'),
            completion("Thought: Found.\nFinal Answer: src/auth.ts"),
        ]
    )
    options: dict[str, Any] = {"key": FIRST_KEY}
    result = run(
        kind, upstream_service.url, "Where?", tools=workspace().tools, llm_config=UPSTREAM_MODEL, **options
    )
    assert result.termination_reason == "success", result.answer
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (200, 24)
