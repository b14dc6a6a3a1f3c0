"""The events of a streamed step, and how a server-sent event becomes one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from httpx_sse import ServerSentEvent
from pydantic import ValidationError

from .errors import ReactStepError
from .types import StepResponse, StreamDelta, StreamRetry


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
class StepEvent:
    """The complete step, as ``step()`` returns it. The last event."""

    type: ClassVar[Literal["step"]] = "step"
    step: StepResponse


@dataclass(frozen=True)
class ErrorEvent:
    """The step failed after the stream began. The last event."""

    type: ClassVar[Literal["error"]] = "error"
    error: ReactStepError


StreamEvent: TypeAlias = ThoughtEvent | AnswerEvent | RetryEvent | StepEvent | ErrorEvent
"""One server-sent event of a streamed step. Heartbeats and unknown events are skipped."""


def is_terminal(event: StreamEvent) -> bool:
    return isinstance(event, (StepEvent, ErrorEvent))


def event_of(sse: ServerSentEvent, status: int) -> StreamEvent | None:
    """A server-sent event as a typed one; ``None`` for an event this client does not know."""
    if sse.event not in ("thought", "answer", "retry", "step", "error"):
        return None
    try:
        data = json.loads(sse.data)
    except ValueError:
        raise ReactStepError.unreadable(status, f"the data of a {sse.event} event is not JSON") from None
    if sse.event == "error":
        return ErrorEvent(ReactStepError.from_response(data, None))
    try:
        return _typed(sse.event, data)
    except ValidationError as invalid:
        why = f"the data of a {sse.event} event does not match the contract: {invalid}"
        raise ReactStepError.unreadable(status, why) from None


def _typed(name: str, data: object) -> StreamEvent:
    if name == "thought":
        return ThoughtEvent(StreamDelta.model_validate(data).delta)
    if name == "answer":
        return AnswerEvent(StreamDelta.model_validate(data).delta)
    if name == "retry":
        return RetryEvent(StreamRetry.model_validate(data).reason)
    return StepEvent(StepResponse.model_validate(data))
