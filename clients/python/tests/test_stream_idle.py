"""The bound on a quiet stream (``stream_idle_timeout``), with both clients, against a fake
service: a peer that opens a stream and dribbles one byte every 50 ms, never ending a block, is
cut at the bound with a retryable ``transport_error``; heartbeats keep a stream alive past it; the
time the caller holds an event is not the peer's; and the bound is checked when the client is
made."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx
import pytest
from httpx_sse import EventSource

from reactstep import AsyncClient, Client, ReactStepError, StepEvent, StreamEvent, ThoughtEvent
from reactstep._sse import Blocks

from .support.quiet import (
    DRIBBLE_EVERY_S,
    DRIBBLE_GIVE_UP_S,
    Dribble,
    HeldBetween,
    Heartbeats,
    QuietService,
    Script,
)
from .support.requests import offline
from .test_stream import ANSWER, THOUGHT, offline_step_bytes

Kind = Literal["sync", "async"]
KINDS: tuple[Kind, ...] = ("sync", "async")

BOUND_S = 0.3


def idle_threads() -> list[threading.Thread]:
    """The sync client's watch threads still running."""
    return [thread for thread in threading.enumerate() if thread.name == "reactstep-stream-idle"]


def streamed(
    kind: Kind, script: Script, held: Callable[[], None] | None = None, **options: Any
) -> list[StreamEvent]:
    """The events of one stream from a fake service answering with ``script``, read by the
    ``kind`` client made with ``options``; ``held`` is called with each event in hand (the
    caller's time with it). Nothing of the stream may outlive the call: no watch thread, no
    task."""
    with QuietService(script) as fake:
        if kind == "sync":
            seen: list[StreamEvent] = []
            try:
                with Client(fake.url, **options) as client, client.stream(offline(ANSWER)) as events:
                    for event in events:
                        seen.append(event)
                        if held is not None:
                            held()
                return seen
            finally:
                assert idle_threads() == []

        async def main() -> list[StreamEvent]:
            seen: list[StreamEvent] = []
            try:
                async with AsyncClient(fake.url, **options) as client:
                    async with client.stream(offline(ANSWER)) as events:
                        async for event in events:
                            seen.append(event)
                            if held is not None:
                                # In a thread, so that the event loop runs on meanwhile.
                                await asyncio.to_thread(held)
                return seen
            finally:
                assert asyncio.all_tasks() == {asyncio.current_task()}

        return asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_a_peer_that_dribbles_a_block_forever_is_cut_at_the_bound(kind: Kind) -> None:
    dribble = Dribble()
    with pytest.raises(ReactStepError) as raised:
        streamed(kind, dribble, stream_idle_timeout=BOUND_S)
    error = raised.value
    assert (error.status, error.type, error.retryable) == (0, "transport_error", True), error
    assert "no whole event arrived within 0.3 s" in error.message
    # The bytes kept coming: each restarted httpx's read timeout, none the bound.
    assert dribble.sent > 0
    assert dribble.closed.wait(20), "the client left the connection open"


def test_a_transport_with_no_socket_to_cut_still_ends_a_dribbled_stream_at_the_bound() -> None:
    """A transport of the caller's (a proxy, a wrapper) may give no socket to shut: the next
    byte past the bound ends the stream then."""

    class Dribbled(httpx.SyncByteStream):
        def __init__(self) -> None:
            self.closed = False

        def __iter__(self) -> Iterator[bytes]:
            yield b'event: thought\ndata: {"delta": "'
            for _ in range(int(DRIBBLE_GIVE_UP_S / DRIBBLE_EVERY_S)):
                time.sleep(DRIBBLE_EVERY_S)
                yield b"x"

        def close(self) -> None:
            self.closed = True

    body = Dribbled()
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)
    )
    with (
        Client("http://reactstep.invalid", transport=transport, stream_idle_timeout=BOUND_S) as client,
        pytest.raises(ReactStepError) as raised,
    ):
        list(client.stream(offline(ANSWER)))
    assert (raised.value.type, raised.value.retryable) == ("transport_error", True)
    assert body.closed
    assert idle_threads() == []


@pytest.mark.parametrize("kind", KINDS)
def test_heartbeats_keep_a_stream_alive_past_the_bound(kind: Kind) -> None:
    # Ten heartbeats 100 ms apart: a second of no event, over three times the bound.
    script = Heartbeats(count=10, every=0.1, then=THOUGHT + offline_step_bytes())
    events = streamed(kind, script, stream_idle_timeout=BOUND_S)
    assert [event.type for event in events] == ["thought", "step"]
    assert isinstance(events[0], ThoughtEvent) and isinstance(events[-1], StepEvent)


@pytest.mark.parametrize("kind", KINDS)
def test_the_time_the_caller_holds_an_event_is_not_the_peers(kind: Kind) -> None:
    script = HeldBetween(first=THOUGHT, then=offline_step_bytes())

    def hold() -> None:
        # The caller holds the thought for twice the bound; the service then answers at once.
        time.sleep(2 * BOUND_S)
        script.release.set()

    events = streamed(kind, script, hold, stream_idle_timeout=BOUND_S)
    assert [event.type for event in events] == ["thought", "step"]


@pytest.mark.parametrize("bound", [0, -1, 0.0, -0.5, math.nan, math.inf, True])
def test_a_bound_that_is_not_a_positive_number_of_seconds_is_refused(bound: float) -> None:
    with pytest.raises(ValueError, match="stream_idle_timeout must be a positive number of seconds"):
        Client("http://reactstep.invalid", stream_idle_timeout=bound)
    with pytest.raises(ValueError, match="stream_idle_timeout must be a positive number of seconds"):
        AsyncClient("http://reactstep.invalid", stream_idle_timeout=bound)


def test_no_bound_given_is_sixty_seconds() -> None:
    for options in ({}, {"stream_idle_timeout": None}):
        with Client("http://reactstep.invalid", **options) as client:
            assert client._stream_idle_timeout == 60.0

        async def made() -> float:
            async with AsyncClient("http://reactstep.invalid", **options) as client:
                return client._stream_idle_timeout

        assert asyncio.run(made()) == 60.0


def test_blocks_are_read_as_httpx_sse_reads_events_whatever_the_line_ends_and_the_pieces() -> None:
    """The client's own reading of the stream (it needs each block's end, heartbeats included)
    gives the events ``httpx-sse`` gives, for every line end and however the text is cut."""
    text = (
        ": heartbeat\n\n"
        'event: thought\ndata: {"delta": "a"}\n\n'
        "\n\n"
        ": one\n: two\n\n"
        'event: answer\ndata: {"delta": "b"}\ndata: {"more": 1}\nid: 7\n\n'
        "retry: 10\n\n"
        'data: {"delta": "c"}\n\n'
    )
    for end in ["\n", "\r\n", "\r"]:
        wire = text.replace("\n", end)
        response = httpx.Response(200, headers={"content-type": "text/event-stream"}, text=wire)
        expected = [(sse.event, sse.data, sse.id, sse.retry) for sse in EventSource(response).iter_sse()]
        data = wire.encode()
        for size in [1, 2, 3, len(data)]:
            blocks = Blocks()
            read = [
                block
                for start in range(0, len(data), size)
                for block in blocks.feed(data[start : start + size])
            ]
            # Six blocks: the stray blank lines end none.
            assert len(read) == 6, (repr(end), size, read)
            events = [(sse.event, sse.data, sse.id, sse.retry) for sse in read if sse is not None]
            assert events == expected, (repr(end), size)
            assert [sse is None for sse in read] == [True, False, True, False, False, False]
        # An empty piece between a ``\r`` and its ``\n`` changes nothing.
        pieces = [piece.encode() for part in wire.split("\r") for piece in (part, "\r", "")]
        blocks = Blocks()
        read = [block for piece in pieces for block in blocks.feed(piece)]
        assert len(read) == 6, (repr(end), read)
        assert [(sse.event, sse.data) for sse in read if sse is not None] == [e[:2] for e in expected]
