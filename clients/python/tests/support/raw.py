"""A fake reactstep on a raw socket, for the answers ``http.server`` cannot give: a response head
sent a byte at a time and never ended, or no answer at all. Each request is answered by the
next of a list of answers, whatever connection it comes on; each answer tells when the client
closed its connection."""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from .quiet import DRIBBLE_EVERY_S, DRIBBLE_GIVE_UP_S

Answer = Callable[[socket.socket], bool]
"""Answers one request on the connection; whether the connection is kept for another."""

STREAM_HEAD_START = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-dribble: "
"""The start of a stream's head; the header it ends in is dribbled, never ended."""


def closed_within(connection: socket.socket, seconds: float) -> bool:
    """Waits up to ``seconds`` for the client to close ``connection``; whether it did."""
    readable, _, _ = select.select([connection], [], [], seconds)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@dataclass
class DribbledHead:
    """The start of a stream's response head, then one byte every 50 ms, the head never ended;
    ``closed`` is set once the client closes the connection."""

    closed: threading.Event = field(default_factory=threading.Event)
    sent: int = 0
    """Bytes dribbled so far."""

    def __call__(self, connection: socket.socket) -> bool:
        connection.sendall(STREAM_HEAD_START)
        for _ in range(int(DRIBBLE_GIVE_UP_S / DRIBBLE_EVERY_S)):
            if closed_within(connection, DRIBBLE_EVERY_S):
                self.closed.set()
                return False
            try:
                connection.sendall(b"a")
            except OSError:
                self.closed.set()
                return False
            self.sent += 1
        return False


@dataclass
class NoAnswer:
    """Not a byte: the request is read and left unanswered; ``closed`` is set once the client
    closes the connection."""

    closed: threading.Event = field(default_factory=threading.Event)

    def __call__(self, connection: socket.socket) -> bool:
        if closed_within(connection, DRIBBLE_GIVE_UP_S):
            self.closed.set()
        return False


def refusal(connection: socket.socket) -> bool:
    """A whole 400 answer, the connection kept alive for the next request."""
    body = json.dumps(
        {"error": {"type": "invalid_request", "message": "refused by the fake", "retryable": False}}
    ).encode()
    head = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    connection.sendall(head % len(body) + body)
    return True


class RawService:
    """The fake service: request ``n`` (counted over all connections) gets ``answers[n]``; a
    request past them has its connection closed. ``with`` stops it."""

    def __init__(self, answers: Sequence[Answer]) -> None:
        self._answers = list(answers)
        self._taken = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def __enter__(self) -> RawService:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stopping.set()
        for thread in list(self._threads):
            thread.join(DRIBBLE_GIVE_UP_S + 5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            readable, _, _ = select.select([self._listener], [], [], DRIBBLE_EVERY_S)
            if readable:
                connection, _ = self._listener.accept()
                thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            while self._read_request(connection):
                with self._lock:
                    answer = self._answers[self._taken] if self._taken < len(self._answers) else None
                    self._taken += 1
                if answer is None or not answer(connection):
                    return

    def _read_request(self, connection: socket.socket) -> bool:
        """Reads one request, its head and its body; ``False`` when the client closed first, or
        the service stops."""
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = self._recv(connection)
            if not chunk:
                return False
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = self._recv(connection)
            if not chunk:
                return False
            body += chunk
        return True

    def _recv(self, connection: socket.socket) -> bytes:
        while not self._stopping.is_set():
            readable, _, _ = select.select([connection], [], [], DRIBBLE_EVERY_S)
            if readable:
                try:
                    return connection.recv(65536)
                except OSError:
                    return b""
        return b""
