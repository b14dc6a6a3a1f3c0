"""What else bounds a stream, with both clients: its response head is due within
``stream_idle_timeout`` of the request (a head dribbled a byte every 50 ms, or never sent, is
cut there with a retryable ``transport_error``, on a new connection as on one an earlier call
left open); a line, or an event's data, past 16 MiB ends it as an ``unreadable_response``; and a
long line in many small pieces is read whole."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from reactstep import AsyncClient, Client, ReactStepError, RetryInfo, RetryOptions, ThoughtEvent
from reactstep._sse import MAX_SIZE, Blocks, TooLong

from .support.quiet import closed_within
from .support.raw import DribbledHead, NoAnswer, RawService, refusal
from .support.requests import offline
from .support.upstream import Exchange
from .test_stream import ANSWER, offline_step_bytes
from .test_stream_idle import BOUND_S, KINDS, Kind, idle_threads, streamed

MIB = 1024 * 1024


def failed_stream(kind: Kind, url: str, *, refused_first: bool = False, **options: Any) -> ReactStepError:
    """The error a stream from the fake at ``url`` raised, read by the ``kind`` client made with
    ``options``; with ``refused_first`` a plain step is refused first, its connection left open
    for the next call. Nothing of the stream may outlive the call: no watch thread, no task."""
    if kind == "sync":
        try:
            with Client(url, **options) as client:
                if refused_first:
                    with pytest.raises(ReactStepError, match="refused by the fake"):
                        client.step(offline(ANSWER))
                with pytest.raises(ReactStepError) as raised:
                    list(client.stream(offline(ANSWER)))
            return raised.value
        finally:
            assert idle_threads() == []

    async def main() -> ReactStepError:
        try:
            async with AsyncClient(url, **options) as client:
                if refused_first:
                    with pytest.raises(ReactStepError, match="refused by the fake"):
                        await client.step(offline(ANSWER))
                with pytest.raises(ReactStepError) as raised:
                    async with client.stream(offline(ANSWER)) as events:
                        async for _ in events:
                            pass
            return raised.value
        finally:
            assert asyncio.all_tasks() == {asyncio.current_task()}

    return asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_a_response_head_dribbled_a_byte_at_a_time_is_cut_at_the_bound(kind: Kind) -> None:
    head = DribbledHead()
    with RawService([head]) as fake:
        error = failed_stream(kind, fake.url, stream_idle_timeout=BOUND_S)
    assert (error.status, error.type, error.retryable) == (0, "transport_error", True), error
    assert "no response head arrived within 0.3 s" in error.message
    # The bytes kept coming: each restarted httpx's read timeout, none the bound.
    assert head.sent > 0
    assert head.closed.wait(20), "the client left the connection open"


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_never_answered_is_cut_at_the_bound(kind: Kind) -> None:
    silent = NoAnswer()
    with RawService([silent]) as fake:
        error = failed_stream(kind, fake.url, stream_idle_timeout=BOUND_S)
    assert (error.status, error.type, error.retryable) == (0, "transport_error", True), error
    assert "no response head arrived within 0.3 s" in error.message
    assert silent.closed.wait(20), "the client left the connection open"


@pytest.mark.parametrize("kind", KINDS)
def test_the_head_is_bounded_after_an_earlier_call_left_a_connection_open(kind: Kind) -> None:
    """The sync client's watch cuts the connection it saw made: a stream must not go out on one
    kept alive from an earlier call, which it could not reach."""
    head = DribbledHead()
    with RawService([refusal, head]) as fake:
        error = failed_stream(kind, fake.url, refused_first=True, stream_idle_timeout=BOUND_S)
    assert (error.status, error.type, error.retryable) == (0, "transport_error", True), error
    assert "no response head arrived within 0.3 s" in error.message
    assert head.closed.wait(20), "the client left the connection open"


@pytest.mark.parametrize("kind", KINDS)
def test_with_retries_each_try_has_its_head_bounded(kind: Kind) -> None:
    heads = [DribbledHead(), DribbledHead()]
    retried: list[RetryInfo] = []
    retry = RetryOptions(attempts=2, base_delay=0, on_retry=retried.append)
    with RawService(heads) as fake:
        error = failed_stream(kind, fake.url, stream_idle_timeout=BOUND_S, retry=retry)
    assert (error.type, error.retryable) == ("transport_error", True), error
    assert "no response head arrived within 0.3 s" in error.message
    assert [info.error.message for info in retried] == [error.message]
    assert all(head.closed.wait(20) for head in heads), "the client left a connection open"


class LongLine:
    """A stream whose thought's data line runs to ``size`` bytes, sent in 64 KiB pieces and never
    ended; ``closed`` is set once the client closes the connection."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.closed = threading.Event()

    def __call__(self, exchange: Exchange) -> None:
        exchange.start_stream()
        start = b'event: thought\ndata: {"delta": "'
        piece = b"a" * (64 * 1024)
        try:
            exchange.send(start)
            left = self.size - len(start)
            while left > 0:
                exchange.send(piece[:left])
                left -= len(piece)
        except OSError:
            self.closed.set()
            return
        # The rest fitted in the sockets' buffers: the client is to close the connection anyway.
        if closed_within(exchange, 20):
            self.closed.set()


@pytest.mark.parametrize("kind", KINDS)
def test_a_line_past_16_mib_ends_the_stream_as_an_unreadable_response(kind: Kind) -> None:
    script = LongLine(17 * MIB)
    with pytest.raises(ReactStepError) as raised:
        streamed(kind, script)
    error = raised.value
    assert (error.status, error.type, error.retryable) == (200, "unreadable_response", False), error
    assert "a line of the event stream is longer than 16 MiB" in error.message
    assert script.closed.wait(20), "the client left the connection open"


def test_a_line_of_16_mib_is_read_and_one_byte_more_is_not() -> None:
    start = b"data: "
    whole = Blocks()
    for piece in [start, b"a" * (MAX_SIZE - len(start)), b"\n\n"]:
        events = whole.feed(piece)
    assert [len(event.data) for event in events if event is not None] == [MAX_SIZE - len(start)]
    with pytest.raises(TooLong, match="a line of the event stream is longer than 16 MiB"):
        Blocks().feed(start + b"a" * (MAX_SIZE - len(start) + 1))


def test_an_events_data_past_16_mib_in_many_lines_is_too_long() -> None:
    blocks = Blocks()
    line = b"data: " + b"a" * (MIB - 1) + b"\n"
    with pytest.raises(TooLong, match="an event's data is longer than 16 MiB"):
        for _ in range(17):
            blocks.feed(line)
    # Sixteen such lines are 16 MiB of data less one byte: read.
    blocks = Blocks()
    events = [event for _ in range(16) for event in blocks.feed(line)] + blocks.feed(b"\n")
    assert [len(event.data) for event in events if event is not None] == [16 * MIB - 1]


def test_a_long_line_in_many_small_pieces_is_read_whole() -> None:
    """2 MiB of a thought in 1 KiB pieces, its characters of three bytes cut across pieces: the
    line is joined once, when it ends (kept as one growing string, it was copied at every piece)."""
    delta = "€" * (2 * MIB // 3)
    wire = f'event: thought\ndata: {{"delta": "{delta}"}}\n\n'.encode()
    blocks = Blocks()
    events = [
        event for start in range(0, len(wire), 1024) for event in blocks.feed(wire[start : start + 1024])
    ]
    assert len(events) == 1 and events[0] is not None
    assert (events[0].event, events[0].data) == ("thought", f'{{"delta": "{delta}"}}')


@pytest.mark.parametrize("kind", KINDS)
def test_a_long_thought_sent_in_many_small_pieces_comes_whole(kind: Kind) -> None:
    delta = "€" * (2 * MIB // 3)
    wire = f'event: thought\ndata: {{"delta": "{delta}"}}\n\n'.encode()

    def script(exchange: Exchange) -> None:
        exchange.start_stream()
        for start in range(0, len(wire), 1024):
            exchange.send(wire[start : start + 1024])
        exchange.send(offline_step_bytes())
        exchange.end_stream()

    events = streamed(kind, script)
    assert [event.type for event in events] == ["thought", "step"]
    assert isinstance(events[0], ThoughtEvent) and events[0].delta == delta


def test_a_byte_order_mark_that_begins_the_stream_is_dropped() -> None:
    blocks = Blocks()
    pieces = [b"\xef", b"\xbb", b"\xbfevent: thought\ndata: 1\n\n\xef\xbb\xbfevent: answer\ndata: 2\n\n"]
    read = [event for piece in pieces for event in blocks.feed(piece)]
    # Only the stream's first: one later is part of its line (a field of no name this client knows).
    assert [(event.event, event.data) for event in read if event is not None] == [
        ("thought", "1"),
        ("message", "2"),
    ]
