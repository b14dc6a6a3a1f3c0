"""plan() and evaluate() of both clients against the real server, offline through mock_response
and through the mock upstream: a valid plan, typed; an adjusted one; one the service refuses;
the service's retry rule over the model's word; scores outside 0–10; a dry run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from reactstep import (
    AsyncClient,
    Client,
    DryRunResponse,
    EvaluateRequest,
    EvaluateResponse,
    EvaluationMade,
    ExecutionPlan,
    PlanMade,
    PlanRequest,
    PlanResponse,
    ReactStepError,
)

from .support.drive import KINDS, Kind
from .support.plans import READ_FILE, TWO_STEPS, scored
from .support.requests import KEY, OFFLINE, UPSTREAM_MODEL
from .support.service import Service
from .support.upstream import Upstream, completion

ONE_STEP: dict[str, Any] = {
    "complexity": "simple",
    "steps": [
        {
            "step_number": 1,
            "description": "Answer from what is known",
            "tool_name": None,
            "parameters": {},
            "required": True,
            "depends_on": [],
        }
    ],
    "estimated_iterations": 1,
}


def plan_with(kind: Kind, url: str, request: PlanRequest | dict[str, Any]) -> PlanResponse:
    if kind == "sync":
        with Client(url) as client:
            return client.plan(request)

    async def main() -> PlanResponse:
        async with AsyncClient(url) as client:
            return await client.plan(request)

    return asyncio.run(main())


def evaluate_with(kind: Kind, url: str, request: EvaluateRequest | dict[str, Any]) -> EvaluateResponse:
    if kind == "sync":
        with Client(url) as client:
            return client.evaluate(request)

    async def main() -> EvaluateResponse:
        async with AsyncClient(url) as client:
            return await client.evaluate(request)

    return asyncio.run(main())


def made(response: PlanResponse) -> ExecutionPlan:
    assert isinstance(response, PlanMade), response
    return response.plan


def evaluation_of(response: EvaluateResponse) -> EvaluationMade:
    assert isinstance(response, EvaluationMade), response
    return response


def evaluation(mock: str, **extra: Any) -> dict[str, Any]:
    return {
        "user_query": "Why does login fail?",
        "llm_config": OFFLINE,
        "candidate_answer": "Something in auth.",
        "mock_response": mock,
        **extra,
    }


@pytest.mark.parametrize("kind", KINDS)
def test_a_plan_comes_back_typed_with_the_services_defaults_filled_in(service: Service, kind: Kind) -> None:
    request = {
        "user_query": "Fix the failing login test",
        "tools": [READ_FILE],
        "llm_config": OFFLINE,
        "mock_response": TWO_STEPS,
    }
    response = plan_with(kind, service.url, request)
    if response.status != "direct_response_provided":
        pytest.fail(f"not a plan: {response}")
    # The status narrows the answer to a PlanMade: its plan is not optional.
    plan: ExecutionPlan = response.plan
    assert plan.complexity == "medium"
    assert plan.estimated_iterations == 2
    assert [
        (s.step_number, s.tool_name, s.parameters, s.required, [d.root for d in s.depends_on])
        for s in plan.steps
    ] == [
        (1, "read_file", {"path": "tests/login.rs"}, True, []),
        (2, None, {}, False, [1]),
    ]
    assert response.thought == "Read it, then explain."
    assert response.direct_response_json == plan.model_dump(mode="json")


def test_a_plan_request_model_sends_the_previous_plan_and_the_observation(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.append(
        completion(
            'Thought: The test is elsewhere.\nFinal Answer: {"complexity": "simple", "steps": [{"step_number": 1, '
            '"description": "Read the real test", "tool_name": "read_file", "parameters": {"path": "tests/auth.rs"}}], '
            '"estimated_iterations": 1}'
        )
    )
    request = PlanRequest.model_validate(
        {
            "user_query": "Fix the failing login test",
            "tools": [READ_FILE],
            "llm_config": UPSTREAM_MODEL,
            "user_api_keys": {"llmKey": KEY},
            "previous_plan": ONE_STEP,
            "latest_observation": "tests/login.rs does not exist; the login test is in tests/auth.rs",
        }
    )
    with Client(upstream_service.url) as client:
        plan = made(client.plan(request))
    assert plan.steps[0].parameters == {"path": "tests/auth.rs"}
    sent = json.dumps(upstream.requests[-1].body)
    assert "Answer from what is known" in sent
    assert "the login test is in tests/auth.rs" in sent


@pytest.mark.parametrize("kind", KINDS)
def test_a_plan_naming_a_tool_that_does_not_exist_raises_invalid_model_output(
    service: Service, kind: Kind
) -> None:
    bad = (
        'Thought: x.\nFinal Answer: {"complexity": "simple", "steps": [{"step_number": 1, "description": "Read", '
        '"tool_name": "nope", "parameters": {}}], "estimated_iterations": 1}'
    )
    with pytest.raises(ReactStepError) as raised:
        plan_with(
            kind,
            service.url,
            {"user_query": "Fix", "tools": [READ_FILE], "llm_config": OFFLINE, "mock_response": bad},
        )
    assert raised.value.type == "invalid_model_output"
    assert raised.value.status == 502
    assert raised.value.raw_output == bad
    assert "nope" in str(raised.value)


def test_a_dry_run_plan_answers_the_prompt(service: Service) -> None:
    request = {
        "user_query": "Fix the failing login test",
        "tools": [READ_FILE],
        "llm_config": OFFLINE,
        "user_api_keys": {"llmKey": KEY},
        "dry_run": True,
    }
    with Client(service.url) as client:
        response = client.plan(request)
    assert isinstance(response, DryRunResponse)
    assert response.prompt is not None
    assert "Make a plan" in json.dumps(response.prompt.model_dump(mode="json"))


@pytest.mark.parametrize("kind", KINDS)
def test_the_services_rule_overrules_the_models_needs_retry_and_says_so(service: Service, kind: Kind) -> None:
    low = evaluation_of(evaluate_with(kind, service.url, evaluation(scored(5, False, ["the failing line"]))))
    assert low.evaluation.model_dump() == {
        "completeness_score": 5,
        "quality_score": 6,
        "missing_info": ["the failing line"],
        "suggestions": ["find the failing line"],
        "needs_retry": True,
    }
    assert any("needs_retry is true, not the model's false" in w for w in low.warnings)
    high = evaluation_of(evaluate_with(kind, service.url, evaluation(scored(9, True))))
    assert high.evaluation.needs_retry is False
    assert any("needs_retry is false, not the model's true" in w for w in high.warnings)
    middle = evaluation_of(evaluate_with(kind, service.url, evaluation(scored(7, True))))
    assert middle.evaluation.needs_retry is True
    assert middle.warnings == []


def test_never_a_retry_once_the_loop_took_more_than_the_plans_estimate_and_two(service: Service) -> None:
    def turns(n: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "Why does login fail?"}] + [
            {"role": "assistant", "content": f"step {i + 1}"} for i in range(n)
        ]

    def request(steps: int) -> EvaluateRequest:
        return EvaluateRequest.model_validate(
            evaluation(scored(3, True, ["x"]), plan=ONE_STEP, conversation_history=turns(steps))
        )

    with Client(service.url) as client:
        within = evaluation_of(client.evaluate(request(3)))
        past = evaluation_of(client.evaluate(request(4)))
    assert within.evaluation.needs_retry is True
    assert past.evaluation.needs_retry is False
    assert any("more than the plan's estimated_iterations + 2" in w for w in past.warnings)


@pytest.mark.parametrize("kind", KINDS)
def test_a_score_outside_0_to_10_raises_invalid_model_output(service: Service, kind: Kind) -> None:
    with pytest.raises(ReactStepError) as raised:
        evaluate_with(kind, service.url, evaluation(scored(11, False)))
    assert raised.value.type == "invalid_model_output"
    assert raised.value.status == 502


def test_an_evaluation_through_the_provider_sends_the_candidate_answer(
    upstream_service: Service, upstream: Upstream
) -> None:
    upstream.script.append(completion(scored(9, False)))
    response = evaluate_with(
        "async",
        upstream_service.url,
        {
            "user_query": "Why does login fail?",
            "llm_config": UPSTREAM_MODEL,
            "user_api_keys": {"llmKey": KEY},
            "candidate_answer": "The session is never stored.",
        },
    )
    made_ = evaluation_of(response)
    assert made_.evaluation.completeness_score == 9
    assert made_.usage is not None and made_.usage.prompt_tokens > 0
    assert "The session is never stored." in json.dumps(upstream.requests[-1].body)


def test_a_blank_candidate_answer_is_an_invalid_request(service: Service) -> None:
    with pytest.raises(ReactStepError) as raised:
        evaluate_with("sync", service.url, evaluation(scored(9, False), candidate_answer="  "))
    assert raised.value.type == "invalid_request"
    assert raised.value.status == 400
