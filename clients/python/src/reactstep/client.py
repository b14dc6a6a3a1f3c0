"""The synchronous client: one step (``step``), one step as events (``stream``), a plan
(``plan``, ``stream_plan``) and an evaluation (``evaluate``, ``stream_evaluate``), retries of the
errors the service marks retryable, and the loop (``run_loop``) through it."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import closing, suppress
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack

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
    headers as make_headers,
    not_a_stream,
    step_of,
    stream_ended,
    stream_idle,
    stream_idle_timeout_of,
    too_long,
)
from ._sse import Blocks, TooLong
from .approval import Approver
from .planning import PlanApprover
from .errors import ReactStepError
from .events import StreamEventOf, event_of, is_terminal
from .loop import run_loop
from .loop_types import LoopKwargs, LoopResult
from .retry import Backoff, RetryOptions, retry_options
from .tools import Tool
from .types import EvaluateResponse, LlmConfig, PlanResponse, StepResponse

S = TypeVar("S")


class EventStreamOf(Iterator[StreamEventOf[S]], Generic[S]):
    """The events of one stream, whose terminal ``StepEvent`` carries an ``S``: a step's
    (``EventStream``), a plan's (``stream_plan``) or an evaluation's (``stream_evaluate``). The
    stream closes after its terminal event, or on ``close()`` (``with`` closes it for you when
    you leave early), and the service then stops the step. ``abort()``, from any thread, cuts
    the connection under a read that waits."""

    def __init__(self, events: Callable[[_Opened], Generator[StreamEventOf[S], None, None]]) -> None:
        self._opened = _Opened()
        self._events = events(self._opened)

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> StreamEventOf[S]:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def abort(self) -> None:
        """Cuts the connection: the read in progress, in whatever thread, ends with an error."""
        self._opened.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class EventStream(EventStreamOf[StepResponse]):
    """The events of one streamed step (``stream``): its terminal ``StepEvent`` carries the
    ``StepResponse``."""


class _Opened:
    """The response a stream reads while it reads it, and whether the stream was aborted (before
    it opened, or while it read). Once the stream is done, an abort touches nothing: the
    connection may be back in the pool, serving another call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._response: httpx.Response | None = None
        self._aborted = False

    def open(self, response: httpx.Response) -> None:
        with self._lock:
            self._response = response
            if self._aborted:
                _cut(response)

    def done(self) -> None:
        with self._lock:
            self._response = None

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            if self._response is not None:
                _cut(self._response)


def _cut(response: httpx.Response) -> None:
    """Shuts the response's socket: a read waiting on it, in any thread, ends at once."""
    _shut(_socket_of(response.extensions.get("network_stream")))


def _socket_of(network: object) -> socket.socket | None:
    """The socket of an httpcore network stream (a response's ``network_stream``, or a new
    connection's), when it has one."""
    get_extra_info = getattr(network, "get_extra_info", None)
    connection = get_extra_info("socket") if callable(get_extra_info) else None
    return connection if isinstance(connection, socket.socket) else None


def _shut(connection: socket.socket | None) -> None:
    """Shuts ``connection``: a read or a write waiting on it, in any thread, ends at once."""
    if connection is not None:
        with suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)


class Client:
    """A client of one reactstep service.

    ``api_token`` is one of the operator's tokens (sent as ``Authorization: Bearer``);
    ``headers`` go with every call; ``timeout`` bounds the connection and each wait for data;
    ``stream_idle_timeout`` bounds, in seconds, the wait for a stream's response head (from the
    moment the request is sent) and then for each whole block of it (an event, or the heartbeat
    the service sends every 15 s), 60 by default (``None``): past it the stream is closed and
    raises a retryable ``transport_error``; ``retry`` (``True`` for the
    defaults) retries what the service marks retryable; ``transport`` replaces httpx's own (a
    proxy, a test double).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT,
        stream_idle_timeout: float | None = None,
        retry: RetryOptions | bool | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._stream_idle_timeout = stream_idle_timeout_of(stream_idle_timeout)
        self._headers = make_headers(api_token, headers)
        self._retry = retry_options(retry)
        self._http = httpx.Client(timeout=timeout, transport=transport)
        # A stream's connection is a new one, never one kept alive from an earlier call: the
        # watch on its head (`_IdleWatch`) is told of it as it is made, and can cut it. A
        # transport of the caller's is used as it is (its connections are cut where reachable).
        self._stream_http = (
            self._http
            if transport is not None
            else httpx.Client(
                timeout=timeout, limits=httpx.Limits(max_connections=100, max_keepalive_connections=0)
            )
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        self._stream_http.close()

    def step(self, request: Request) -> StepResponse:
        """One step. A non-2xx answer, or none, raises a ``ReactStepError``."""
        return step_of(self._answer(STEP_PATH, request))

    def plan(self, request: PlanRequestLike) -> PlanResponse:
        """A plan of the task (``POST /api/agent/plan``): a ``PlanMade`` whose ``plan`` is always
        there, or with ``dry_run`` a ``DryRunResponse``. With ``previous_plan`` and
        ``latest_observation``, the earlier plan adjusted to what was observed. A plan the model
        could not make valid, even after the repair round, raises a ``ReactStepError`` of type
        ``invalid_model_output`` (502). The answer's ``updated_conversation_history`` is the
        planning exchange: do not carry it into a loop's history."""
        return answer_of(self._answer(PLAN_PATH, request), PLAN_RESPONSE, "the plan")

    def stream_plan(self, request: PlanRequestLike) -> EventStreamOf[PlanResponse]:
        """``plan`` as server-sent events (``POST /api/agent/plan/stream``), read as ``stream``
        reads a step's: thought and answer deltas (the answer is the plan's JSON as the model
        writes it), ``retry`` before a repair round, then a ``StepEvent`` whose ``step`` is the
        ``PlanResponse`` ``plan`` returns, or an ``ErrorEvent`` (a plan still invalid after the
        repair round is an ``invalid_model_output`` there)."""
        return EventStreamOf(lambda opened: self._events(PLAN_STREAM_PATH, request, PLAN_RESPONSE, opened))

    def evaluate(self, request: EvaluateRequestLike) -> EvaluateResponse:
        """An evaluation of ``candidate_answer`` (``POST /api/agent/evaluate``) given the question,
        the steps taken (``conversation_history``) and the ``plan`` followed: an ``EvaluationMade``
        whose ``evaluation`` is always there, or with ``dry_run`` a ``DryRunResponse``. Its
        ``needs_retry`` is the service's rule, not the model's word: completeness under 7 is a
        retry, 8 or more is done, and never a retry once the history holds more than the plan's
        ``estimated_iterations`` + 2 assistant turns (each overruling is in ``warnings``)."""
        return answer_of(self._answer(EVALUATE_PATH, request), EVALUATE_RESPONSE, "the evaluation")

    def stream_evaluate(self, request: EvaluateRequestLike) -> EventStreamOf[EvaluateResponse]:
        """``evaluate`` as server-sent events (``POST /api/agent/evaluate/stream``), read as
        ``stream`` reads a step's: the deltas (the answer is the evaluation's JSON), then a
        ``StepEvent`` whose ``step`` is the ``EvaluateResponse`` ``evaluate`` returns, or an
        ``ErrorEvent``."""
        path = EVALUATE_STREAM_PATH
        return EventStreamOf(lambda opened: self._events(path, request, EVALUATE_RESPONSE, opened))

    def stream(self, request: Request) -> EventStream:
        """One step as server-sent events: thought and answer deltas while the model writes,
        then the step or its error. The request is sent at the first ``next``; an answer that is
        not a stream (a bad request, a rejected key, a rate limit) raises a ``ReactStepError``
        there."""
        return EventStream(lambda opened: self._events(STREAM_PATH, request, STEP_RESPONSE, opened))

    def run_loop(
        self,
        question: str,
        *,
        tools: Sequence[Tool[Any, Any] | Callable[..., Any]],
        llm_config: LlmConfig | Mapping[str, Any],
        approve: Approver | None = None,
        approve_plan: PlanApprover | None = None,
        cancel: threading.Event | None = None,
        **options: Unpack[LoopKwargs],
    ) -> LoopResult:
        """Drives a whole loop through this client: see ``reactstep.run_loop``."""
        return run_loop(
            self,
            question,
            tools=tools,
            llm_config=llm_config,
            approve=approve,
            approve_plan=approve_plan,
            cancel=cancel,
            **options,
        )

    def _events(
        self, path: str, request: AnyRequest, terminal: TypeAdapter[S], opened: _Opened
    ) -> Generator[StreamEventOf[S], None, None]:
        # The watch runs from before the request is sent: the head is bounded too.
        watch = _IdleWatch(self._stream_idle_timeout)
        try:
            response = self._send(path, request, "text/event-stream", watch)
            opened.open(response)
            with closing(response):
                try:
                    wrong = not_a_stream(response)
                    if wrong is not None:
                        raise wrong
                    yield from _read(response, terminal, watch)
                finally:
                    opened.done()
                    # Before the response is released: no cut comes after it.
                    watch.stop()
        finally:
            watch.stop()

    def _answer(self, path: str, request: AnyRequest) -> httpx.Response:
        """A plain call's 2xx response, its body read."""
        read = _read_body(self._send(path, request, "application/json"))
        if isinstance(read, ReactStepError):
            raise read
        return read

    def _send(
        self, path: str, request: AnyRequest, accept: str, watch: _IdleWatch | None = None
    ) -> httpx.Response:
        """Sends the request; a 2xx response, open, after the retries the settings allow. With
        ``watch`` (a stream's), each try's head is bounded by it."""
        body = encode(request)
        backoff = Backoff(self._retry)
        attempt = 0
        while True:
            attempt += 1
            answer = self._try(path, body, accept, watch)
            if isinstance(answer, httpx.Response):
                return answer
            delay = backoff.delay_before(attempt, answer)
            if delay is None:
                raise answer
            time.sleep(delay)

    def _try(
        self, path: str, body: bytes, accept: str, watch: _IdleWatch | None
    ) -> httpx.Response | ReactStepError:
        http = self._http if watch is None else self._stream_http
        request = http.build_request(
            "POST",
            self.base_url + path,
            content=body,
            headers={**self._headers, "accept": accept},
            # httpcore's trace hook tells the watch of the connection as soon as it is made.
            extensions={} if watch is None else {"trace": watch.trace},
        )
        if watch is not None:
            watch.begin()
        try:
            response = http.send(request, stream=True)
        except httpx.TransportError as failed:
            if watch is not None:
                late = watch.expired()
                watch.let_go()
                if late:
                    return stream_idle(watch.idle, head=True)
            return ReactStepError.transport(failed)
        if watch is not None:
            watch.reach(_socket_of(response.extensions.get("network_stream")))
            if watch.expired():
                # A transport whose connection the watch could not reach: the head came late.
                watch.let_go()
                response.close()
                return stream_idle(watch.idle, head=True)
        if response.is_success:
            return response
        if watch is not None:
            # An error answer's body is read as a plain call's.
            watch.let_go()
        read = _read_body(response)
        return read if isinstance(read, ReactStepError) else error_of(read)


def _read_body(response: httpx.Response) -> httpx.Response | ReactStepError:
    """``response`` with its body read, and closed; the error when the body is cut short or
    longer than ``MAX_BODY``."""
    status = response.status_code
    with closing(response):
        if declared_too_long(response):
            return too_long(status)
        body = Body()
        try:
            for piece in response.iter_bytes():
                if not body.add(piece):
                    return too_long(status)
        except httpx.TransportError:
            return cut_short(status)
    return body.of(response)


def _read(
    response: httpx.Response, terminal: TypeAdapter[S], watch: _IdleWatch
) -> Generator[StreamEventOf[S], None, None]:
    """The typed events of an event stream, to its terminal event (its data read as ``terminal``).
    Once ``watch.idle`` seconds pass without a whole block (the caller's time with an event
    aside), the connection is cut and a ``transport_error`` raised; a line or an event past
    ``_sse.MAX_SIZE`` is an ``unreadable_response``."""
    status = response.status_code
    idle = watch.idle
    blocks = Blocks()
    # The head came: the first block is due within the bound, as each one after it.
    watch.arm()
    try:
        for piece in response.iter_bytes():
            if watch.expired():
                # A peer that dribbles a block, where no socket could be cut (another transport).
                raise stream_idle(idle)
            for block in blocks.feed(piece):
                watch.arm()
                event = event_of(block, status, terminal) if block is not None else None
                if event is None:
                    continue
                watch.pause()
                yield event
                if is_terminal(event):
                    return
                watch.arm()
    except httpx.TransportError as cut:
        if watch.expired():
            raise stream_idle(idle) from None
        raise stream_ended(status, cut) from cut
    except TooLong as long:
        raise ReactStepError.unreadable(status, str(long)) from None
    finally:
        watch.let_go()
    if watch.expired():
        raise stream_idle(idle)
    raise stream_ended(status)


class _IdleWatch:
    """The bound on a stream's waits: for its response head from the moment the request is sent
    (``begin()``), then for each whole block (``arm()``). A thread cuts the connection once
    ``idle`` seconds pass after either with no ``arm()`` since, so that a wait on it, however
    slowly bytes come, ends. The connection is the one ``trace`` (httpcore's trace hook) saw
    made, or the one ``reach`` names. ``pause()`` while the caller holds an event; ``let_go()``
    before a response is released (no cut comes after it); ``stop()`` ends the thread."""

    def __init__(self, idle: float) -> None:
        self.idle = idle
        self._changed = threading.Condition()
        self._deadline = 0.0
        self._waiting = False
        """A wait is bounded now (not paused)."""
        self._socket: socket.socket | None = None
        self._expired = False
        self._stopped = False
        self._thread = threading.Thread(target=self._watch, name="reactstep-stream-idle", daemon=True)
        self._thread.start()

    def begin(self) -> None:
        """A request is about to be sent: its head is due within the bound, on a connection the
        watch has yet to be told of."""
        with self._changed:
            self._socket = None
            self._expired = False
            self._start()

    def arm(self) -> None:
        """A whole block came (or the caller asks for the next event): the wait starts again."""
        with self._changed:
            self._start()

    def _start(self) -> None:
        self._deadline = time.monotonic() + self.idle
        if not self._waiting:
            self._waiting = True
            self._changed.notify()

    def pause(self) -> None:
        with self._changed:
            self._waiting = False

    def let_go(self) -> None:
        """No wait is bounded, and the connection is no longer the watch's to cut."""
        with self._changed:
            self._waiting = False
            self._socket = None

    def trace(self, name: str, info: Mapping[str, Any]) -> None:
        """httpcore's ``trace`` extension: a new connection is reached as soon as it is made."""
        if name.endswith((".connect_tcp.complete", ".connect_unix_socket.complete")):
            self.reach(_socket_of(info.get("return_value")))

    def reach(self, connection: socket.socket | None) -> None:
        """``connection`` is the one to cut (at once, when the bound already passed)."""
        if connection is None:
            return
        with self._changed:
            self._socket = connection
            if self._expired:
                _shut(connection)

    def expired(self) -> bool:
        """Whether the bound passed (the connection then cut, where the watch reached it)."""
        with self._changed:
            return self._expired

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._socket = None
            self._changed.notify()
        self._thread.join()

    def _watch(self) -> None:
        # A deadline that moves later needs no waking: the thread finds it when it wakes.
        with self._changed:
            while not self._stopped:
                if not self._waiting:
                    self._changed.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    self._expired = True
                    self._waiting = False
                    _shut(self._socket)
                    continue
                self._changed.wait(left)
