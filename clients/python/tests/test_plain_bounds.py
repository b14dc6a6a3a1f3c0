"""A plain answer's body is bounded as a stream's events are: past 16 MiB (said by its
``content-length``, or counted as it comes without one) a step, plan or evaluation, or the error
answer of any call, is an ``unreadable_response``, and the client closes the connection without
reading the rest: a broken service or a proxy cannot make it hold gigabytes."""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field

import pytest

from reactstep import AsyncClient, Client, ReactStepError
from reactstep._http import MAX_BODY

from .support.raw import RawService
from .support.requests import offline
from .test_stream_idle import KINDS, Kind

PIECE = b" " * (256 * 1024)


@dataclass
class Endless:
    """A JSON answer of ``status`` whose body is spaces, with no length (chunked), sent until the
    client closes the connection or 64 MiB went; or, with ``declared``, a ``content-length`` of
    that and nothing more. ``closed`` is set once the client closed it, ``sent`` counts bytes."""

    status: int = 200
    declared: int | None = None
    closed: threading.Event = field(default_factory=threading.Event)
    sent: int = 0

    def __call__(self, connection: socket.socket) -> bool:
        reason = b"OK" if self.status == 200 else b"Error"
        head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n" % (self.status, reason)
        try:
            if self.declared is not None:
                connection.sendall(head + b"content-length: %d\r\n\r\n" % self.declared)
                connection.settimeout(20)
                if connection.recv(1) == b"":
                    self.closed.set()
                return False
            connection.sendall(head + b"transfer-encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (len(PIECE), PIECE)
            while self.sent < 4 * MAX_BODY:
                connection.sendall(chunk)
                self.sent += len(PIECE)
        except OSError:
            self.closed.set()
        return False


def failure(kind: Kind, url: str, call: str) -> ReactStepError:
    """The error the ``kind`` client's ``call`` (``step``, ``plan``, ``evaluate``) raised."""
    if kind == "sync":
        with Client(url) as client, pytest.raises(ReactStepError) as raised:
            getattr(client, call)(offline("Thought: t\nFinal Answer: a"))
        return raised.value

    async def main() -> ReactStepError:
        async with AsyncClient(url) as client:
            with pytest.raises(ReactStepError) as raised:
                await getattr(client, call)(offline("Thought: t\nFinal Answer: a"))
            return raised.value

    return asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [200, 500])
@pytest.mark.parametrize("call", ["step", "plan", "evaluate"])
def test_a_body_past_16_mib_without_a_length_is_refused_as_it_comes(
    kind: Kind, status: int, call: str
) -> None:
    endless = Endless(status)
    with RawService([endless]) as fake:
        error = failure(kind, fake.url, call)
    assert (error.status, error.type) == (status, "unreadable_response"), error
    assert "longer than 16 MiB" in error.message
    assert endless.closed.wait(20), "the client read on"
    assert endless.sent < 2 * MAX_BODY, endless.sent


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_that_says_it_is_past_16_mib_is_not_read(kind: Kind) -> None:
    said = Endless(200, declared=MAX_BODY + 1)
    with RawService([said]) as fake:
        error = failure(kind, fake.url, "step")
    assert (error.status, error.type) == (200, "unreadable_response"), error
    assert "longer than 16 MiB" in error.message
    assert said.closed.wait(20), "the client waited for the body"


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_of_16_mib_is_read(kind: Kind) -> None:
    # Just within the bound: spaces after an error object are JSON still.
    error = b'{"error": {"type": "invalid_request", "message": "m", "retryable": false}}'
    body = error + b" " * (MAX_BODY - len(error))

    def whole(connection: socket.socket) -> bool:
        head = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
        connection.sendall(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        return False

    with RawService([whole]) as fake:
        raised = failure(kind, fake.url, "step")
    assert (raised.status, raised.type, raised.message) == (400, "invalid_request", "m"), raised
