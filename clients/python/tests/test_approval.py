"""Approval of a tool's calls, through both clients: approve, deny with a reason, edit the
arguments (and an edit that is no JSON object), no one to ask, a callback that raises or answers
nonsense, and tools not marked, whose calls never reach the callback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reactstep import (
    ApprovalRequest,
    Approve,
    Decision,
    Deny,
    Edit,
    LoopApproval,
    LoopEvent,
    LoopResult,
    tool,
)

from .support.drive import LLM, Kind, run
from .support.service import Service
from .support.workspace import FILES, Workspace, workspace

READ = "Thought: Read it.\nAction: read_file(path='src/auth.ts')"
DONE = "Thought: Done.\nFinal Answer: done"


class Asker:
    """An approve callback that answers ``decision`` and keeps what it was asked."""

    def __init__(self, decision: object) -> None:
        self.decision = decision
        self.asked: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> Decision:
        self.asked.append(request)
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision  # type: ignore[return-value]


def approved_run(
    kind: Kind, url: str, decision: object, *, approve: bool = True
) -> tuple[LoopResult, Workspace, Asker, list[LoopEvent]]:
    space = workspace(read_needs_approval=True)
    asker = Asker(decision)
    events: list[LoopEvent] = []
    options: dict[str, Any] = {"approve": asker} if approve else {}
    result = run(
        kind,
        url,
        "What is in auth.ts?",
        tools=space.tools,
        llm_config=LLM,
        on_event=events.append,
        mock_responses=[READ, DONE],
        **options,
    )
    return result, space, asker, events


def the_observation_turn(result: LoopResult) -> Any:
    turns = [turn for turn in result.history if turn.role == "tool_observation"]
    assert len(turns) == 1
    return turns[0]


def test_an_approved_call_runs_as_proposed_and_the_decision_is_recorded(service: Service, kind: Kind) -> None:
    result, space, asker, events = approved_run(kind, service.url, Approve())
    assert result.termination_reason == "success"
    assert [(call.tool, call.args) for call in space.calls] == [("read_file", {"path": "src/auth.ts"})]
    [asked] = asker.asked
    assert (asked.tool, asked.arguments, asked.iteration) == ("read_file", {"path": "src/auth.ts"}, 1)
    assert asked.tool_call_id is not None and asked.tool_call_id == result.steps[0].tool_call_id
    assert result.steps[0].approval == Approve()
    assert (result.steps[0].observation, result.steps[0].is_error) == (FILES["src/auth.ts"], False)
    assert [event.decision for event in events if isinstance(event, LoopApproval)] == [Approve()]


def test_a_denied_call_is_not_run_and_the_model_is_told_why(service: Service, kind: Kind) -> None:
    result, space, _, _ = approved_run(kind, service.url, Deny("secrets live in auth.ts"))
    assert result.termination_reason == "success"
    assert space.calls == []
    step = result.steps[0]
    assert step.approval == Deny("secrets live in auth.ts")
    assert step.is_error is True
    assert step.observation.startswith("The user denied this call")
    assert "secrets live in auth.ts" in step.observation
    turn = the_observation_turn(result)
    assert (turn.content, turn.is_error, turn.tool_call_id) == (step.observation, True, step.tool_call_id)
    assert result.errors == []  # a decision of the user's, not a tool's failure


def test_an_edited_call_runs_with_the_new_arguments(service: Service, kind: Kind) -> None:
    result, space, _, _ = approved_run(kind, service.url, Edit({"path": "src/session.ts"}))
    assert result.termination_reason == "success"
    assert [(call.tool, call.args) for call in space.calls] == [("read_file", {"path": "src/session.ts"})]
    step = result.steps[0]
    assert step.args == {"path": "src/session.ts"}  # what ran; the proposal is in the history
    assert step.approval == Edit({"path": "src/session.ts"})
    # The model is told its arguments were edited, and what the edited call gave.
    note = '(The user edited the arguments to {"path":"src/session.ts"}.)\n'
    assert (step.observation, step.is_error) == (note + FILES["src/session.ts"], False)
    assert the_observation_turn(result).content == step.observation


@pytest.mark.parametrize(
    "edited",
    [["src/session.ts"], "src/session.ts", {1: "x"}, {"path": {1, 2}}],
    ids=["list", "str", "int-key", "set"],
)
def test_an_edit_that_is_no_json_object_is_refused_as_a_denial(
    service: Service, kind: Kind, edited: Any
) -> None:
    result, space, _, _ = approved_run(kind, service.url, Edit(edited))
    assert result.termination_reason == "success"
    assert space.calls == []
    step = result.steps[0]
    assert step.is_error is True
    assert step.observation.startswith(
        "The user denied this call: the arguments the user edited are not a JSON object"
    )
    assert the_observation_turn(result).is_error is True


def test_a_call_needing_approval_with_no_one_to_ask_is_denied(service: Service, kind: Kind) -> None:
    result, space, _, events = approved_run(kind, service.url, None, approve=False)
    assert result.termination_reason == "success"
    assert space.calls == []
    step = result.steps[0]
    assert step.is_error is True
    assert "no one could approve it" in step.observation
    assert isinstance(step.approval, Deny) and "no one could approve it" in step.approval.reason
    assert any(isinstance(event, LoopApproval) for event in events)


@pytest.mark.parametrize(
    ("decision", "named"),
    [
        (PermissionError("the terminal is gone"), "PermissionError: the terminal is gone"),
        ("yes", "TypeError: approve returned 'yes'"),
    ],
    ids=["raises", "nonsense"],
)
def test_a_callback_that_raises_ends_the_loop_as_a_failure_naming_the_error(
    service: Service, kind: Kind, decision: object, named: str
) -> None:
    result, space, asker, _ = approved_run(kind, service.url, decision)
    assert result.termination_reason == "failure"
    assert result.iterations == 1
    assert space.calls == [] and result.steps == []
    assert len(asker.asked) == 1
    assert named in result.answer and result.answer.startswith("the approval of read_file failed")
    assert [error.source for error in result.errors] == ["approval"]


def test_tools_not_marked_never_reach_the_callback_even_beside_one_that_is(
    service: Service, kind: Kind
) -> None:
    space = workspace(read_needs_approval=True)
    asker = Asker(Deny("not now"))
    result = run(
        kind,
        service.url,
        "Look around",
        tools=space.tools,
        llm_config=LLM,
        approve=asker,
        mock_responses=[
            "Thought: Both at once.\n[search(query='login'), read_file(path='src/auth.ts'), search(query='session')]",
            DONE,
        ],
    )
    assert result.termination_reason == "success"
    assert [asked.tool for asked in asker.asked] == ["read_file"]
    assert space.tool_names() == ["search", "search"]
    assert [(step.tool, step.approval, step.is_error) for step in result.steps] == [
        ("search", None, False),
        ("read_file", Deny("not now"), True),
        ("search", None, False),
    ]
    # Each call, the denied one included, is answered by its own id.
    answered = [turn.tool_call_id for turn in result.history if turn.role == "tool_observation"]
    assert answered == [step.tool_call_id for step in result.steps] and len(set(answered)) == 3


def test_an_async_loop_awaits_a_coroutine_callback(service: Service) -> None:
    asked: list[str] = []

    async def approve(request: ApprovalRequest) -> Decision:
        await asyncio.sleep(0)
        asked.append(request.tool)
        return Edit({"path": "src/session.ts"})

    @tool(needs_approval=True)
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return FILES[path]

    result = run(
        "async",
        service.url,
        "Read",
        tools=[read_file],
        llm_config=LLM,
        approve=approve,
        mock_responses=[READ, DONE],
    )
    assert asked == ["read_file"]
    assert result.steps[0].observation.endswith("}.)\n" + FILES["src/session.ts"])
