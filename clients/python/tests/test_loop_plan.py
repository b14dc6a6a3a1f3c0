"""run_loop's ``plan`` and ``approve_plan`` against the real server, through both clients, with a
scripted model (mock_response per request: the plan, the steps, the adjustments): a plan sent
with every step, approved, rejected, or one the service could not make; the plan adjusted after
failed calls, and the bound of 3 on that; and a client with no plan()."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from reactstep import (
    PLAN_FILE,
    ApprovePlan,
    AsyncClient,
    AsyncEventStream,
    Client,
    EventStream,
    ExecutionPlan,
    LoopEvent,
    LoopObservation,
    LoopPlan,
    LoopPlanApproval,
    LoopPlanning,
    LoopWaiting,
    PlanApprovalRequest,
    RejectPlan,
    StepResponse,
    arun_loop,
    run_loop,
    tool,
)

from .support.drive import LLM, Kind, run_recorded
from .support.plans import planned
from .support.recording import Recorder
from .support.requests import KEY
from .support.service import Service
from .support.workspace import workspace

QUESTION = "What does login return?"
BAD_PLAN = (
    'Thought: x\nFinal Answer: {"complexity": "simple", "steps": [{"step_number": 1, '
    '"description": "d", "tool_name": "nope"}], "estimated_iterations": 1}'
)


def dumped(plan: ExecutionPlan | None) -> dict[str, Any]:
    assert plan is not None
    return plan.model_dump(mode="json")


def plan_in(step: dict[str, Any]) -> dict[str, Any]:
    """The plan a step's request carried as a file of its context (the last file)."""
    last = step["explicit_context"][-1]
    assert last["path"] == PLAN_FILE == "execution-plan.json"
    plan: dict[str, Any] = json.loads(last["content"])
    return plan


def steps_of(recorder: Recorder) -> list[dict[str, Any]]:
    return recorder.bodies("react_step", "react_step/stream")


def test_the_plan_goes_with_every_step_after_the_callers_own_files(service: Service, kind: Kind) -> None:
    events: list[LoopEvent] = []
    notes = {"path": "notes.md", "content": "login is in src/auth.ts"}
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        plan=True,
        request={"explicit_context": [notes], "session_id": "py-plan-loop"},
        on_event=events.append,
        mock_responses=[
            planned(2),
            "Thought: Read auth.\nAction: read_file(path='src/auth.ts')",
            "Thought: Enough.\nFinal Answer: login returns session(user).",
        ],
    )
    assert result.termination_reason == "success", result.answer
    assert (result.answer, result.iterations) == ("login returns session(user).", 2)
    # The plan, with the service's defaults filled in.
    plan = result.plan
    assert plan is not None and (plan.complexity, plan.estimated_iterations) == ("medium", 2)
    assert [(s.step_number, s.tool_name, s.required, [d.root for d in s.depends_on]) for s in plan.steps] == [
        (1, "read_file", True, []),
        (2, None, True, [1]),
    ]
    assert result.current_plan == plan and result.plan_adjustments == []
    assert sent.paths() == ["plan", "react_step/stream", "react_step/stream"]
    for step in steps_of(sent):
        assert step["explicit_context"][0] == notes and len(step["explicit_context"]) == 2
        assert plan_in(step) == dumped(plan)
    # The plan was asked with the question, the tools, the caller's context and the step limit.
    (asked,) = sent.bodies("plan")
    assert (asked["user_query"], asked["explicit_context"], asked["max_iterations_left"]) == (
        QUESTION,
        [notes],
        10,
    )
    assert [tool["name"] for tool in asked["tools"]] == ["read_file", "search"]
    assert all(body["session_id"] == "py-plan-loop" for body in (sent.sent[i].body for i in range(3)))
    # Nothing of the planning exchange went into the loop's history.
    assert [turn.role for turn in result.history][0] == "user"
    assert not any("Make a plan" in turn.content for turn in result.history)
    order = [(e.type, e.iteration) for e in events if isinstance(e, (LoopPlanning, LoopPlan, LoopWaiting))]
    assert order == [("planning", 0), ("plan", 0), ("waiting", 1), ("waiting", 2)]
    told = next(e for e in events if isinstance(e, LoopPlan))
    assert (told.plan, told.observation) == (plan, None)


def test_approve_plan_implies_a_plan_sees_a_copy_and_may_approve_it(service: Service, kind: Kind) -> None:
    asked: list[PlanApprovalRequest] = []
    events: list[LoopEvent] = []

    def approve(request: PlanApprovalRequest) -> ApprovePlan:
        asked.append(request)
        request.plan.steps.clear()
        return ApprovePlan()

    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        approve_plan=approve,
        on_event=events.append,
        mock_responses=[planned(2), "Thought: Known.\nFinal Answer: a session"],
    )
    assert result.termination_reason == "success", result.answer
    assert len(asked) == 1
    # approve_plan got a copy: its change reached neither the result nor the step.
    assert result.plan is not None and len(result.plan.steps) == 2
    assert len(plan_in(steps_of(sent)[0])["steps"]) == 2
    assert [(e.approved, e.reason) for e in events if isinstance(e, LoopPlanApproval)] == [(True, None)]
    assert [e.type for e in events][:4] == ["planning", "plan", "plan_approval", "waiting"]


@pytest.mark.parametrize(
    ("reason", "answer", "told"),
    [
        (
            "read session.ts first",
            "the plan was not approved, so nothing ran: read session.ts first",
            "read session.ts first",
        ),
        ("  ", "the plan was not approved, so nothing ran", None),
        (None, "the plan was not approved, so nothing ran", None),
    ],
    ids=["reason", "blank", "none"],
)
def test_a_rejected_plan_ends_the_loop_as_plan_rejected_before_any_step(
    service: Service, kind: Kind, reason: str | None, answer: str, told: str | None
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
        approve_plan=lambda request: RejectPlan(reason),
        on_event=events.append,
        mock_responses=[planned(2), "Thought: never sent\nAction: read_file(path='src/auth.ts')"],
    )
    assert (result.termination_reason, result.success, result.answer) == ("plan_rejected", False, answer)
    assert (result.iterations, space.calls, sent.paths()) == (0, [], ["plan"])
    assert result.plan is not None and result.plan.estimated_iterations == 2
    assert [e.type for e in events] == ["planning", "plan", "plan_approval"]
    assert events[-1] == LoopPlanApproval(0, False, told)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (RuntimeError("no terminal"), "approving the plan failed: RuntimeError: no terminal"),
        (
            "maybe",
            "approving the plan failed: TypeError: approve_plan returned 'maybe', not ApprovePlan() or RejectPlan(reason)",
        ),
        (RejectPlan(3), "approving the plan failed: TypeError: approve_plan returned RejectPlan(reason=3)"),  # type: ignore[arg-type]
    ],
    ids=["raises", "nonsense", "reason-not-text"],
)
def test_approve_plan_raising_or_answering_nonsense_ends_the_loop_as_failure(
    service: Service, kind: Kind, answer: object, message: str
) -> None:
    def approve(request: PlanApprovalRequest) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    result, sent = run_recorded(
        kind,
        service.url,
        "q",
        tools=workspace().tools,
        llm_config=LLM,
        approve_plan=approve,
        mock_responses=[planned(2)],
    )
    assert result.termination_reason == "failure"
    assert result.answer.startswith(message), result.answer
    assert [(e.source, e.message) for e in result.errors] == [("approval", result.answer)]
    assert sent.paths() == ["plan"]


def test_cancelling_while_the_sync_loop_asks_about_the_plan_runs_no_step(service: Service) -> None:
    cancel = threading.Event()

    def approve(request: PlanApprovalRequest) -> ApprovePlan:
        cancel.set()
        return ApprovePlan()

    with Client(service.url) as client:
        result = run_loop(
            client,
            "q",
            tools=workspace().tools,
            llm_config=LLM,
            approve_plan=approve,
            cancel=cancel,
            mock_responses=[planned(2), "Thought: never sent\nFinal Answer: no"],
        )
    assert (result.termination_reason, result.iterations) == ("cancelled", 0)


def test_cancelling_while_an_async_approve_plan_waits_ends_the_loop_at_once(service: Service) -> None:
    async def main() -> Any:
        cancel = asyncio.Event()

        async def approve(request: PlanApprovalRequest) -> ApprovePlan:
            cancel.set()
            await asyncio.Event().wait()
            return ApprovePlan()

        async with AsyncClient(service.url) as client:
            return await client.run_loop(
                "q",
                tools=workspace().tools,
                llm_config=LLM,
                approve_plan=approve,
                cancel=cancel,
                mock_responses=[planned(2), "Thought: never sent\nFinal Answer: no"],
            )

    result = asyncio.run(main())
    assert (result.termination_reason, result.iterations) == ("cancelled", 0)
    assert result.plan is not None


def test_a_plan_the_service_could_not_make_ends_the_loop_before_any_step(
    service: Service, kind: Kind
) -> None:
    result, sent = run_recorded(
        kind, service.url, "q", tools=workspace().tools, llm_config=LLM, plan=True, mock_responses=[BAD_PLAN]
    )
    assert (result.termination_reason, result.iterations, result.plan) == ("failure", 0, None)
    assert result.answer.startswith("no plan was made: invalid_model_output: "), result.answer
    assert "nope" in result.answer
    error = result.errors[0]
    assert error.source == "service" and error.error is not None
    assert (error.error.type, error.error.status) == ("invalid_model_output", 502)
    assert sent.paths() == ["plan"]


def test_a_scripted_model_with_nothing_for_the_plan_ends_the_loop(service: Service, kind: Kind) -> None:
    result, sent = run_recorded(
        kind, service.url, "q", tools=workspace().tools, llm_config=LLM, plan=True, mock_responses=[]
    )
    assert (result.termination_reason, result.answer) == (
        "failure",
        "the scripted responses ran out after 0 steps",
    )
    assert sent.paths() == []


def adjusted(n: int, path: str = "src/auth.ts") -> str:
    """An adjusted plan's output, told apart by ``n``."""
    return planned(2, first=f"Adjusted {n}: read {path}", path=path)


def test_a_failed_call_has_the_plan_adjusted_to_it_and_the_next_steps_follow_that(
    service: Service, kind: Kind
) -> None:
    events: list[LoopEvent] = []
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        plan=True,
        on_event=events.append,
        mock_responses=[
            planned(2, path="src/login.ts"),
            "Thought: Read it.\nAction: read_file(path='src/login.ts')",
            adjusted(1),
            "Thought: The real one.\nAction: read_file(path='src/auth.ts')",
            "Thought: Done.\nFinal Answer: login calls session.",
        ],
    )
    assert result.termination_reason == "success", result.answer
    step = "react_step/stream"
    assert sent.paths() == ["plan", step, "plan", step, step]
    first = dumped(result.plan)
    assert first["steps"][0]["description"] == "Read where login is"
    (adjustment,) = result.plan_adjustments
    assert (adjustment.iteration, adjustment.observation) == (1, "no such file: src/login.ts")
    assert adjustment.plan.steps[0].description == "Adjusted 1: read src/auth.ts"
    assert result.current_plan == adjustment.plan
    # The adjustment was asked with the plan, the failure, and the history up to it.
    asked = sent.bodies("plan")[1]
    assert asked["previous_plan"] == first
    assert asked["latest_observation"] == "no such file: src/login.ts"
    last_turn = asked["conversation_history"][-1]
    assert (last_turn["role"], last_turn["is_error"]) == ("tool_observation", True)
    assert all(file["path"] != PLAN_FILE for file in asked.get("explicit_context", []))
    # The first step followed the first plan; the ones after the failure the adjusted plan.
    assert [plan_in(body) for body in steps_of(sent)] == [
        first,
        dumped(adjustment.plan),
        dumped(adjustment.plan),
    ]
    order = [
        (e.type, e.iteration)
        for e in events
        if isinstance(e, (LoopPlanning, LoopPlan, LoopWaiting, LoopObservation))
    ]
    assert order == [
        ("planning", 0),
        ("plan", 0),
        ("waiting", 1),
        ("observation", 1),
        ("planning", 1),
        ("plan", 1),
        ("waiting", 2),
        ("observation", 2),
        ("waiting", 3),
    ]
    assert [e for e in events if isinstance(e, LoopPlan)][-1] is adjustment


def test_the_plan_is_adjusted_once_per_failed_call_and_three_times_a_run_at_most(
    service: Service, kind: Kind
) -> None:
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        plan=True,
        mock_responses=[
            planned(3),
            "Thought: Both.\n[read_file(path='a.ts'), read_file(path='b.ts')]",
            adjusted(1),
            adjusted(2),
            "Thought: Two more.\n[read_file(path='c.ts'), read_file(path='d.ts')]",
            adjusted(3),
            "Thought: Another.\nAction: read_file(path='e.ts')",
            "Thought: Done.\nFinal Answer: none of them exist",
        ],
    )
    assert result.termination_reason == "success", result.answer
    step = "react_step/stream"
    assert sent.paths() == ["plan", step, "plan", "plan", step, "plan", step, step]
    assert [(a.iteration, a.observation) for a in result.plan_adjustments] == [
        (1, "no such file: a.ts"),
        (1, "no such file: b.ts"),
        (2, "no such file: c.ts"),
    ]
    # Each adjustment adjusted the one before it.
    plans = [dumped(result.plan)] + [dumped(a.plan) for a in result.plan_adjustments]
    assert [body["previous_plan"] for body in sent.bodies("plan")[1:]] == plans[:3]
    assert [plan_in(body)["steps"][0]["description"] for body in steps_of(sent)] == [
        "Read where login is",
        "Adjusted 2: read src/auth.ts",
        "Adjusted 3: read src/auth.ts",
        "Adjusted 3: read src/auth.ts",
    ]
    assert [e.source for e in result.errors] == ["read_file"] * 5


def test_an_adjustment_the_service_could_not_make_leaves_the_plan_and_counts_toward_the_three(
    service: Service, kind: Kind
) -> None:
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        plan=True,
        mock_responses=[
            planned(3),
            "Thought: 1\nAction: read_file(path='a.ts')",
            BAD_PLAN,
            "Thought: 2\nAction: read_file(path='b.ts')",
            BAD_PLAN,
            "Thought: 3\nAction: read_file(path='c.ts')",
            BAD_PLAN,
            "Thought: 4\nAction: read_file(path='d.ts')",
            "Thought: Done.\nFinal Answer: none of them exist",
        ],
    )
    assert result.termination_reason == "success", result.answer
    assert sent.paths().count("plan") == 4
    assert result.plan_adjustments == []
    first = dumped(result.plan)
    assert all(plan_in(body) == first for body in steps_of(sent))
    failures = [e for e in result.errors if e.source == "service"]
    assert len(failures) == 3
    assert all(e.message.startswith("the plan adjustment failed: invalid_model_output: ") for e in failures)
    assert all(e.error is not None and e.error.status == 502 for e in failures)


def test_a_scripted_model_with_nothing_for_the_adjustment_keeps_the_plan_and_says_so(
    service: Service, kind: Kind
) -> None:
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        plan=True,
        mock_responses=[planned(2), "Thought: 1\nAction: read_file(path='a.ts')"],
    )
    assert (result.termination_reason, result.answer) == (
        "failure",
        "the scripted responses ran out after 2 steps",
    )
    assert [e.message for e in result.errors] == [
        "no such file: a.ts",
        "the plan adjustment failed: the scripted responses ran out after 2 steps",
    ]
    assert sent.paths() == ["plan", "react_step/stream"]


def test_without_a_plan_a_failed_call_asks_for_no_plan(service: Service, kind: Kind) -> None:
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        stream=False,
        mock_responses=["Thought: 1\nAction: read_file(path='a.ts')", "Thought: Done.\nFinal Answer: no"],
    )
    assert result.termination_reason == "success"
    assert (result.plan, result.plan_adjustments) == (None, [])
    assert sent.paths() == ["react_step", "react_step"]
    assert all("explicit_context" not in body for body in steps_of(sent))


class StepsOnly:
    """A sender of steps with no plan() nor evaluate(): the loop must say it cannot plan."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def step(self, request: Mapping[str, Any]) -> StepResponse:
        return self.client.step(request)

    def stream(self, request: Mapping[str, Any]) -> EventStream:
        return self.client.stream(request)


class AsyncStepsOnly:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def step(self, request: Mapping[str, Any]) -> StepResponse:
        return await self.client.step(request)

    def stream(self, request: Mapping[str, Any]) -> AsyncEventStream:
        return self.client.stream(request)


@pytest.mark.parametrize(
    ("option", "answer", "iterations"),
    [
        ("plan", "the loop was asked to plan, and its client has no plan()", 0),
        ("reflect", "the loop was asked to reflect, and its client has no evaluate()", 1),
    ],
)
def test_a_client_without_plan_or_evaluate_cannot_plan_or_reflect(
    service: Service, kind: Kind, option: str, answer: str, iterations: int
) -> None:
    options: dict[str, Any] = {option: True, "mock_responses": ["Thought: a\nFinal Answer: one"]}
    if kind == "sync":
        with Client(service.url) as client:
            result = run_loop(StepsOnly(client), "q", tools=workspace().tools, llm_config=LLM, **options)
    else:

        async def main() -> Any:
            async with AsyncClient(service.url) as client:
                return await arun_loop(
                    AsyncStepsOnly(client), "q", tools=workspace().tools, llm_config=LLM, **options
                )

        result = asyncio.run(main())
    assert (result.termination_reason, result.answer, result.iterations) == ("failure", answer, iterations)


def test_a_long_failure_is_cut_for_the_adjustment_and_kept_whole_in_the_steps(
    service: Service, kind: Kind
) -> None:
    long = "x" * 70_000

    @tool
    def explode() -> str:
        """Fail at length."""
        raise RuntimeError(long)

    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=[*workspace().tools, explode],
        llm_config=LLM,
        plan=True,
        mock_responses=[
            planned(2),
            "Thought: Try.\nAction: explode()",
            adjusted(1),
            "Thought: Done.\nFinal Answer: no",
        ],
    )
    assert result.termination_reason == "success", result.answer
    assert result.steps[0].observation == long
    sent_observation = sent.bodies("plan")[1]["latest_observation"]
    assert sent_observation == "x" * 65_536 + "\n[cut: 4464 of 70000 characters left out]"
    assert result.plan_adjustments[0].observation == long


def test_a_dry_run_answers_no_plan_and_the_loop_ends_before_any_step(service: Service, kind: Kind) -> None:
    result, sent = run_recorded(
        kind,
        service.url,
        QUESTION,
        tools=workspace().tools,
        llm_config=LLM,
        key=KEY,
        plan=True,
        request={"dry_run": True},
    )
    assert (result.termination_reason, result.iterations, result.plan) == ("failure", 0, None)
    assert result.answer == "no plan was made: the service answered a plan of status dry_run"
    assert sent.paths() == ["plan"]
