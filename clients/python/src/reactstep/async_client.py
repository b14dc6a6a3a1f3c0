"""The asyncio client: ``Client``'s calls (``step``, ``stream``, ``plan``, ``stream_plan``,
``evaluate``, ``stream_evaluate``), awaited, with the streams as async iterators."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack, cast

import httpx
from pydantic import TypeAdapter

from ._http import (
    DEFAULT_TIMEOUT,
    EVALUATE_PATH,
    EVALUATE_RESPONSE,
    EVALUATE_STREAM_PATH,
    PLAN_PATH,
    PLAN_RESPONSE,
    PLAN_STREAM_PATH,
    STEP_PATH,
    STEP_RESPONSE,
    STREAM_PATH,
    AnyRequest,
    Body,
    EvaluateRequestLike,
    PlanRequestLike,
    Request,
    answer_of,
    cut_short,
    declared_too_long,
    encode,
    error_of,
    not_a_stream,
    step_of,
    stream_ended,
    stream_idle,
    stream_idle_timeout_of,
    too_long,
)
from ._http import headers as make_headers
from ._sse import Blocks, TooLong
from .aloop import arun_loop
from .approval import AsyncApprover
from .planning import AsyncPlanApprover
from .errors import ReactStepError
from .events import StreamEventOf, event_of, is_terminal
from .loop_types import LoopKwargs, LoopResult
from .retry import Backoff, RetryOptions, retry_options
from .tools import Tool
from .types import EvaluateResponse, LlmConfig, PlanResponse, StepResponse

S = TypeVar("S")


class AsyncEventStreamOf(AsyncIterator[StreamEventOf[S]], Generic[S]):
    """The events of one stream, whose terminal ``StepEvent`` carries an ``S``: a step's
    (``AsyncEventStream``), a plan's (``stream_plan``) or an evaluation's (``stream_evaluate``).
    The stream closes after its terminal event, or on ``aclose()`` (``async with`` closes it for
    you when you leave early), and the service then stops the step."""

    def __init__(self, events: AsyncGenerator[StreamEventOf[S], None]) -> None:
        self._events = events

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEventOf[S]:
        return await anext(self._events)

    async def aclose(self) -> None:
        await self._events.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()


class AsyncEventStream(AsyncEventStreamOf[StepResponse]):
    """The events of one streamed step (``stream``): its terminal ``StepEvent`` carries the
    ``StepResponse``."""


class AsyncClient:
    """A client of one reactstep service, for asyncio (see ``Client`` for the settings)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT,
        stream_idle_timeout: float | None = None,
        retry: RetryOptions | bool | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._stream_idle_timeout = stream_idle_timeout_of(stream_idle_timeout)
        self._headers = make_headers(api_token, headers)
        self._retry = retry_options(retry)
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def step(self, request: Request) -> StepResponse:
        """One step. A non-2xx answer, or none, raises a ``ReactStepError``."""
        return step_of(await self._answer(STEP_PATH, request))

    async def plan(self, request: PlanRequestLike) -> PlanResponse:
        """A plan of the task (see ``Client.plan``)."""
        return answer_of(await self._answer(PLAN_PATH, request), PLAN_RESPONSE, "the plan")

    def stream_plan(self, request: PlanRequestLike) -> AsyncEventStreamOf[PlanResponse]:
        """``plan`` as server-sent events (see ``Client.stream_plan``)."""
        return AsyncEventStreamOf(self._events(PLAN_STREAM_PATH, request, PLAN_RESPONSE))

    async def evaluate(self, request: EvaluateRequestLike) -> EvaluateResponse:
        """An evaluation of ``candidate_answer`` (see ``Client.evaluate``)."""
        return answer_of(await self._answer(EVALUATE_PATH, request), EVALUATE_RESPONSE, "the evaluation")

    def stream_evaluate(self, request: EvaluateRequestLike) -> AsyncEventStreamOf[EvaluateResponse]:
        """``evaluate`` as server-sent events (see ``Client.stream_evaluate``)."""
        return AsyncEventStreamOf(self._events(EVALUATE_STREAM_PATH, request, EVALUATE_RESPONSE))

    def stream(self, request: Request) -> AsyncEventStream:
        """One step as server-sent events (see ``Client.stream``). Cancelling the task that reads
        it closes the stream, and the service stops the step."""
        return AsyncEventStream(self._events(STREAM_PATH, request, STEP_RESPONSE))

    async def run_loop(
        self,
        question: str,
        *,
        tools: Sequence[Tool[Any, Any] | Callable[..., Any]],
        llm_config: LlmConfig | Mapping[str, Any],
        approve: AsyncApprover | None = None,
        approve_plan: AsyncPlanApprover | None = None,
        cancel: asyncio.Event | None = None,
        **options: Unpack[LoopKwargs],
    ) -> LoopResult:
        """Drives a whole loop through this client: see ``reactstep.arun_loop``."""
        return await arun_loop(
            self,
            question,
            tools=tools,
            llm_config=llm_config,
            approve=approve,
            approve_plan=approve_plan,
            cancel=cancel,
            **options,
        )

    async def _events(
        self, path: str, request: AnyRequest, terminal: TypeAdapter[S]
    ) -> AsyncGenerator[StreamEventOf[S], None]:
        response = await self._send(path, request, "text/event-stream", self._stream_idle_timeout)
        async with aclosing(response):
            wrong = not_a_stream(response)
            if wrong is not None:
                raise wrong
            async with aclosing(_read(response, terminal, self._stream_idle_timeout)) as events:
                async for event in events:
                    yield event

    async def _answer(self, path: str, request: AnyRequest) -> httpx.Response:
        """A plain call's 2xx response, its body read."""
        read = await _read_body(await self._send(path, request, "application/json"))
        if isinstance(read, ReactStepError):
            raise read
        return read

    async def _send(
        self, path: str, request: AnyRequest, accept: str, head: float | None = None
    ) -> httpx.Response:
        """Sends the request; a 2xx response, open, after the retries the settings allow. With
        ``head`` (a stream's bound), each try's response head is due within that many seconds."""
        body = encode(request)
        backoff = Backoff(self._retry)
        attempt = 0
        while True:
            attempt += 1
            answer = await self._try(path, body, accept, head)
            if isinstance(answer, httpx.Response):
                return answer
            delay = backoff.delay_before(attempt, answer)
            if delay is None:
                raise answer
            await asyncio.sleep(delay)

    async def _try(
        self, path: str, body: bytes, accept: str, head: float | None
    ) -> httpx.Response | ReactStepError:
        request = self._http.build_request(
            "POST", self.base_url + path, content=body, headers={**self._headers, "accept": accept}
        )
        try:
            # httpx's read timeout starts again with each byte of the head: this bound does not.
            # Cancelled, the send closes its connection.
            async with asyncio.timeout(head):
                response = await self._http.send(request, stream=True)
        except httpx.TransportError as failed:
            return ReactStepError.transport(failed)
        except TimeoutError:
            if head is None:
                raise
            return stream_idle(head, head=True)
        if response.is_success:
            return response
        read = await _read_body(response)
        return read if isinstance(read, ReactStepError) else error_of(read)


async def _read_body(response: httpx.Response) -> httpx.Response | ReactStepError:
    """``response`` with its body read, and closed; the error when the body is cut short or
    longer than ``MAX_BODY``."""
    status = response.status_code
    async with aclosing(response):
        if declared_too_long(response):
            return too_long(status)
        body = Body()
        try:
            async for piece in response.aiter_bytes():
                if not body.add(piece):
                    return too_long(status)
        except httpx.TransportError:
            return cut_short(status)
    return body.of(response)


async def _read(
    response: httpx.Response, terminal: TypeAdapter[S], idle: float
) -> AsyncGenerator[StreamEventOf[S], None]:
    """The typed events of an event stream, to its terminal event (its data read as ``terminal``).
    Once ``idle`` seconds pass without a whole block (the caller's time with an event aside), the
    read is cancelled and a ``transport_error`` raised (the caller then closes the response); a
    line or an event past ``_sse.MAX_SIZE`` is an ``unreadable_response``."""
    status = response.status_code
    blocks = Blocks()
    pieces = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
    clock = asyncio.get_running_loop()
    deadline = clock.time() + idle
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    piece = await anext(pieces)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise stream_idle(idle) from None
            for block in blocks.feed(piece):
                deadline = clock.time() + idle
                event = event_of(block, status, terminal) if block is not None else None
                if event is None:
                    continue
                yield event
                if is_terminal(event):
                    return
                deadline = clock.time() + idle
    except httpx.TransportError as cut:
        raise stream_ended(status, cut) from cut
    except TooLong as long:
        raise ReactStepError.unreadable(status, str(long)) from None
    finally:
        await pieces.aclose()
    raise stream_ended(status)
