"""The loop's bookkeeping, shared by the sync and async drivers (loop.py, aloop.py), which do
the I/O: each step's request, what a step's answer means, stall detection, the records of the
calls and the observations that go back into the history, and how the loop ends."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ._http import jsonable
from .approval import ApprovalRequest, Edit, Plan, plan_of, unapprovable, unasked
from .errors import ReactStepError
from .events import AnswerEvent, ErrorEvent, RetryEvent, StepEvent, StreamEvent, ThoughtEvent
from .loop_types import (
    LoopAction,
    LoopAnswer,
    LoopAnswerDelta,
    LoopError,
    LoopEvent,
    LoopObservation,
    LoopOptions,
    LoopResult,
    LoopRetry,
    LoopStep,
    LoopThought,
    LoopThoughtDelta,
    TerminationReason,
)
from .planning import plan_file
from .tools import Tool, as_tool
from .types import ActionDetails, ConversationTurn, StepResponse, ToolResult

CANCELLED = "the loop was cancelled"


@dataclass(frozen=True)
class Answered:
    """A final answer to have evaluated (``reflect``) before the loop accepts it, and the steps
    the service said were left after it."""

    answer: str
    left: int


class LoopCore:
    def __init__(self, options: LoopOptions, tools: Sequence[Tool[Any, Any] | Callable[..., Any]]) -> None:
        self.options = options
        self.tools = _by_name(tools)
        self.result = LoopResult(session_id=_session_of(options.request))
        self._declarations = [tool.declaration() for tool in self.tools.values()]
        self._last_call: tuple[str, int] | None = None
        # Scripted outputs used so far (`mock_responses`): steps, plans and evaluations alike.
        self._scripted = 0
        # The steps left when the last step was sent: what the service says is left after it
        # is bounded by this less one, so no service can run the loop past `max_iterations`.
        self._sent_left = max(1, options.max_iterations)

    def emit(self, event: LoopEvent) -> None:
        if self.options.on_event is not None:
            self.options.on_event(event)

    def request(self, query: str, iterations_left: int) -> dict[str, Any] | None:
        """The request of a step, with the plan (as a file of its context) when there is one;
        ``None`` when a scripted model has no output left for it."""
        request = self._base(query)
        request["max_iterations_left"] = iterations_left
        self._sent_left = iterations_left
        if self.options.final_answer_schema is not None:
            react = _object(request.get("react") or {})
            request["react"] = {**react, "final_answer_schema": jsonable(self.options.final_answer_schema)}
        plan = self.result.current_plan
        if plan is not None:
            request["explicit_context"] = [*_list(request.get("explicit_context")), plan_file(plan)]
        return self.scripted(request)

    def side_request(self, query: str) -> dict[str, Any]:
        """The request of a plan or an evaluation: the loop's, without a final answer schema (which
        they refuse) and without the plan's file (they are sent the plan as a field)."""
        request = self._base(query)
        react = request.get("react")
        if isinstance(react, Mapping) and "final_answer_schema" in react:
            request["react"] = {k: v for k, v in react.items() if k != "final_answer_schema"}
        return request

    def _base(self, query: str) -> dict[str, Any]:
        options = self.options
        request = _object(jsonable(options.request or {}))
        request.update(
            user_query=query,
            conversation_history=jsonable(self.result.history),
            llm_config=jsonable(options.llm_config),
            tools=self._declarations,
        )
        if self.result.session_id is not None:
            request["session_id"] = self.result.session_id
        self._add_keys(request)
        return request

    def scripted(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The request with the scripted model's next output; ``None`` when it has none left."""
        script = self.options.mock_responses
        if script is None:
            return request
        if self._scripted >= len(script):
            return None
        request["mock_response"] = script[self._scripted]
        self._scripted += 1
        return request

    def _add_keys(self, request: dict[str, Any]) -> None:
        keys = _object(request.get("user_api_keys") or {})
        if self.options.key is not None:
            keys["llmKey"] = self.options.key
        if self.options.provider_keys is not None:
            keys["providerKeys"] = dict(self.options.provider_keys)
        if keys:
            request["user_api_keys"] = keys

    @property
    def scripted_count(self) -> int:
        """Scripted outputs used so far."""
        return self._scripted

    def scripted_out(self) -> LoopResult:
        return self.end("failure", f"the scripted responses ran out after {self._scripted} steps")

    def took(self, step: StepResponse) -> None:
        """A step's session and tokens, into the result (a plan's and an evaluation's too)."""
        result = self.result
        result.session_id = step.session_id or result.session_id
        if step.usage is not None:
            result.usage.prompt_tokens += step.usage.prompt_tokens
            result.usage.completion_tokens += step.usage.completion_tokens

    def streamed(self, event: StreamEvent, iteration: int) -> StepResponse | None:
        """Passes a stream's event on as the loop's; the step at its end (an error is raised)."""
        if isinstance(event, ThoughtEvent):
            self.emit(LoopThoughtDelta(iteration, event.delta))
        elif isinstance(event, AnswerEvent):
            self.emit(LoopAnswerDelta(iteration, event.delta))
        elif isinstance(event, RetryEvent):
            self.emit(LoopRetry(iteration, event.reason))
        elif isinstance(event, StepEvent):
            return event.step
        elif isinstance(event, ErrorEvent):
            raise event.error
        return None

    def absorb(self, step: StepResponse, iteration: int) -> LoopResult | list[ActionDetails] | Answered:
        """Takes in a step's answer: the loop's end, the calls to answer, or (``reflect``) the
        answer to have evaluated."""
        result = self.result
        result.iterations = iteration
        self.took(step)
        result.history = list(step.updated_conversation_history)
        if step.thought:
            self.emit(LoopThought(iteration, step.thought))
        if step.status == "direct_response_provided":
            return self._answered(step, iteration)
        if step.status != "action_proposed" or step.action_details is None:
            return self.end("failure", f"the service answered a step of status {step.status}")
        return list(step.parallel_actions or [step.action_details])

    def _answered(self, step: StepResponse, iteration: int) -> LoopResult | Answered:
        answer = step.direct_response or ""
        if "direct_response_json" in step.model_fields_set:
            self.result.answer_json = step.direct_response_json
        self.emit(LoopAnswer(iteration, answer))
        lower = answer.lower()
        if any(phrase.lower() in lower for phrase in self.options.failure_phrases):
            return self.end("failure", answer)
        # An answer the last step asked for (`forced_final`) may be a guess made to obey.
        limited = step.termination_reason == "max_iterations" or step.forced_final is True
        if limited:
            return self.end("max_iterations", answer)
        if self.options.reflect:
            return Answered(answer, self._left_after(step))
        return self.end("success", answer)

    def announce(self, calls: list[ActionDetails], iteration: int) -> LoopResult | None:
        """Tells of each call and counts it; the loop's end when one repeats too often."""
        for call in calls:
            self.emit(LoopAction(iteration, call.tool_name, call.tool_args, call.tool_call_id))
            stalled = self._stalled(call)
            if stalled is not None:
                return self.end("stalled", stalled)
            usage = self.result.tool_usage
            usage[call.tool_name] = usage.get(call.tool_name, 0) + 1
        return None

    def _stalled(self, call: ActionDetails) -> str | None:
        key = f"{call.tool_name}\0{json.dumps(call.tool_args, sort_keys=True)}"
        count = self._last_call[1] + 1 if self._last_call and self._last_call[0] == key else 1
        self._last_call = (key, count)
        if count < max(1, self.options.stall_threshold):
            return None
        return f"the model called {call.tool_name} with the same arguments {count} times in a row"

    def approval_request(self, call: ActionDetails, iteration: int) -> ApprovalRequest | None:
        """The question for the user, when the call's tool needs approval."""
        tool = self.tools.get(call.tool_name)
        if tool is None or not tool.needs_approval:
            return None
        return ApprovalRequest(call.tool_call_id, call.tool_name, dict(call.tool_args), iteration)

    def plan(
        self, call: ActionDetails, asked: ApprovalRequest | None, has_approver: bool, decision: object
    ) -> Plan:
        """What becomes of the call, given the user's ``decision`` when one was asked for."""
        if asked is None:
            return unasked(dict(call.tool_args))
        if not has_approver:
            return unapprovable()
        return plan_of(decision, dict(call.tool_args))

    def approval_failed(self, call: ActionDetails, error: Exception) -> LoopResult:
        message = f"the approval of {call.tool_name} failed: {type(error).__name__}: {error}"
        self.result.errors.append(LoopError("approval", message))
        return self.end("failure", message)

    def tool_of(self, call: ActionDetails) -> Tool[Any, Any] | str:
        """The call's tool, or the observation saying there is none."""
        return self.tools.get(call.tool_name) or f"there is no tool named {call.tool_name}"

    def record(
        self, call: ActionDetails, iteration: int, thought: str, outcome: tuple[str, bool], plan: Plan
    ) -> LoopStep:
        """The call's record, told as an observation event; a tool's failure is kept in errors."""
        observation, is_error = outcome
        ran_with = plan.arguments if plan.arguments is not None else dict(call.tool_args)
        if isinstance(plan.decision, Edit) and plan.refusal is None:
            # The model still holds its own arguments: it is told what ran instead.
            edited = json.dumps(ran_with, separators=(",", ":"), ensure_ascii=False)
            observation = f"(The user edited the arguments to {edited}.)\n{observation}"
        if is_error and plan.refusal is None:
            self.result.errors.append(LoopError(call.tool_name, observation))
        self.emit(LoopObservation(iteration, call.tool_name, call.tool_call_id, observation, is_error))
        return LoopStep(
            iteration=iteration,
            thought=thought,
            tool=call.tool_name,
            args=ran_with,
            tool_call_id=call.tool_call_id,
            observation=observation,
            is_error=is_error,
            approval=plan.decision,
        )

    def answer_calls(self, step: StepResponse, records: list[LoopStep]) -> None:
        """Puts the observations in the history, in the calls' order, each naming its call's id."""
        history = list(step.updated_conversation_history)
        for record in records:
            self.result.steps.append(record)
            history.append(_observation_turn(record))
        self.result.history = history

    def _left_after(self, step: StepResponse) -> int:
        """The steps left after ``step``: the service's count, never more than the loop's own."""
        return min(step.iterations_remaining or 0, self._sent_left - 1)

    def after_calls(self, step: StepResponse) -> int | LoopResult:
        """Steps left after this one, or the loop's end when none is."""
        left = self._left_after(step)
        if left <= 0:
            return self.end("max_iterations", "the loop reached its step limit before an answer")
        return left

    def failed(self, error: ReactStepError, what: str = "") -> LoopResult:
        """The loop's end on the service's failure (its loop guard's refusal is a stall); ``what``,
        in front of the message, says which call failed when it was not a step."""
        message = f"{what}{error.type}: {error.message}"
        self.result.errors.append(LoopError("service", message, error))
        return self.end("stalled" if error.type == "loop_detected" else "failure", message)

    def cancelled(self) -> LoopResult:
        return self.end("cancelled", CANCELLED)

    def end(self, reason: TerminationReason, answer: str) -> LoopResult:
        self.result.termination_reason = reason
        self.result.success = reason == "success"
        self.result.answer = answer
        return self.result


def failure_of(error: Exception, tool: Tool[Any, Any]) -> str:
    """A tool's failure as the observation the model reads."""
    if isinstance(error, ValidationError):
        return f"the arguments do not match {tool.name}'s parameters: {error}"
    return str(error) or type(error).__name__


def _observation_turn(record: LoopStep) -> ConversationTurn:
    return ConversationTurn(
        role="tool_observation",
        content=record.observation,
        tool_call_id=record.tool_call_id,
        is_error=record.is_error,
        toolResult=ToolResult(success=not record.is_error),
    )


def _by_name(tools: Sequence[Tool[Any, Any] | Callable[..., Any]]) -> dict[str, Tool[Any, Any]]:
    made: dict[str, Tool[Any, Any]] = {}
    for tool in map(as_tool, tools):
        if tool.name in made:
            raise ValueError(f"two tools are named {tool.name}")
        made[tool.name] = tool
    return made


def _session_of(request: Mapping[str, Any] | None) -> str | None:
    session = (request or {}).get("session_id")
    return session if isinstance(session, str) else None


def _object(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else []
