"""run_loop and arun_loop against the real server with a scripted model (mock_response per step):
a three-step loop with parallel calls answered by id, and each way a loop ends. Every test runs
through both clients."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, field_validator

from reactstep import (
    AsyncClient,
    Client,
    LoopAction,
    LoopAnswer,
    LoopEvent,
    LoopObservation,
    LoopThought,
    LoopThoughtDelta,
    LoopWaiting,
    Tool,
    ToolContext,
    run_loop,
    tool,
)

from .support.drive import LLM, Kind, run
from .support.requests import OFFLINE, offline
from .support.service import Service
from .support.workspace import FILES, workspace

def test_three_scripted_steps_a_call_two_parallel_calls_answered_by_their_ids_then_the_answer(
    service: Service, kind: Kind
) -> None:
    space = workspace()
    events: list[LoopEvent] = []
    result = run(
        kind,
        service.url,
        "How does login make a session?",
        tools=space.tools,
        llm_config=LLM,
        max_iterations=5,
        on_event=events.append,
        mock_responses=[
            'Thought: Find where login is defined.\nAction: search(query="function login")',
            "Thought: Read both files at once.\n[read_file(path='src/auth.ts'), read_file(path='src/session.ts')]",
            "Thought: login calls session, which wraps the user.\nFinal Answer: login(user) returns session(user), an object holding the user.",
        ],
    )
    assert result.termination_reason == "success", result.answer
    assert result.success is True
    assert result.answer == "login(user) returns session(user), an object holding the user."
    assert result.iterations == 3
    assert result.tool_usage == {"search": 1, "read_file": 2}
    assert [(s.iteration, s.tool, s.args, s.observation, s.is_error) for s in result.steps] == [
        (1, "search", {"query": "function login"}, "src/auth.ts", False),
        (2, "read_file", {"path": "src/auth.ts"}, FILES["src/auth.ts"], False),
        (2, "read_file", {"path": "src/session.ts"}, FILES["src/session.ts"], False),
    ]
    # Every call had an id, the tools saw it, and the observation in the history answers it.
    ids = [step.tool_call_id for step in result.steps]
    assert [call.tool_call_id for call in space.calls] == ids
    assert len(set(ids)) == 3 and None not in ids
    parallel = [
        turn for turn in result.history if turn.role == "assistant" and len(turn.toolCalls or []) == 2
    ]
    assert len(parallel) == 1
    assert [call.id for call in parallel[0].toolCalls or []] == ids[1:]
    assert [turn.tool_call_id for turn in result.history if turn.role == "tool_observation"] == ids
    assert result.history[-1].role == "assistant" and result.history[-1].content == result.answer
    # The thought streamed in pieces that add up to each step's thought.
    for iteration in (1, 2, 3):
        pieces = [e.delta for e in events if isinstance(e, LoopThoughtDelta) and e.iteration == iteration]
        whole = [e.thought for e in events if isinstance(e, LoopThought) and e.iteration == iteration]
        assert len(pieces) > 1 and ["".join(pieces)] == whole
    assert [e.tool for e in events if isinstance(e, LoopAction)] == ["search", "read_file", "read_file"]
    assert [type(e).__name__ for e in events if not isinstance(e, LoopThoughtDelta)][:4] == [
        "LoopWaiting",
        "LoopThought",
        "LoopAction",
        "LoopObservation",
    ]
    assert isinstance(events[-1], LoopAnswer)


def test_the_same_loop_without_streaming_gives_the_same_result(service: Service, kind: Kind) -> None:
    events: list[LoopEvent] = []
    result = run(
        kind,
        service.url,
        "What does session return?",
        tools=workspace().tools,
        llm_config=LLM,
        stream=False,
        on_event=events.append,
        mock_responses=[
            "Thought: Read it.\nAction: read_file(path='src/session.ts')",
            "Thought: It is plain.\nFinal Answer: an object holding the user",
        ],
    )
    assert result.termination_reason == "success"
    assert result.iterations == 2
    assert result.steps[0].observation == FILES["src/session.ts"]
    assert not any(isinstance(event, LoopThoughtDelta) for event in events)
    assert sum(isinstance(event, LoopWaiting) for event in events) == 2


def test_a_failing_tool_is_told_to_the_model_as_an_error_and_the_loop_goes_on(
    service: Service, kind: Kind
) -> None:
    result = run(
        kind,
        service.url,
        "Read a missing file",
        tools=workspace().tools,
        llm_config=LLM,
        mock_responses=[
            "Thought: Try it.\nAction: read_file(path='src/missing.ts')",
            "Thought: It does not exist.\nFinal Answer: there is no such file",
        ],
    )
    assert result.termination_reason == "success"
    assert (result.steps[0].is_error, result.steps[0].observation) == (True, "no such file: src/missing.ts")
    assert [error.source for error in result.errors] == ["read_file"]
    observation = next(turn for turn in result.history if turn.role == "tool_observation")
    assert observation.is_error is True
    assert observation.toolResult is not None and observation.toolResult.success is False


def test_the_same_call_three_times_in_a_row_is_a_stalled_loop(service: Service, kind: Kind) -> None:
    space = workspace()
    same = "Thought: Again.\nAction: search(query='login')"
    result = run(
        kind, service.url, "Loop", tools=space.tools, llm_config=LLM, stall_threshold=3, mock_responses=[same] * 4
    )
    assert result.termination_reason == "stalled"
    assert result.success is False
    assert result.iterations == 3
    assert len(space.calls) == 2
    assert "search with the same arguments 3 times in a row" in result.answer


@pytest.mark.parametrize("stream", [True, False])
def test_the_services_loop_guard_ends_a_repeating_loop_as_stalled(
    service: Service, kind: Kind, stream: bool
) -> None:
    space = workspace()
    same = "Thought: Again.\nAction: search(query='login')"
    result = run(
        kind,
        service.url,
        "Loop",
        tools=space.tools,
        llm_config=LLM,
        stream=stream,
        # By default the guard acts before the client's own count.
        **({"stall_threshold": 100} if stream else {}),
        mock_responses=[same] * 8,
    )
    assert result.termination_reason == "stalled", result.answer
    assert len(space.calls) == 5
    error = result.errors[0].error
    assert error is not None
    assert (error.type, error.status, error.retryable) == ("loop_detected", 422, False)
    assert error.loop_guard is not None and error.loop_guard.action == "stopped"
    assert [(r.tool_name, r.tool_args) for r in error.loop_guard.repeated] == [("search", {"query": "login"})]
    assert result.answer.startswith("loop_detected: ")


def test_a_model_that_still_calls_a_tool_on_the_last_step_ends_with_max_iterations(
    service: Service, kind: Kind
) -> None:
    result = run(
        kind,
        service.url,
        "Never done",
        tools=workspace().tools,
        llm_config=LLM,
        max_iterations=2,
        mock_responses=[
            "Thought: One.\nAction: search(query='a')",
            "Thought: Two.\nAction: search(query='b')",
        ],
    )
    assert result.termination_reason == "max_iterations"
    assert (result.success, result.iterations) == (False, 2)


def test_an_answer_the_last_step_asked_for_ends_with_max_iterations(service: Service, kind: Kind) -> None:
    result = run(
        kind,
        service.url,
        "Where is it?",
        tools=workspace().tools,
        llm_config=LLM,
        max_iterations=2,
        mock_responses=[
            "Thought: One.\nAction: search(query='a')",
            "Thought: I must answer.\nFinal Answer: probably a.ts",
        ],
    )
    assert (result.termination_reason, result.success, result.answer) == (
        "max_iterations",
        False,
        "probably a.ts",
    )


def test_a_final_answer_schema_asks_for_json_and_returns_it_parsed(service: Service, kind: Kind) -> None:
    result = run(
        kind,
        service.url,
        "Where is it?",
        tools=workspace().tools,
        llm_config=LLM,
        final_answer_schema={
            "type": "object",
            "required": ["file"],
            "properties": {"file": {"type": "string"}},
        },
        mock_responses=['Thought: Found.\nFinal Answer: {"file": "a.ts"}'],
    )
    assert result.termination_reason == "success"
    assert result.answer_json == {"file": "a.ts"}
    assert result.answer == '{"file":"a.ts"}'


@pytest.mark.parametrize(
    ("answer", "phrases"),
    [("I cannot complete this task.", None), ("Blocked: the disk is gone.", ["blocked:"])],
    ids=["default", "own-phrase"],
)
def test_an_answer_that_gives_up_is_a_failure(
    service: Service, kind: Kind, answer: str, phrases: list[str] | None
) -> None:
    options: dict[str, Any] = {} if phrases is None else {"failure_phrases": phrases}
    result = run(
        kind,
        service.url,
        "Impossible",
        tools=workspace().tools,
        llm_config=LLM,
        mock_responses=[f"Thought: No way.\nFinal Answer: {answer}"],
        **options,
    )
    assert (result.termination_reason, result.answer) == ("failure", answer)


def test_a_service_error_is_a_failure_that_keeps_the_error(service: Service, kind: Kind) -> None:
    result = run(
        kind,
        service.url,
        "Too big",
        tools=workspace().tools,
        llm_config={**LLM, "tokenLimit": 0},
        mock_responses=["Final Answer: x"],
    )
    assert (result.termination_reason, result.iterations) == ("failure", 0)
    assert result.errors[0].source == "service"
    assert result.errors[0].error is not None and result.errors[0].error.type == "invalid_request"


def test_a_scripted_model_that_runs_out_ends_the_loop_as_a_failure(service: Service, kind: Kind) -> None:
    result = run(
        kind,
        service.url,
        "Go on",
        tools=workspace().tools,
        llm_config=LLM,
        mock_responses=["Thought: One.\nAction: search(query='a')"],
    )
    assert (result.termination_reason, result.iterations) == ("failure", 1)
    assert result.answer == "the scripted responses ran out after 1 steps"


def test_the_session_id_given_goes_with_every_step_and_comes_back(service: Service, kind: Kind) -> None:
    result = run(
        kind,
        service.url,
        "Where?",
        tools=workspace().tools,
        llm_config=LLM,
        request={"session_id": "py-loop-session", "explicit_context": [{"path": "a.ts", "content": "x"}]},
        mock_responses=["Thought: One.\nAction: search(query='a')", "Thought: Done.\nFinal Answer: a.ts"],
    )
    assert (result.termination_reason, result.session_id) == ("success", "py-loop-session")


def test_the_calls_of_one_step_run_at_once(service: Service, kind: Kind) -> None:
    # Each call waits for the other at a barrier: run one after the other, they would time out.
    meeting = threading.Barrier(2, timeout=20)

    @tool
    def meet(name: str) -> str:
        """Wait for the other caller."""
        meeting.wait()
        return f"{name} met"

    result = run(
        kind,
        service.url,
        "Meet",
        tools=[meet],
        llm_config=LLM,
        mock_responses=[
            "Thought: Both.\n[meet(name='a'), meet(name='b')]",
            "Thought: Met.\nFinal Answer: both met",
        ],
    )
    assert result.termination_reason == "success", result.errors
    assert [step.observation for step in result.steps] == ["a met", "b met"]


def test_the_calls_of_one_step_run_at_most_max_parallel_tools_at_once(
    service: Service, kind: Kind
) -> None:
    # A third call running at once ends every wait: without the bound all five meet at once.
    lock, crowded = threading.Lock(), threading.Event()
    running = {"now": 0, "most": 0}

    @tool
    def crowd(n: int) -> str:
        """Wait a moment among the others."""
        with lock:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
            if running["now"] > 2:
                crowded.set()
        crowded.wait(0.2)
        with lock:
            running["now"] -= 1
        return str(n)

    result = run(
        kind,
        service.url,
        "Crowd",
        tools=[crowd],
        llm_config=LLM,
        max_parallel_tools=2,
        mock_responses=[
            "Thought: All.\n[crowd(n=1), crowd(n=2), crowd(n=3), crowd(n=4), crowd(n=5)]",
            "Thought: Done.\nFinal Answer: crowded",
        ],
    )
    assert result.termination_reason == "success", result.errors
    assert [step.observation for step in result.steps] == ["1", "2", "3", "4", "5"]
    assert running["most"] == 2


def test_async_tools_of_one_step_run_concurrently_in_the_event_loop(service: Service) -> None:
    arrived: dict[str, asyncio.Event] = {}

    async def meet(name: str, other: str) -> str:
        """Wait for the other caller."""
        arrived.setdefault(name, asyncio.Event()).set()
        await asyncio.wait_for(arrived.setdefault(other, asyncio.Event()).wait(), timeout=20)
        return f"{name} met {other}"

    result = run(
        "async",
        service.url,
        "Meet",
        tools=[meet],
        llm_config=LLM,
        mock_responses=[
            "Thought: Both.\n[meet(name='a', other='b'), meet(name='b', other='a')]",
            "Final Answer: met",
        ],
    )
    assert [step.observation for step in result.steps] == ["a met b", "b met a"]


class Point(BaseModel):
    """A point on the grid."""

    x: int
    y: int = 0

    @field_validator("x")
    @classmethod
    def on_the_grid(cls, value: int) -> int:
        if value > 100:
            raise ValueError("x is off the grid")
        return value


def test_arguments_reach_the_function_as_its_types_and_its_result_as_json(
    service: Service, kind: Kind
) -> None:
    seen: list[Point] = []

    @tool
    def locate(point: Point, context: ToolContext) -> dict[str, Any]:
        """Say where a point is."""
        seen.append(point)
        return {"x": point.x, "y": point.y, "call": context.tool_call_id is not None}

    result = run(
        kind,
        service.url,
        "Where?",
        tools=[locate],
        llm_config=LLM,
        mock_responses=[
            'Thought: Locate it.\nAction: {"name": "locate", "arguments": {"point": {"x": 3}}}',
            'Thought: And this one.\nAction: {"name": "locate", "arguments": {"point": {"x": 300}}}',
            "Thought: Done.\nFinal Answer: located",
        ],
    )
    assert result.termination_reason == "success", result.answer
    assert seen == [Point(x=3, y=0)]
    assert (result.steps[0].observation, result.steps[0].is_error) == (
        '{"x": 3, "y": 0, "call": true}',
        False,
    )
    assert result.steps[1].is_error is True
    assert result.steps[1].observation.startswith("the arguments do not match locate's parameters:")
    assert "x is off the grid" in result.steps[1].observation


def test_cancelling_while_a_tool_runs_ends_the_sync_loop_as_cancelled(service: Service) -> None:
    cancel = threading.Event()

    @tool
    def slow(context: ToolContext) -> str:
        """A tool that is stopped."""
        assert context.cancel is cancel
        cancel.set()
        raise RuntimeError("stopped")

    with Client(service.url) as client:
        result = run_loop(
            client,
            "Cancel me",
            tools=[slow],
            llm_config=LLM,
            cancel=cancel,
            mock_responses=[
                "Thought: Run the slow one.\nAction: slow()",
                "Thought: never sent\nFinal Answer: no",
            ],
        )
    assert (result.termination_reason, result.iterations, result.steps) == ("cancelled", 1, [])


def test_cancelling_while_a_tool_runs_stops_the_async_tool_and_ends_the_loop(service: Service) -> None:
    stopped: list[str] = []

    async def main() -> Any:
        cancel = asyncio.Event()

        async def slow(context: ToolContext) -> str:
            """A tool that waits until it is stopped."""
            cancel.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                stopped.append(context.tool_call_id or "")
                raise
            return "never"

        async with AsyncClient(service.url) as client:
            return await client.run_loop(
                "Cancel me",
                tools=[slow],
                llm_config=LLM,
                cancel=cancel,
                mock_responses=["Thought: Run the slow one.\nAction: slow()", "Final Answer: no"],
            )

    result = asyncio.run(main())
    assert (result.termination_reason, result.iterations, result.steps) == ("cancelled", 1, [])
    assert len(stopped) == 1 and stopped[0].startswith("call_")


def test_two_tools_of_one_name_are_refused() -> None:
    def read_file(path: str) -> str:
        return path

    with (
        Client("http://reactstep.invalid") as client,
        pytest.raises(ValueError, match="two tools are named read_file"),
    ):
        run_loop(client, "x", tools=[read_file, Tool(read_file)], llm_config=LLM, mock_responses=[])


def test_the_loops_own_step_limit_holds_whatever_the_service_counts(service: Service) -> None:
    """A service that says 99 steps are left after every step, each with a new call, cannot run
    the loop past ``max_iterations``: the loop counts its own steps."""
    real = httpx.post(f"{service.url}/api/agent/react_step", json=offline('Thought: t\nAction: read_file(path="a")'))
    template = real.json()
    assert template["status"] == "action_proposed", template
    asked: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        details = {**template["action_details"], "tool_args": {"path": f"f{len(asked)}"}}
        return httpx.Response(200, json={**template, "iterations_remaining": 99, "action_details": details})

    def read_file(path: str) -> str:
        return f"nothing in {path}"

    with Client("http://reactstep.invalid", transport=httpx.MockTransport(answer)) as client:
        result = run_loop(client, "q", tools=[read_file], llm_config=OFFLINE, max_iterations=3, stream=False)
    assert (result.termination_reason, result.iterations, len(asked)) == ("max_iterations", 3, 3)

