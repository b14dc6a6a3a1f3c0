"""What the sync and async clients share: the request's bytes and headers, and how an answer's
body becomes a step or an error. No I/O here."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from .errors import ReactStepError
from .types import (
    EvaluateRequest,
    EvaluateResponse,
    PlanRequest,
    PlanResponse,
    ReactStepRequest,
    StepResponse,
)

STEP_PATH = "/api/agent/react_step"
STREAM_PATH = "/api/agent/react_step/stream"
PLAN_PATH = "/api/agent/plan"
PLAN_STREAM_PATH = "/api/agent/plan/stream"
EVALUATE_PATH = "/api/agent/evaluate"
EVALUATE_STREAM_PATH = "/api/agent/evaluate/stream"

DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
"""Five minutes for a step's answer (or between two pieces of a stream), ten seconds to connect."""

DEFAULT_STREAM_IDLE_TIMEOUT = 60.0
"""Seconds a stream may go without a whole block (an event, or a comment such as the heartbeat
the service sends every 15 s): four heartbeats."""

Request: TypeAlias = ReactStepRequest | Mapping[str, Any]
"""A step's request: the model, or a mapping sent as it is (the service checks it)."""

AnyRequest: TypeAlias = ReactStepRequest | PlanRequest | EvaluateRequest | Mapping[str, Any]
"""A request of any endpoint (a ``PlanRequest`` and an ``EvaluateRequest`` are step requests)."""

PlanRequestLike: TypeAlias = PlanRequest | Mapping[str, Any]
"""A plan's request: the model, or a mapping sent as it is."""

EvaluateRequestLike: TypeAlias = EvaluateRequest | Mapping[str, Any]
"""An evaluation's request: the model, or a mapping sent as it is."""

T = TypeVar("T")

STEP_RESPONSE: TypeAdapter[StepResponse] = TypeAdapter(StepResponse)
PLAN_RESPONSE: TypeAdapter[PlanResponse] = TypeAdapter(PlanResponse)
EVALUATE_RESPONSE: TypeAdapter[EvaluateResponse] = TypeAdapter(EvaluateResponse)


def jsonable(value: object) -> object:
    """``value`` as plain JSON values; a model holds only the fields that were set."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [jsonable(item) for item in value]
    return value


def encode(request: AnyRequest) -> bytes:
    return json.dumps(jsonable(request), ensure_ascii=False, allow_nan=False).encode("utf-8")


def headers(api_token: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    """The headers of every call: the caller's, then the content type and the bearer token."""
    made = dict(extra or {})
    made["content-type"] = "application/json"
    if api_token is not None:
        made["authorization"] = f"Bearer {api_token}"
    return made


def step_of(response: httpx.Response) -> StepResponse:
    """The step a 2xx answer holds (its body already read)."""
    return answer_of(response, STEP_RESPONSE, "the step")


def answer_of(response: httpx.Response, model: TypeAdapter[T], what: str) -> T:
    """What a 2xx answer holds, read as ``model`` (its body already read)."""
    status = response.status_code
    try:
        body = json.loads(response.content)
    except (ValueError, RecursionError):
        raise ReactStepError.unreadable(status, f"{what} is not JSON") from None
    try:
        return model.validate_python(body)
    except ValidationError as invalid:
        raise ReactStepError.unreadable(status, f"{what} does not match the contract: {invalid}") from None


def error_of(response: httpx.Response) -> ReactStepError:
    """The error a non-2xx answer stands for (its body already read)."""
    status = response.status_code
    try:
        body = json.loads(response.content)
    except (ValueError, RecursionError):
        return ReactStepError.unreadable(status, f"HTTP {status} whose body is not JSON")
    if not isinstance(body, dict) or "error" not in body:
        return ReactStepError.unreadable(status, f"HTTP {status} without an error object")
    return ReactStepError.from_response(body, status, response.headers.get("retry-after"))


def cut_short(status: int) -> ReactStepError:
    return ReactStepError.unreadable(status, f"HTTP {status} with a body cut short")


MAX_BODY = 16 * 1024 * 1024
"""The most of a plain answer's body read: the bound of a streamed event's data (``_sse``), so of
a streamed step, whose terminal event is the plain step's body."""


def too_long(status: int) -> ReactStepError:
    """A body past ``MAX_BODY``: a broken service or a proxy, which the client does not hold."""
    return ReactStepError.unreadable(status, f"HTTP {status} with a body longer than 16 MiB")


def declared_too_long(response: httpx.Response) -> bool:
    """Whether the answer's ``content-length`` says it is longer than ``MAX_BODY``."""
    declared = response.headers.get("content-length", "")
    return declared.isdigit() and int(declared) > MAX_BODY


class Body:
    """An answer's body as its pieces come, refused past ``MAX_BODY`` (its pieces are counted as
    they come, so a body without a length, or longer than it said, is not held either)."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0

    def add(self, piece: bytes) -> bool:
        """Adds ``piece``; whether the body is still within the bound."""
        self._size += len(piece)
        if self._size > MAX_BODY:
            self._pieces.clear()
            return False
        self._pieces.append(piece)
        return True

    def of(self, response: httpx.Response) -> httpx.Response:
        """``response`` with this body read, for ``answer_of`` and ``error_of``."""
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=b"".join(self._pieces),
            request=response.request,
        )


def not_a_stream(response: httpx.Response) -> ReactStepError | None:
    """The error of a 2xx answer to a stream request that is not an event stream."""
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        return None
    return ReactStepError.unreadable(
        response.status_code, f"not an event stream ({content_type or 'no content type'})"
    )


def stream_idle_timeout_of(value: float | None) -> float:
    """The bound of ``stream_idle_timeout``: the default for ``None``, else a positive, finite
    number of seconds (anything else is refused)."""
    if value is None:
        return DEFAULT_STREAM_IDLE_TIMEOUT
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"stream_idle_timeout must be a positive number of seconds, not {value!r}")
    return float(value)


def stream_idle(bound: float, *, head: bool = False) -> ReactStepError:
    """A stream that went quiet: no whole block (event or heartbeat) within ``bound`` seconds,
    or with ``head`` no response head within ``bound`` seconds of the request. The connection is
    closed; a try again may find a livelier one."""
    what = "no response head" if head else "no whole event"
    return ReactStepError(
        status=0,
        type="transport_error",
        message=f"the event stream went quiet: {what} arrived within {bound:g} s",
        retryable=True,
    )


def stream_ended(status: int, cause: BaseException | None = None) -> ReactStepError:
    """A stream that ended, or was cut, before its terminal event."""
    if cause is None:
        return ReactStepError.unreadable(status, "the event stream ended without its step")
    why = f"the event stream was cut short ({type(cause).__name__}: {cause})"
    return ReactStepError.unreadable(status, why)
