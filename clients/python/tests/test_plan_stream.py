"""stream_plan() and stream_evaluate() of both clients against the real server: the events in
order, the terminal one carrying the same answer plan() and evaluate() return, a repair round as
a retry event, a plan still invalid as the last (error) event, a dry run's single event, and a
request refused before the stream begins."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

import pytest

from reactstep import (
    AnswerEvent,
    AsyncClient,
    Client,
    DryRunResponse,
    ErrorEvent,
    EvaluationMade,
    EvaluationStreamEvent,
    PlanMade,
    PlanStreamEvent,
    ReactStepError,
    RetryEvent,
    StepEvent,
    StreamEventOf,
    ThoughtEvent,
)

from .support.drive import KINDS, Kind
from .support.plans import READ_FILE, TWO_STEPS, scored
from .support.requests import KEY, OFFLINE, UPSTREAM_MODEL
from .support.service import Service
from .support.upstream import Upstream, completion

S = TypeVar("S")

BAD_PLAN = (
    'Thought: A tool of my own.\nFinal Answer: {"complexity": "simple", "steps": [{"step_number": 1, '
    '"description": "Read", "tool_name": "nope", "parameters": {}}], "estimated_iterations": 1}'
)


def plan_request(mock: str | None = TWO_STEPS, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "user_query": "Fix the failing login test",
        "tools": [READ_FILE],
        "llm_config": OFFLINE,
    }
    if mock is not None:
        request["mock_response"] = mock
    return {**request, **extra}


def evaluate_request(mock: str, **extra: Any) -> dict[str, Any]:
    return {
        "user_query": "Why does login fail?",
        "llm_config": OFFLINE,
        "candidate_answer": "Something in auth.",
        "mock_response": mock,
        **extra,
    }


def streamed_plan(kind: Kind, url: str, request: dict[str, Any]) -> list[PlanStreamEvent]:
    if kind == "sync":
        with Client(url) as client:
            return list(client.stream_plan(request))

    async def main() -> list[PlanStreamEvent]:
        async with AsyncClient(url) as client:
            return [event async for event in client.stream_plan(request)]

    return asyncio.run(main())


def streamed_evaluation(kind: Kind, url: str, request: dict[str, Any]) -> list[EvaluationStreamEvent]:
    if kind == "sync":
        with Client(url) as client:
            return list(client.stream_evaluate(request))

    async def main() -> list[EvaluationStreamEvent]:
        async with AsyncClient(url) as client:
            return [event async for event in client.stream_evaluate(request)]

    return asyncio.run(main())


def terminal(events: list[StreamEventOf[S]]) -> S:
    """The answer of the last event, after asserting that it alone is terminal."""
    assert events, "no event came"
    *deltas, last = events
    assert all(isinstance(event, (ThoughtEvent, AnswerEvent, RetryEvent)) for event in deltas), events
    assert isinstance(last, StepEvent), events
    return last.step


def thoughts(events: list[StreamEventOf[S]]) -> str:
    return "".join(event.delta for event in events if isinstance(event, ThoughtEvent))


@pytest.mark.parametrize("kind", KINDS)
def test_a_streamed_plan_is_its_thought_in_pieces_then_the_plan_plan_returns(
    service: Service, kind: Kind
) -> None:
    events = streamed_plan(kind, service.url, plan_request())
    answer = terminal(events)
    assert isinstance(answer, PlanMade), answer
    # mock_response streams in pieces of 8 bytes: the thought comes in several, in order.
    assert sum(isinstance(event, ThoughtEvent) for event in events) > 1
    assert thoughts(events) == answer.thought == "Read it, then explain."
    assert answer.server_timing is not None
    with Client(service.url) as client:
        plain = client.plan(plan_request())
    assert isinstance(plain, PlanMade)
    assert answer.plan == plain.plan
    assert [(s.step_number, s.tool_name, s.required) for s in answer.plan.steps] == [
        (1, "read_file", True),
        (2, None, False),
    ]
    assert answer.direct_response_json == plain.direct_response_json == answer.plan.model_dump(mode="json")


@pytest.mark.parametrize("kind", KINDS)
def test_a_streamed_evaluation_ends_with_the_evaluation_the_services_rule_decided(
    service: Service, kind: Kind
) -> None:
    request = evaluate_request(scored(5, False, ["the failing line"]))
    events = streamed_evaluation(kind, service.url, request)
    answer = terminal(events)
    assert isinstance(answer, EvaluationMade), answer
    assert thoughts(events) == answer.thought == "Scored."
    # The model said no retry; under 7 the service says otherwise, on the stream as on the plain call.
    assert (answer.evaluation.completeness_score, answer.evaluation.needs_retry) == (5, True)
    assert answer.evaluation.missing_info == ["the failing line"]
    assert any("needs_retry is true, not the model's false" in w for w in answer.warnings)
    with Client(service.url) as client:
        plain = client.evaluate(request)
    assert isinstance(plain, EvaluationMade)
    assert answer.evaluation == plain.evaluation


@pytest.mark.parametrize("kind", KINDS)
def test_a_plan_still_invalid_is_the_streams_last_event_an_error(service: Service, kind: Kind) -> None:
    events = streamed_plan(kind, service.url, plan_request(BAD_PLAN))
    *before, last = events
    assert isinstance(last, ErrorEvent), events
    assert all(isinstance(event, ThoughtEvent) for event in before) and before
    error = last.error
    assert (error.type, error.status) == ("invalid_model_output", 502)
    assert error.raw_output == BAD_PLAN
    assert "nope" in error.message


@pytest.mark.parametrize("kind", KINDS)
def test_a_score_outside_0_to_10_is_the_evaluation_streams_error_event(service: Service, kind: Kind) -> None:
    events = streamed_evaluation(kind, service.url, evaluate_request(scored(11, False)))
    last = events[-1]
    assert isinstance(last, ErrorEvent), events
    assert (last.error.type, last.error.status) == ("invalid_model_output", 502)
    assert not any(isinstance(event, StepEvent) for event in events)


def test_a_repair_round_of_a_plan_is_a_retry_event_then_the_next_attempts_thought(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.extend([completion(BAD_PLAN), completion(TWO_STEPS)])
    request = plan_request(None, llm_config=UPSTREAM_MODEL, user_api_keys={"llmKey": KEY})
    events = streamed_plan("async", upstream_service.url, request)
    kinds = [event.type for event in events]
    assert kinds.count("retry") == 1, kinds
    retry = events[kinds.index("retry")]
    assert isinstance(retry, RetryEvent) and "nope" in retry.reason
    before, after = events[: kinds.index("retry")], events[kinds.index("retry") + 1 :]
    assert thoughts(before) == "A tool of my own."
    assert thoughts(after) == "Read it, then explain."
    answer = terminal(events)
    assert isinstance(answer, PlanMade)
    assert answer.plan.steps[0].parameters == {"path": "tests/login.rs"}
    # Both attempts were streamed from the provider, the second told what was wrong.
    assert [request.stream for request in upstream.requests] == [True, True]
    assert "nope" in json.dumps(upstream.requests[1].body)


def test_an_evaluation_through_the_provider_streams_the_candidate_answer_to_it(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.append(completion(scored(9, False)))
    request = {
        "user_query": "Why does login fail?",
        "llm_config": UPSTREAM_MODEL,
        "user_api_keys": {"llmKey": KEY},
        "candidate_answer": "The session is never stored.",
    }
    answer = terminal(streamed_evaluation("sync", upstream_service.url, request))
    assert isinstance(answer, EvaluationMade)
    assert (answer.evaluation.completeness_score, answer.evaluation.needs_retry) == (9, False)
    assert answer.usage is not None and answer.usage.prompt_tokens > 0
    assert upstream.requests[-1].stream is True
    assert "The session is never stored." in json.dumps(upstream.requests[-1].body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dry_run_plan_streams_only_its_terminal_event(service: Service, kind: Kind) -> None:
    request = plan_request(None, user_api_keys={"llmKey": KEY}, dry_run=True)
    events = streamed_plan(kind, service.url, request)
    assert len(events) == 1, events
    answer = terminal(events)
    assert isinstance(answer, DryRunResponse)
    assert answer.prompt is not None
    assert "Make a plan" in json.dumps(answer.prompt.model_dump(mode="json"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_plan_or_evaluation_refused_before_the_stream_begins_is_raised(
    service: Service, kind: Kind
) -> None:
    # A plan cannot be asked to match a final answer schema: it has its own.
    with pytest.raises(ReactStepError) as refused_plan:
        streamed_plan(kind, service.url, plan_request(react={"final_answer_schema": {"type": "object"}}))
    assert (refused_plan.value.status, refused_plan.value.type) == (400, "invalid_request")
    with pytest.raises(ReactStepError) as refused_evaluation:
        streamed_evaluation(kind, service.url, evaluate_request(scored(9, False), candidate_answer=" "))
    assert (refused_evaluation.value.status, refused_evaluation.value.type) == (400, "invalid_request")
