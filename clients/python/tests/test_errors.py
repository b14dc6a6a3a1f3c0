"""Every family of error raised as a ReactStepError (a 400 naming its fields, a 422, each way the
upstream can misbehave, a 429 with Retry-After, the service's own limits), answers that are not
the service's, no answer at all, and the retries that are off unless asked for."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from email.utils import format_datetime
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from pydantic import ValidationError

from reactstep import AsyncClient, Client, ReactStepError, RetryInfo, RetryOptions, parse_retry_after

from .support.requests import KEY, OFFLINE, offline, via_upstream
from .support.service import Service, start_service
from .support.upstream import Hang, Upstream, completion, failure, garbage, raw

HISTORY = [
    {"role": "user", "content": "Where is login handled?"},
    {"role": "assistant", "content": "In src/auth.js."},
]


def step_request() -> dict[str, object]:
    """A step that goes to the mock upstream, with a history to be echoed on errors."""
    return via_upstream("And logout?", conversation_history=HISTORY, max_iterations_left=5)


def raised(client: Client, body: Mapping[str, object]) -> ReactStepError:
    with pytest.raises(ReactStepError) as caught:
        client.step(body)
    return caught.value


def test_a_400_names_each_failing_field_and_the_history_comes_back_unchanged(service: Service) -> None:
    body = {
        "user_query": "",
        "conversation_history": HISTORY,
        "mock_response": "Final Answer: x",
        "llm_config": {**OFFLINE, "tokenLimit": 0},
    }
    with Client(service.url) as client:
        error = raised(client, body)
    assert (error.status, error.type, error.retryable, error.retry_after) == (
        400,
        "invalid_request",
        False,
        None,
    )
    assert any(field.field == "llm_config.tokenLimit" for field in error.fields), error.fields
    assert all(field.message for field in error.fields)
    assert [(turn.role, turn.content) for turn in error.updated_conversation_history] == [
        (turn["role"], turn["content"]) for turn in HISTORY
    ]
    assert error.response is not None and error.response.status == "error"
    assert "llm_config.tokenLimit" in str(error)
    assert error.request_id is not None


def test_a_422_says_the_mandatory_prompt_does_not_fit(service: Service) -> None:
    body = offline(
        "Final Answer: x",
        user_query="Explain this repository in depth. " * 200,
        llm_config={**OFFLINE, "tokenLimit": 600, "reservedOutputTokens": 500},
    )
    with Client(service.url) as client:
        error = raised(client, body)
    assert (error.status, error.type, error.retryable) == (422, "context_overflow", False)


@pytest.mark.parametrize(
    ("reply", "status", "kind", "retryable"),
    [
        (garbage(), 502, "llm_bad_response", True),
        (raw(200, b"<html>upstream proxy</html>", "text/html"), 502, "llm_bad_response", True),
        (
            raw(302, b"", "text/plain", {"location": "https://elsewhere.invalid/v1/chat/completions"}),
            502,
            "llm_bad_response",
            False,
        ),
        (failure(500), 502, "llm_unavailable", True),
        (failure(529), 502, "llm_unavailable", True),
        (failure(401, message=f"Incorrect API key provided: {KEY}"), 401, "llm_auth", False),
        (failure(404, message="The model `gpt-4o` does not exist"), 400, "llm_model_not_found", False),
        (failure(400, message="Invalid 'messages': bad"), 400, "llm_request_rejected", False),
        (failure(429, {"retry-after": "20"}), 429, "llm_rate_limited", True),
        (
            failure(429, message="You exceeded your current quota.", code="insufficient_quota"),
            429,
            "llm_rate_limited",
            False,
        ),
    ],
    ids=["garbage", "html", "redirect", "500", "529", "401", "404", "400", "429", "quota"],
)
def test_each_way_the_upstream_fails_is_the_documented_error_sent_once(
    upstream_service: Service,
    upstream: Upstream,
    reply: object,
    status: int,
    kind: str,
    retryable: bool | None,
) -> None:
    upstream.fallback = reply  # type: ignore[assignment]
    with Client(upstream_service.url) as client:
        error = raised(client, step_request())
    assert (error.status, error.type) == (status, kind), error
    assert error.retryable is retryable
    assert KEY not in error.message and KEY[8:] not in error.message
    assert error.iterations_remaining == 5
    assert len(error.updated_conversation_history) == len(HISTORY)
    assert len(upstream.requests) == 1


def test_retries_of_a_retryable_error_are_bounded_and_each_is_announced(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.fallback = garbage()
    retries: list[RetryInfo] = []
    options = RetryOptions(attempts=3, base_delay=0.001, max_delay=0.005, on_retry=retries.append)
    with Client(upstream_service.url, retry=options) as client:
        error = raised(client, step_request())
    assert error.type == "llm_bad_response"
    assert len(upstream.requests) == 3
    assert [(retry.attempt, retry.error.type) for retry in retries] == [
        (1, "llm_bad_response"),
        (2, "llm_bad_response"),
    ]
    assert all(0 <= retry.delay <= 0.005 for retry in retries), retries


def test_a_429_carries_retry_after_and_a_retry_waits_that_long_before_it_succeeds(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.fallback = completion("Thought: Now it works.\nFinal Answer: Logout is in src/auth.js too.")
    upstream.script.append(failure(429, {"retry-after": "1"}))
    with Client(upstream_service.url) as plain:
        error = raised(plain, step_request())
    assert (error.status, error.type, error.retryable, error.retry_after) == (
        429,
        "llm_rate_limited",
        True,
        1,
    )

    upstream.script.append(failure(429, {"retry-after": "1"}))
    waits: list[float] = []
    options = RetryOptions(attempts=2, on_retry=lambda retry: waits.append(retry.delay))
    with Client(upstream_service.url, retry=options) as retrying:
        started = time.monotonic()
        step = retrying.step(step_request())
        took = time.monotonic() - started
    assert step.direct_response == "Logout is in src/auth.js too."
    assert waits == [1.0]
    assert took >= 1.0


def test_the_async_client_retries_the_same_way(upstream_service: Service, upstream: Upstream) -> None:
    upstream.fallback = completion("Thought: Now it works.\nFinal Answer: async retry")
    upstream.script.append(garbage())
    attempts: list[int] = []

    async def main() -> str | None:
        options = RetryOptions(
            attempts=2, base_delay=0.001, on_retry=lambda retry: attempts.append(retry.attempt)
        )
        async with AsyncClient(upstream_service.url, retry=options) as client:
            return (await client.step(step_request())).direct_response

    assert asyncio.run(main()) == "async retry"
    assert attempts == [1]
    assert len(upstream.requests) == 2


def test_a_retry_after_longer_than_the_longest_wait_is_not_cut_short_the_error_is_raised(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.append(failure(429, {"retry-after": "7"}))
    waits: list[float] = []
    options = RetryOptions(attempts=3, max_delay=2.0, on_retry=lambda retry: waits.append(retry.delay))
    with Client(upstream_service.url, retry=options) as client:
        error = raised(client, step_request())
    assert error.retry_after == 7
    assert waits == []
    assert len(upstream.requests) == 1


def test_the_waits_of_one_call_stop_at_the_total_they_may_add_up_to(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.fallback = failure(429, {"retry-after": "1"})
    waits: list[float] = []
    options = RetryOptions(attempts=10, max_total_delay=1.5, on_retry=lambda retry: waits.append(retry.delay))
    with Client(upstream_service.url, retry=options) as client:
        error = raised(client, step_request())
    assert error.type == "llm_rate_limited"
    assert waits == [1.0]  # a second wait of 1 s would make 2 s, past the 1.5 s allowed
    assert len(upstream.requests) == 2


def test_an_error_that_is_not_retryable_is_never_retried(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.append(failure(401))
    with Client(upstream_service.url, retry=True) as client:
        error = raised(client, step_request())
    assert (error.status, error.type, error.retryable) == (401, "llm_auth", False)
    assert len(upstream.requests) == 1


@pytest.fixture(scope="module")
def limited_service() -> Iterator[Service]:
    """The server with a limit of one request a minute per session."""
    started = start_service({"REACTSTEP_RATE_LIMIT_PER_SESSION": "1"})
    yield started
    started.stop()


def test_the_services_own_rate_limit_names_its_wait_and_a_wait_past_max_delay_is_not_made(
    limited_service: Service,
) -> None:
    body = offline("Thought: fine.\nFinal Answer: first", session_id="py-limited-session")
    retries: list[RetryInfo] = []
    with Client(limited_service.url, retry=RetryOptions(on_retry=retries.append)) as client:
        assert client.step(body).direct_response == "first"
        error = raised(client, body)
    assert (error.status, error.type, error.retryable) == (429, "rate_limited", True)
    assert error.retry_after is not None and 30 < error.retry_after <= 60
    assert retries == []


@pytest.fixture(scope="module")
def capacity_service(upstream_server: Upstream) -> Iterator[Service]:
    """The server with room for one step in flight, its model at the mock upstream."""
    started = start_service(
        {
            "REACTSTEP_OPENAI_BASE_URL": upstream_server.base_url,
            "REACTSTEP_RETRIES": "0",
            "REACTSTEP_MAX_STEPS_IN_FLIGHT": "1",
        }
    )
    yield started
    started.stop()


def test_at_capacity_is_retried_after_its_retry_after_once_the_step_in_flight_is_done(
    capacity_service: Service, upstream: Upstream
) -> None:
    held = Hang("Thought: This one takes the only place.\n", "Final Answer: first")
    upstream.script.append(held)
    upstream.fallback = completion("Thought: My turn.\nFinal Answer: second")
    first: list[str | None] = []
    with Client(capacity_service.url) as client:
        running = threading.Thread(target=lambda: first.append(client.step(step_request()).direct_response))
        running.start()
        assert held.started.wait(20)

        def finish_the_first(retry: RetryInfo) -> None:
            # Before the client waits: the step in flight ends, so the retry finds the place free.
            assert (retry.error.status, retry.error.type, retry.error.retry_after) == (503, "at_capacity", 1)
            held.release.set()
            running.join(timeout=20)

        retrying = Client(capacity_service.url, retry=RetryOptions(attempts=2, on_retry=finish_the_first))
        with retrying:
            second = retrying.step(step_request())
    assert first == ["first"]
    assert second.direct_response == "second"


def fixed(status: int, body: bytes, content_type: str = "application/json") -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda request: httpx.Response(status, headers={"content-type": content_type}, content=body)
    )


@pytest.mark.parametrize(
    ("transport", "status", "retryable", "why"),
    [
        (fixed(503, b"<html>bad gateway</html>", "text/html"), 503, True, "HTTP 503 whose body is not JSON"),
        (fixed(400, b'{"message": "no"}'), 400, False, "HTTP 400 without an error object"),
        (
            fixed(500, b'{"error": {"type": "internal_error"}}'),
            500,
            True,
            "an error response without its error object",
        ),
        (fixed(200, b"not json"), 200, False, "the step is not JSON"),
        (fixed(200, b'{"status": "action_proposed"}'), 200, False, "the step does not match the contract"),
    ],
    ids=["html-503", "no-error-object", "error-object-incomplete", "step-not-json", "step-not-a-step"],
)
def test_an_answer_that_is_not_the_services_is_an_unreadable_response(
    transport: httpx.MockTransport, status: int, retryable: bool, why: str
) -> None:
    with Client("http://reactstep.invalid", transport=transport) as client:
        error = raised(client, offline("Final Answer: x"))
    assert (error.status, error.type, error.retryable) == (status, "unreadable_response", retryable)
    assert why in error.message


def test_an_error_type_a_newer_service_adds_is_still_a_react_step_error() -> None:
    body = json.dumps(
        {"error": {"type": "brand_new", "message": "new", "retryable": True, "retry_after_seconds": 2}}
    ).encode()
    with Client("http://reactstep.invalid", transport=fixed(503, body)) as client:
        error = raised(client, offline("Final Answer: x"))
    assert (error.status, error.type, error.retryable, error.retry_after) == (503, "brand_new", True, 2)
    assert error.response is None and error.fields == []


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_no_answer_at_all_is_a_retryable_transport_error_and_retries_of_it_are_bounded() -> None:
    retries: list[RetryInfo] = []
    url = f"http://127.0.0.1:{closed_port()}"
    with Client(url, retry=RetryOptions(attempts=3, base_delay=0.001, on_retry=retries.append)) as client:
        error = raised(client, offline("Final Answer: x"))
    assert (error.status, error.type, error.retryable) == (0, "transport_error", True)
    assert isinstance(error.__cause__, httpx.ConnectError)
    assert [retry.attempt for retry in retries] == [1, 2]


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    assert parse_retry_after("7") == 7
    assert parse_retry_after(" 12 ") == 12
    later = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    assert 28 <= (parse_retry_after(later) or 0) <= 31
    earlier = format_datetime(datetime.now(timezone.utc) - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(earlier) == 0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("") is None
    assert parse_retry_after(None) is None
    # Past what any wait means, and past what int() or a date holds: no wait, never a raise.
    assert parse_retry_after("9" * 5000) is None
    assert parse_retry_after("Mon, 01 Jan 99999999999999999999 00:00:00 GMT") is None


def test_an_answer_too_odd_to_read_is_still_a_react_step_error() -> None:
    """A body nested past Python's recursion limit, a Retry-After of 5,000 digits, a wait no
    float holds: each is a ``ReactStepError``, with retries on or off."""
    deep = b"[" * 200_000 + b"]" * 200_000
    huge_wait = b'{"error": {"type": "overloaded", "message": "m", "retryable": true, "retry_after_seconds": 1' + b"0" * 400 + b"}}"
    digits = httpx.MockTransport(
        lambda request: httpx.Response(429, headers={"retry-after": "9" * 5000}, content=b"{}")
    )
    for transport in [fixed(200, deep), fixed(500, deep), fixed(503, huge_wait), digits]:
        for retry in [None, RetryOptions(attempts=2, base_delay=0.001, max_delay=1.0)]:
            with Client("http://reactstep.invalid", transport=transport, retry=retry) as client:
                raised(client, offline("Final Answer: x"))


def test_a_key_stays_out_of_reprs_and_of_a_requests_validation_errors() -> None:
    """A traceback that shows locals, or a log line of a request or the loop's options, holds
    no key; neither does the error of a request the models refuse."""
    from reactstep import EvaluateRequest, PlanRequest, ReactStepRequest
    from reactstep.loop_types import LoopOptions

    key, other = "sk-CANARY0123456789abcdef", "sk-ant-CANARY9876543210"
    config = {"modelName": "gpt-4o", "tokenLimit": 1000, "reservedOutputTokens": 100}
    keys = {"llmKey": key, "providerKeys": {"anthropic": other}}
    models: list[type[ReactStepRequest]] = [ReactStepRequest, PlanRequest, EvaluateRequest]
    for model in models:
        fields = {"user_query": "q", "candidate_answer": "a"}
        made = model.model_validate({**fields, "llm_config": config, "user_api_keys": keys})
        assert "CANARY" not in repr(made) and "CANARY" not in str(made), model
        assert made.user_api_keys is not None and made.user_api_keys.llmKey == key
        bad = {**fields, "llm_config": {"modelName": key}, "user_api_keys": {"llmKey": key * 200}}
        with pytest.raises(ValidationError) as refused:
            model.model_validate(bad)
        assert "CANARY" not in str(refused.value), refused.value
        assert "user_api_keys.llmKey" in str(refused.value)
    options = LoopOptions(question="q", llm_config=config, key=key, provider_keys={"anthropic": other})
    assert "CANARY" not in repr(options) and options.key == key
