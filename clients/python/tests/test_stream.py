"""stream() against the real server: the events of a streamed step and the same step as step()
returns, a stream left early or cancelled (the service stops the step upstream), heartbeats, a
repair round, an error after the stream began, and streams the client cannot read."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from reactstep import (
    AnswerEvent,
    AsyncClient,
    Client,
    ErrorEvent,
    ReactStepError,
    RetryEvent,
    StepEvent,
    StepResponse,
    StreamEvent,
    ThoughtEvent,
)

from .support.requests import KEY, UPSTREAM_MODEL, offline, via_upstream
from .support.service import Service
from .support.upstream import Hang, Upstream, completion, cut_short

ANSWER = "Thought: The login code lives in the auth module, as the context shows.\nFinal Answer: Login is handled in src/auth.js by login()."
CALL = 'Thought: The login code is what I need to find first.\nAction: code_search(query="login")'


def comparable(step: StepResponse) -> dict[str, Any]:
    """The step without what differs between two requests: the request id, the turns' times, the
    call id the service makes anew for each step (the same on the call and its turn), and the
    timings only a stream's terminal event carries."""
    body = step.model_dump(mode="json", exclude_unset=True)
    for name in ("request_id", "server_timing"):
        body.pop(name, None)
    for turn in body["updated_conversation_history"]:
        turn.pop("timestamp", None)
    details = body.get("action_details")
    if details is not None:
        last = body["updated_conversation_history"][-1]
        assert last["toolCall"]["id"] == details["tool_call_id"]
        details["tool_call_id"] = last["toolCall"]["id"] = "(made by the service)"
    return body


def texts(events: list[StreamEvent], kind: type[ThoughtEvent] | type[AnswerEvent]) -> list[str]:
    return [event.delta for event in events if isinstance(event, kind)]


@pytest.mark.parametrize("mock", [ANSWER, CALL], ids=["answer", "call"])
def test_the_events_add_up_to_the_step_and_the_step_is_the_one_step_returns(
    service: Service, mock: str
) -> None:
    body = offline(mock, session_id="py-stream-1")
    with Client(service.url) as client:
        events = list(client.stream(body))
        plain = client.step(body)
    last = events[-1]
    assert isinstance(last, StepEvent), events
    assert all(not isinstance(event, (StepEvent, ErrorEvent)) for event in events[:-1])
    # mock_response streams in pieces of 8 bytes: a thought this long comes in several.
    assert len(texts(events, ThoughtEvent)) > 1
    assert "".join(texts(events, ThoughtEvent)) == last.step.thought
    assert "".join(texts(events, AnswerEvent)) == (last.step.direct_response or "")
    assert last.step.server_timing is not None and plain.server_timing is None
    assert comparable(last.step) == comparable(plain)


def test_the_async_stream_yields_the_same_events(service: Service) -> None:
    async def main() -> list[StreamEvent]:
        async with AsyncClient(service.url) as client:
            return [event async for event in client.stream(offline(ANSWER))]

    events = asyncio.run(main())
    assert [event.type for event in events][-1] == "step"
    assert "".join(texts(events, AnswerEvent)) == "Login is handled in src/auth.js by login()."


def test_leaving_a_stream_early_closes_it_and_the_service_stops_the_step(
    upstream_service: Service, upstream: Upstream
) -> None:
    held = Hang("Thought: Reading the file first is the way to find it.\n")
    upstream.script.append(held)
    with Client(upstream_service.url) as client:
        with client.stream(via_upstream("Where?")) as events:
            first = next(events)
        assert isinstance(first, ThoughtEvent)
        # The client (and its connection pool) is still open: the stream's own close did it.
        assert held.closed.wait(20)
        assert client.step(offline("Final Answer: still usable")).direct_response == "still usable"


def test_cancelling_the_task_that_reads_an_async_stream_stops_the_step(
    upstream_service: Service, upstream: Upstream
) -> None:
    held = Hang("Thought: I will look at the login code before I answer.\n")
    upstream.script.append(held)
    seen: list[StreamEvent] = []

    async def read(client: AsyncClient, first: asyncio.Event) -> None:
        async for event in client.stream(via_upstream()):
            seen.append(event)
            first.set()

    async def main() -> None:
        async with AsyncClient(upstream_service.url) as client:
            first = asyncio.Event()
            task = asyncio.create_task(read(client, first))
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert seen and all(isinstance(event, ThoughtEvent) for event in seen)
    assert held.closed.wait(20)


class HeartbeatWatch(httpx.HTTPTransport):
    """httpx's transport, telling (``seen``) when a heartbeat comment went by."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        return httpx.Response(
            response.status_code, headers=response.headers, stream=_Watched(response.stream, self.seen)
        )


class _Watched(httpx.SyncByteStream):
    def __init__(self, inner: Any, seen: threading.Event) -> None:
        self.inner, self.seen, self.text = inner, seen, b""

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.inner:
            self.text += piece
            if b": heartbeat\n" in self.text:
                self.seen.set()
            yield piece

    def close(self) -> None:
        self.inner.close()


def test_a_heartbeat_while_the_model_is_quiet_is_no_event(
    upstream_service: Service, upstream: Upstream
) -> None:
    watch = HeartbeatWatch()
    # The upstream finishes its answer only once the client has seen a heartbeat go by.
    upstream.script.append(
        Hang(
            "Thought: Let me think about this for a while.\n",
            "Final Answer: Done thinking.",
            release=watch.seen,
        )
    )
    with Client(upstream_service.url, transport=watch) as client:
        events = list(client.stream(via_upstream("Think")))
    assert watch.seen.is_set()
    assert sorted({event.type for event in events}) == ["answer", "step", "thought"]
    last = events[-1]
    assert isinstance(last, StepEvent) and last.step.direct_response == "Done thinking."
    assert "".join(texts(events, AnswerEvent)) == "Done thinking."


def test_a_repair_round_is_a_retry_event_then_the_next_attempts_deltas(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.extend(
        [
            completion("Thought: I will call a tool that is not there.\nAction: delete_everything()"),
            completion('Thought: Only search exists.\nAction: code_search(query="login")'),
        ]
    )
    body = via_upstream(
        available_tools_prompt_segment="- code_search(query) - search the code", max_repair_attempts=1
    )
    with Client(upstream_service.url) as client:
        events = list(client.stream(body))
    kinds = [event.type for event in events]
    assert kinds.count("retry") == 1 and kinds[-1] == "step"
    retry = next(event for event in events if isinstance(event, RetryEvent))
    assert "delete_everything" in retry.reason
    after = events[kinds.index("retry") + 1 :]
    last = events[-1]
    assert isinstance(last, StepEvent) and last.step.thought == "Only search exists."
    assert "".join(texts(after, ThoughtEvent)) == "Only search exists."
    assert len(upstream.requests) == 2


def test_a_failure_after_the_stream_began_is_its_last_event_with_the_history_echoed(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.append(cut_short("Thought: I was about to"))
    history = [
        {"role": "user", "content": "An earlier question"},
        {"role": "assistant", "content": "An earlier answer"},
    ]
    with Client(upstream_service.url) as client:
        events = list(client.stream(via_upstream("And now?", conversation_history=history)))
    last = events[-1]
    assert isinstance(last, ErrorEvent), events
    error = last.error
    assert error.status == 502 and error.type in ("llm_bad_response", "llm_unavailable")
    assert error.retryable is True
    assert [(turn.role, turn.content) for turn in error.updated_conversation_history] == [
        ("user", "An earlier question"),
        ("assistant", "An earlier answer"),
    ]


def test_a_refusal_before_the_stream_begins_is_raised_not_streamed(service: Service) -> None:
    with Client(service.url) as client, pytest.raises(ReactStepError) as raised:
        list(
            client.stream({"user_query": "", "llm_config": UPSTREAM_MODEL, "user_api_keys": {"llmKey": KEY}})
        )
    error = raised.value
    assert (error.status, error.type, error.retryable) == (400, "invalid_request", False)
    assert any(field.field == "user_query" for field in error.fields), error.fields


def fake_stream(
    *pieces: bytes, broken: bool = False, content_type: str = "text/event-stream"
) -> httpx.MockTransport:
    """A service that answers every stream with these bytes (and then a broken connection)."""

    def body() -> Iterator[bytes]:
        yield from pieces
        if broken:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    class Body(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            return body()

    return httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"content-type": content_type}, stream=Body())
    )


THOUGHT = b'event: thought\ndata: {"delta": "I am thinking"}\n\n'


@pytest.mark.parametrize(
    ("transport", "why"),
    [
        (fake_stream(THOUGHT), "the event stream ended without its step"),
        (fake_stream(THOUGHT, broken=True), "the event stream was cut short (RemoteProtocolError"),
        (fake_stream(b"event: thought\ndata: {not json\n\n"), "the data of a thought event is not JSON"),
        (
            fake_stream(b'event: step\ndata: {"status": "action_proposed"}\n\n'),
            "the data of a step event does not match the contract",
        ),
        (fake_stream(b"<html>a proxy</html>", content_type="text/html"), "not an event stream (text/html)"),
    ],
    ids=["ended", "cut", "not-json", "not-a-step", "not-a-stream"],
)
def test_a_stream_the_client_cannot_read_is_an_unreadable_response(
    transport: httpx.MockTransport, why: str
) -> None:
    seen: list[StreamEvent] = []
    with (
        Client("http://reactstep.invalid", transport=transport) as client,
        pytest.raises(ReactStepError) as raised,
    ):
        for event in client.stream(offline(ANSWER)):
            seen.append(event)
    assert raised.value.type == "unreadable_response"
    assert why in raised.value.message
    assert (raised.value.status, raised.value.retryable) == (200, False)
    assert all(isinstance(event, ThoughtEvent) for event in seen)


def test_unknown_events_and_comments_are_skipped() -> None:
    step = offline_step_bytes()
    transport = fake_stream(b": a comment\n\n", b'event: future\ndata: {"x": 1}\n\n', THOUGHT, step)
    with Client("http://reactstep.invalid", transport=transport) as client:
        events = list(client.stream(offline(ANSWER)))
    assert [event.type for event in events] == ["thought", "step"]


def offline_step_bytes() -> bytes:
    """A real step's JSON, as a ``step`` event (taken from the spec's example shape)."""
    step: dict[str, Any] = {
        "session_id": "s",
        "request_id": "r",
        "thought": "t",
        "action_details": None,
        "direct_response": "d",
        "updated_conversation_history": [],
        "iterations_remaining": 0,
        "status": "direct_response_provided",
        "termination_reason": "success",
        "usage": None,
        "warnings": [],
        "conversation_summary": None,
        "context_report": {
            "budget": 1,
            "used": 1,
            "tokenizer": "o200k_base",
            "approximate": False,
            "approximation_margin_percent": 0,
            "items": [],
        },
        "prompt": None,
        "error": None,
    }
    return b"event: step\ndata: " + json.dumps(step).encode() + b"\n\n"
