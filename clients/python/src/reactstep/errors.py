"""The one error the client raises for an answer of the service that is not a step: a non-2xx
response, an ``error`` event of a stream, an answer that could not be read, or no answer at all
(the connection failed)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Final, Literal, TypeAlias

import httpx
from pydantic import ValidationError

from .types import ConversationTurn, ErrorType, FieldError, LoopGuardReport, StepResponse, Usage

STATUS_OF: Final[dict[str, int]] = {
    "invalid_request": 400,
    "llm_model_not_found": 400,
    "llm_request_rejected": 400,
    "client_disconnected": 400,
    "llm_auth": 401,
    "unauthorized": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "payload_too_large": 413,
    "context_overflow": 422,
    "loop_detected": 422,
    "rate_limited": 429,
    "llm_rate_limited": 429,
    "headers_too_large": 431,
    "internal_error": 500,
    "llm_unavailable": 502,
    "llm_bad_response": 502,
    "invalid_model_output": 502,
    "rate_limiter_unavailable": 503,
    "at_capacity": 503,
    "overloaded": 503,
    "shutting_down": 503,
    "llm_timeout": 504,
}
"""The HTTP status of each error type, as openapi.yaml's table gives it. A stream reports its
error in an event of a 200 response; the error then carries the status the plain endpoint would
have answered. A test holds its keys equal to the spec's error types."""

ReactStepErrorType: TypeAlias = ErrorType | Literal["unreadable_response", "transport_error"]
"""The service's error types; ``unreadable_response`` for an answer that is not the service's (a
proxy's HTML page, a body cut short, a stream that ended without its terminal event, a stream
with a line or an event's data past 16 MiB); ``transport_error`` when no answer came (the
connection failed or timed out, or a stream went ``stream_idle_timeout`` without its response
head, or without a whole event or heartbeat, and was closed)."""


class ReactStepError(Exception):
    """A failed step, with everything the service said about it."""

    status: int
    """The HTTP status (for an error event of a stream: the status its type has; 0 when no
    answer came)."""
    type: str
    """One of ``ReactStepErrorType``, or a type a newer service added."""
    message: str
    retryable: bool
    """Whether sending the same request again can succeed."""
    retry_after: int | None
    """Seconds to wait before a retry (``Retry-After``, or ``error.retry_after_seconds``)."""
    response: StepResponse | None
    """The whole error response, when the service sent one that matches the contract."""

    def __init__(
        self,
        *,
        status: int,
        type: str,
        message: str,
        retryable: bool,
        retry_after: int | None = None,
        response: StepResponse | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        self.response = response

    @property
    def fields(self) -> list[FieldError]:
        """With ``invalid_request``: each failing field and why."""
        error = self.response.error if self.response else None
        return list(error.fields or []) if error else []

    @property
    def raw_output(self) -> str | None:
        """With ``invalid_model_output``: what the model wrote."""
        error = self.response.error if self.response else None
        return error.raw_output if error else None

    @property
    def loop_guard(self) -> LoopGuardReport | None:
        """With ``loop_detected``: the loop the service's guard stopped."""
        return self.response.loop_guard if self.response else None

    @property
    def updated_conversation_history(self) -> list[ConversationTurn]:
        """The conversation as sent, echoed back so that nothing is lost."""
        return list(self.response.updated_conversation_history) if self.response else []

    @property
    def iterations_remaining(self) -> int | None:
        """Steps the loop may still take (``max_iterations_left`` unchanged), when known."""
        return self.response.iterations_remaining if self.response else None

    @property
    def usage(self) -> Usage | None:
        """What the step's billed model calls spent before the failure."""
        return self.response.usage if self.response else None

    @property
    def request_id(self) -> str | None:
        return self.response.request_id if self.response else None

    def __repr__(self) -> str:
        return (
            f"ReactStepError(status={self.status}, type={self.type!r}, "
            f"retryable={self.retryable}, message={self.message!r})"
        )

    @classmethod
    def from_response(
        cls, body: object, status: int | None, retry_after_header: str | None = None
    ) -> ReactStepError:
        """The error of an error response (a non-2xx body, or an ``error`` event's data)."""
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or (essentials := _essentials(error)) is None:
            return cls.unreadable(status or 0, "an error response without its error object")
        kind, message, retryable = essentials
        header = parse_retry_after(retry_after_header)
        return cls(
            status=status if status is not None else STATUS_OF.get(kind, 500),
            type=kind,
            message=message,
            retryable=retryable,
            retry_after=header if header is not None else _seconds(error.get("retry_after_seconds")),
            response=_validated(body),
        )

    @classmethod
    def unreadable(cls, status: int, why: str) -> ReactStepError:
        """An answer that is not the service's: retryable when the status says the server failed."""
        return cls(
            status=status,
            type="unreadable_response",
            message=f"the service's answer could not be read: {why}",
            retryable=status >= 500,
        )

    @classmethod
    def transport(cls, error: httpx.TransportError) -> ReactStepError:
        """No answer: the connection failed, or the wait for it timed out."""
        retryable = isinstance(error, (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError))
        made = cls(
            status=0,
            type="transport_error",
            message=f"the service did not answer: {type(error).__name__}: {error}",
            retryable=retryable,
        )
        made.__cause__ = error
        return made


def parse_retry_after(value: str | None) -> int | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date."""
    text = (value or "").strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        # Past a day's worth of digits no wait is meant (and `int` refuses 4,300 digits).
        return int(text) if len(text) <= 12 else None
    try:
        at = parsedate_to_datetime(text)
    except (TypeError, ValueError, OverflowError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return max(0, math.ceil((at - datetime.now(timezone.utc)).total_seconds()))


def _essentials(error: dict[str, Any]) -> tuple[str, str, bool] | None:
    """The error object's type, message and retryable, when it has all three."""
    kind, message, retryable = error.get("type"), error.get("message"), error.get("retryable")
    if isinstance(kind, str) and isinstance(message, str) and isinstance(retryable, bool):
        return kind, message, retryable
    return None


def _seconds(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _validated(body: object) -> StepResponse | None:
    try:
        return StepResponse.model_validate(body)
    except ValidationError:
        return None
