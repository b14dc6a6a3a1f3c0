"""The events of a streamed step, plan or evaluation, and how a server-sent event becomes one.

The three streams (``/react_step/stream``, ``/plan/stream``, ``/evaluate/stream``) send the same
events; only what the terminal ``step`` event carries differs: ``StepEvent[S]`` holds the answer
the plain call returns (a ``StepResponse``, a ``PlanResponse`` or an ``EvaluateResponse``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, Generic, Literal, TypeAlias, TypeVar

from httpx_sse import ServerSentEvent
from pydantic import TypeAdapter, ValidationError

from .errors import ReactStepError
from .types import EvaluateResponse, PlanResponse, StepResponse, StreamDelta, StreamRetry

S = TypeVar("S")


@dataclass(frozen=True)
class ThoughtEvent:
    """A piece of the thought as the model writes it."""

    type: ClassVar[Literal["thought"]] = "thought"
    delta: str


@dataclass(frozen=True)
class AnswerEvent:
    """A piece of a final answer as the model writes it."""

    type: ClassVar[Literal["answer"]] = "answer"
    delta: str


@dataclass(frozen=True)
class RetryEvent:
    """The output so far was not a valid step: drop the deltas received; the next try's follow."""

    type: ClassVar[Literal["retry"]] = "retry"
    reason: str


@dataclass(frozen=True)
class StepEvent(Generic[S]):
    """The complete answer, as the plain call returns it: the step (``step()``), or on the plan
    and evaluate streams the ``PlanResponse`` (``plan()``) or ``EvaluateResponse``
    (``evaluate()``). The last event."""

    type: ClassVar[Literal["step"]] = "step"
    step: S


@dataclass(frozen=True)
class ErrorEvent:
    """The step (plan, evaluation) failed after the stream began. The last event."""

    type: ClassVar[Literal["error"]] = "error"
    error: ReactStepError


StreamEventOf: TypeAlias = ThoughtEvent | AnswerEvent | RetryEvent | StepEvent[S] | ErrorEvent
"""One server-sent event of a stream whose terminal event carries an ``S``. Heartbeats and
unknown events are skipped."""

StreamEvent: TypeAlias = StreamEventOf[StepResponse]
"""One server-sent event of a streamed step (``stream``)."""

PlanStreamEvent: TypeAlias = StreamEventOf[PlanResponse]
"""One server-sent event of a streamed plan (``stream_plan``): the answer deltas are the plan's JSON."""

EvaluationStreamEvent: TypeAlias = StreamEventOf[EvaluateResponse]
"""One server-sent event of a streamed evaluation (``stream_evaluate``): the answer deltas are
the evaluation's JSON."""


def is_terminal(event: StreamEventOf[S]) -> bool:
    return isinstance(event, (StepEvent, ErrorEvent))


def event_of(sse: ServerSentEvent, status: int, terminal: TypeAdapter[S]) -> StreamEventOf[S] | None:
    """A server-sent event as a typed one, the terminal ``step`` event's data read as
    ``terminal``; ``None`` for an event this client does not know."""
    if sse.event not in ("thought", "answer", "retry", "step", "error"):
        return None
    try:
        data = json.loads(sse.data)
    except (ValueError, RecursionError):
        raise ReactStepError.unreadable(status, f"the data of a {sse.event} event is not JSON") from None
    if sse.event == "error":
        return ErrorEvent(ReactStepError.from_response(data, None))
    try:
        return _typed(sse.event, data, terminal)
    except ValidationError as invalid:
        why = f"the data of a {sse.event} event does not match the contract: {invalid}"
        raise ReactStepError.unreadable(status, why) from None


def _typed(name: str, data: object, terminal: TypeAdapter[S]) -> StreamEventOf[S]:
    if name == "thought":
        return ThoughtEvent(StreamDelta.model_validate(data).delta)
    if name == "answer":
        return AnswerEvent(StreamDelta.model_validate(data).delta)
    if name == "retry":
        return RetryEvent(StreamRetry.model_validate(data).reason)
    return StepEvent(terminal.validate_python(data))
