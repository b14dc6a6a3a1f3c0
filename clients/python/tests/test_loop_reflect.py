"""run_loop's ``reflect`` against the real server, through both clients: each final answer
evaluated before it is accepted, a retry the evaluation asked for then a pass, the service's rule
and the loop's own step limit bounding the retries, evaluations that could not be had, the
final answer schema kept off the plan and the evaluations, and through the mock upstream the
key, the tokens and a cancelled evaluation."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from reactstep import AsyncClient, LoopAnswer, LoopEvaluating, LoopEvaluation, LoopEvent, LoopResult

from .support.drive import LLM, Kind, run_recorded
from .support.plans import planned, scored
from .support.requests import KEY, UPSTREAM_MODEL
from .support.service import Service
from .support.upstream import Hang, Upstream, completion
from .support.workspace import workspace

QUESTION = "What does login return?"
WHOLE = "login(user) returns session(user), an object holding the user."


@pytest.mark.parametrize("stream", [True, False])
def test_plans_reflects_goes_on_with_what_is_missing_then_passes(
    service: Service, kind: Kind, stream: bool
) -> None:
    space = workspace()
    events: list[LoopEvent] = []
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=space.tools,
        llm_config=LLM,
        plan=True,
        reflect=True,
        stream=stream,
        on_event=events.append,
        mock_responses=[
            planned(2),
            "Thought: Read auth.\nAction: read_file(path='src/auth.ts')",
            "Thought: Enough.\nFinal Answer: login calls session.",
            scored(5, False, ["what session returns"]),
            "Thought: Read session too.\nAction: read_file(path='src/session.ts')",
            f"Thought: Now whole.\nFinal Answer: {WHOLE}",
            scored(9, True),
        ],
    )
    assert result.termination_reason == "success", result.answer
    assert (result.success, result.answer, result.iterations) == (True, WHOLE, 4)
    assert space.tool_names() == ["read_file", "read_file"]
    # Both answers were evaluated; the service's rule, not the model's word, asked for more.
    assert [
        (e.iteration, e.answer, e.evaluation.completeness_score, e.evaluation.needs_retry)
        for e in result.evaluations
    ] == [
        (2, "login calls session.", 5, True),
        (4, WHOLE, 9, False),
    ]
    step = "react_step/stream" if stream else "react_step"
    assert sent.paths() == ["plan", step, step, "evaluate", step, step, "evaluate"]
    # Each evaluation had the question, the history to the answer, and the plan; no max_iterations_left.
    plan = result.plan
    assert plan is not None
    for body, answer in zip(sent.bodies("evaluate"), ["login calls session.", WHOLE]):
        assert (body["user_query"], body["candidate_answer"]) == (QUESTION, answer)
        assert body["plan"] == plan.model_dump(mode="json")
        assert body["conversation_history"][-1]["content"] == answer
        assert "max_iterations_left" not in body and "mock_response" in body
    # The model read the question, then what was missing, as the user's turns.
    users = [turn.content for turn in result.history if turn.role == "user"]
    assert len(users) == 2 and users[0] == QUESTION
    assert users[1].startswith("Your answer is not complete yet (completeness 5/10, quality 6/10).")
    assert users[1].endswith(
        "What is missing:\n- what session returns\nSuggestions:\n- find what session returns"
    )
    assert sent.bodies(step)[2]["user_query"] == users[1]
    order = [
        f"{e.type}@{e.iteration}"
        for e in events
        if e.type in ("planning", "plan", "answer", "evaluating", "evaluation", "waiting")
    ]
    assert order == [
        "planning@0",
        "plan@0",
        "waiting@1",
        "waiting@2",
        "answer@2",
        "evaluating@2",
        "evaluation@2",
        "waiting@3",
        "waiting@4",
        "answer@4",
        "evaluating@4",
        "evaluation@4",
    ]
    assert [e for e in events if isinstance(e, LoopEvaluation)] == result.evaluations
    assert [e.answer for e in events if isinstance(e, LoopEvaluating)] == ["login calls session.", WHOLE]


def test_the_services_rule_ends_the_retries_once_the_loop_overran_the_plans_estimate_by_two(
    service: Service, kind: Kind
) -> None:
    low = scored(3, True, ["everything"])
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        plan=True,
        reflect=True,
        stream=False,
        mock_responses=[
            planned(1),
            "Thought: a\nFinal Answer: one",
            low,
            "Thought: b\nFinal Answer: two",
            low,
            "Thought: c\nFinal Answer: three",
            low,
            "Thought: d\nFinal Answer: four",
            low,
            "Thought: never asked\nFinal Answer: five",
        ],
    )
    # 1 + 2 = 3 steps allowed: the fourth answer stands, however it scored.
    assert (result.termination_reason, result.answer, result.iterations) == ("success", "four", 4)
    assert [
        (e.answer, e.evaluation.completeness_score, e.evaluation.needs_retry) for e in result.evaluations
    ] == [
        ("one", 3, True),
        ("two", 3, True),
        ("three", 3, True),
        ("four", 3, False),
    ]
    assert sent.paths().count("evaluate") == 4 and sent.paths().count("react_step") == 4


def test_the_loops_own_step_limit_bounds_the_retries_without_a_plan(service: Service, kind: Kind) -> None:
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        reflect=True,
        max_iterations=2,
        mock_responses=[
            "Thought: a\nFinal Answer: one",
            scored(2, True, ["all of it"]),
            "Thought: b\nFinal Answer: two",
            scored(9, False),
        ],
    )
    # The second step was the last: its answer was asked for, so it is not evaluated.
    assert (result.termination_reason, result.answer, result.iterations) == ("max_iterations", "two", 2)
    assert result.plan is None
    assert [e.answer for e in result.evaluations] == ["one"]
    assert "plan" not in sent.bodies("evaluate")[0]
    assert sent.paths() == ["react_step/stream", "evaluate", "react_step/stream"]
    assert sent.bodies("react_step/stream")[1]["max_iterations_left"] == 1


def test_an_answer_that_gives_up_is_not_evaluated(service: Service, kind: Kind) -> None:
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        reflect=True,
        mock_responses=["Thought: No.\nFinal Answer: I cannot complete this.", scored(9, False)],
    )
    assert (result.termination_reason, result.evaluations) == ("failure", [])
    assert sent.paths() == ["react_step/stream"]


def test_an_evaluation_that_cannot_be_had_lets_the_answer_stand(service: Service, kind: Kind) -> None:
    refused, _ = run_recorded(
        kind,
        service.url,
        "q",
        tools=workspace().tools,
        llm_config=LLM,
        reflect=True,
        mock_responses=["Thought: a\nFinal Answer: one", scored(11, False)],
    )
    assert (refused.termination_reason, refused.answer, refused.iterations) == ("success", "one", 1)
    assert refused.evaluations == []
    (error,) = refused.errors
    assert error.message.startswith("the evaluation failed: invalid_model_output: "), error.message
    assert error.error is not None and error.error.status == 502
    ran_out, sent = run_recorded(
        kind,
        service.url,
        "q",
        tools=workspace().tools,
        llm_config=LLM,
        reflect=True,
        mock_responses=["Thought: a\nFinal Answer: one"],
    )
    assert (ran_out.termination_reason, ran_out.answer) == ("success", "one")
    assert [e.message for e in ran_out.errors] == [
        "the evaluation failed: the scripted responses ran out after 1 steps"
    ]
    assert sent.paths() == ["react_step/stream"]


SCHEMA = {"type": "object", "required": ["file"], "properties": {"file": {"type": "string"}}}


@pytest.mark.parametrize(
    "options",
    [
        {"final_answer_schema": SCHEMA, "request": {"react": {"max_repair_attempts": 1}}},
        {"request": {"react": {"max_repair_attempts": 1, "final_answer_schema": SCHEMA}}},
    ],
    ids=["option", "in-request"],
)
def test_the_final_answer_schema_goes_with_the_steps_and_never_with_the_plan_or_evaluation(
    service: Service, kind: Kind, options: dict[str, Any]
) -> None:
    # The service refuses a plan or an evaluation asked to match a final answer schema (400).
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        plan=True,
        reflect=True,
        **options,
        mock_responses=[
            planned(1),
            'Thought: Found.\nFinal Answer: {"file": "src/auth.ts"}',
            scored(9, False),
        ],
    )
    assert result.termination_reason == "success", result.answer
    assert result.answer_json == {"file": "src/auth.ts"}
    assert [e.evaluation.completeness_score for e in result.evaluations] == [9]
    (step,) = sent.bodies("react_step/stream")
    assert step["react"] == {"max_repair_attempts": 1, "final_answer_schema": SCHEMA}
    for side in sent.bodies("plan", "evaluate"):
        assert side["react"] == {"max_repair_attempts": 1}


def test_through_the_provider_the_key_goes_with_every_call_and_their_tokens_are_counted(
    upstream_service: Service, upstream: Upstream, kind: Kind
) -> None:
    upstream.script.extend(
        [
            completion(planned(2, path="src/login.ts")),
            completion("Thought: Read it.\nAction: read_file(path='src/login.ts')"),
            completion(planned(2, first="Read the real file")),
            completion("Thought: Known.\nFinal Answer: a session object"),
            completion(scored(8, False)),
        ]
    )
    result, _ = run_recorded(
        kind,
        upstream_service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=UPSTREAM_MODEL,
        key=KEY,
        plan=True,
        reflect=True,
    )
    assert result.termination_reason == "success", result.answer
    assert result.answer == "a session object"
    calls = upstream.requests
    assert len(calls) == 5
    assert all(call.headers["authorization"] == f"Bearer {KEY}" for call in calls)
    # The plan and the evaluation are plain calls; the steps streamed.
    assert [call.stream for call in calls] == [False, True, False, True, False]
    texts = [str(call.body["messages"]) for call in calls]
    assert "execution-plan.json" in texts[1] and "Read where login is" in texts[1]
    # The adjustment was shown the plan it adjusts and the failure.
    assert "Read where login is" in texts[2] and "no such file: src/login.ts" in texts[2]
    assert "Read the real file" in texts[3]
    assert "a session object" in texts[4] and "Read the real file" in texts[4]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (500, 60)


def test_cancelling_while_an_async_evaluation_waits_stops_it_and_ends_the_loop(
    upstream_service: Service, upstream: Upstream
) -> None:
    held = Hang("Thought: Scoring.\n")
    upstream.script.extend([completion("Thought: Known.\nFinal Answer: a session"), held])

    async def main() -> LoopResult:
        cancel = asyncio.Event()
        loop = asyncio.get_running_loop()

        def cancel_once_the_evaluation_is_held() -> None:
            if held.started.wait(20):
                loop.call_soon_threadsafe(cancel.set)

        threading.Thread(target=cancel_once_the_evaluation_is_held, daemon=True).start()
        async with AsyncClient(upstream_service.url) as client:
            return await client.run_loop(
                QUESTION,
                tools=workspace().tools,
                llm_config=UPSTREAM_MODEL,
                key=KEY,
                reflect=True,
                cancel=cancel,
            )

    result = asyncio.run(main())
    assert (result.termination_reason, result.iterations, result.evaluations) == ("cancelled", 1, [])
    # The service saw the client go, and stopped the evaluation's model call.
    assert held.closed.wait(20)


def test_cancelling_before_an_answer_is_evaluated_asks_for_no_evaluation(
    service: Service, kind: Kind
) -> None:
    cancel = threading.Event() if kind == "sync" else asyncio.Event()

    def on_event(event: LoopEvent) -> None:
        if isinstance(event, LoopAnswer):
            cancel.set()

    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        reflect=True,
        stream=False,
        cancel=cancel,
        on_event=on_event,
        mock_responses=["Thought: a\nFinal Answer: one", scored(9, False)],
    )
    assert (result.termination_reason, result.iterations, result.evaluations) == ("cancelled", 1, [])
    assert sent.paths() == ["react_step"]
