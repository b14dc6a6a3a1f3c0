"""A fake reactstep on loopback whose streams go quiet in the ways a peer can: one that opens the
stream and then dribbles a block a byte at a time, never ending it; one that sends only
heartbeats for a while before its events; one that waits for the test before its last event.
Each tells when the client closed its connection."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from types import TracebackType

from .upstream import Exchange, UpstreamRequest, _Handler

Script = Callable[[Exchange], None]

DRIBBLE_EVERY_S = 0.05
"""How often the dribbling peer sends its next byte."""

DRIBBLE_GIVE_UP_S = 30.0
"""Past this the dribbling peer drops the connection: a client that does not bound its wait then
fails its test (a cut stream is another error) rather than hangs it."""


def closed_within(exchange: Exchange, seconds: float) -> bool:
    """Waits up to ``seconds`` for the client to close the connection; whether it did."""
    connection = exchange.handler.connection
    readable, _, _ = select.select([connection], [], [], seconds)
    if not readable:
        return False
    try:
        peeked: bytes = connection.recv(1, socket.MSG_PEEK)
    except OSError:
        return True
    return peeked == b""


@dataclass
class Dribble:
    """The stream's head and the start of a block, then one byte every 50 ms, the block never
    ended; ``closed`` is set once the client closes the connection."""

    closed: threading.Event = field(default_factory=threading.Event)
    sent: int = 0
    """Bytes dribbled so far."""

    def __call__(self, exchange: Exchange) -> None:
        exchange.start_stream()
        exchange.send(b'event: thought\ndata: {"delta": "')
        for _ in range(int(DRIBBLE_GIVE_UP_S / DRIBBLE_EVERY_S)):
            if closed_within(exchange, DRIBBLE_EVERY_S):
                self.closed.set()
                return
            try:
                exchange.send(b"x")
            except OSError:
                self.closed.set()
                return
            self.sent += 1
        exchange.drop()


@dataclass
class Heartbeats:
    """``count`` heartbeat comments, one every ``every`` seconds, then ``then`` and the end."""

    count: int
    every: float
    then: bytes

    def __call__(self, exchange: Exchange) -> None:
        exchange.start_stream()
        for _ in range(self.count):
            if closed_within(exchange, self.every):
                return
            exchange.send(b": heartbeat\n\n")
        exchange.send(self.then)
        exchange.end_stream()


@dataclass
class HeldBetween:
    """``first`` at once, then nothing until ``release`` is set, then ``then`` and the end."""

    first: bytes
    then: bytes
    release: threading.Event = field(default_factory=threading.Event)

    def __call__(self, exchange: Exchange) -> None:
        exchange.start_stream()
        exchange.send(self.first)
        if exchange.wait(self.release):
            exchange.send(self.then)
            exchange.end_stream()


class _StreamHandler(_Handler):
    script: Script

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.script(Exchange(self, UpstreamRequest(body={}, headers=headers)))

    do_GET = do_POST


class QuietService:
    """The fake service, answering every request with ``script``; ``with`` stops it."""

    def __init__(self, script: Script) -> None:
        handler = type("Handler", (_StreamHandler,), {"script": staticmethod(script)})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> QuietService:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
