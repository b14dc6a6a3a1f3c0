"""A mock LLM upstream on loopback that speaks OpenAI's Chat Completions, streamed or not, and
checks every request as the real API does (a request it would refuse is refused the same way,
and kept in ``refused`` so that a test sees it)."""

from __future__ import annotations

import json
import select
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import openai_wire as wire


@dataclass
class UpstreamRequest:
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


Reply = Callable[["Exchange"], None]


class Exchange:
    """One request and the means to answer it."""

    def __init__(self, handler: _Handler, request: UpstreamRequest) -> None:
        self.handler = handler
        self.request = request

    def json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        self.raw(status, json.dumps(body).encode(), {"content-type": "application/json", **(headers or {})})

    def raw(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.handler.send_response(status)
        for name, value in headers.items():
            self.handler.send_header(name, value)
        self.handler.send_header("content-length", str(len(body)))
        self.handler.end_headers()
        self.handler.wfile.write(body)

    def start_stream(self) -> None:
        self.handler.send_response(200)
        self.handler.send_header("content-type", "text/event-stream; charset=utf-8")
        self.handler.send_header("transfer-encoding", "chunked")
        self.handler.end_headers()

    def send(self, data: bytes) -> None:
        """One piece of a chunked body."""
        self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.handler.wfile.flush()

    def end_stream(self) -> None:
        self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()

    def drop(self) -> None:
        """Closes the connection where it stands: a chunked body without its end."""
        self.handler.close_connection = True
        self.handler.connection.shutdown(socket.SHUT_RDWR)

    def wait(self, release: threading.Event) -> bool:
        """Waits until ``release`` is set (``True``) or the client closes the connection (``False``)."""
        connection = self.handler.connection
        while not release.is_set():
            readable, _, _ = select.select([connection], [], [], 0.05)
            if readable and connection.recv(1, socket.MSG_PEEK) == b"":
                return False
        return True


@dataclass
class Upstream:
    base_url: str = ""
    requests: list[UpstreamRequest] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    script: deque[Reply] = field(default_factory=deque)
    fallback: Reply = field(
        default_factory=lambda: completion("Thought: The answer is known.\nFinal Answer: From the mock.")
    )
    server: ThreadingHTTPServer | None = None

    def reset(self) -> None:
        self.requests.clear()
        self.refused.clear()
        self.script.clear()
        self.fallback = completion("Thought: The answer is known.\nFinal Answer: From the mock.")

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: Upstream

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        refusal = wire.refusal_of(self.command, self.path, headers, raw)
        exchange = Exchange(self, UpstreamRequest(body={}, headers=headers))
        if refusal is not None:
            self.upstream.refused.append(refusal.message)
            exchange.json(refusal.status, refusal.body())
            return
        exchange.request.body = json.loads(raw)
        self.upstream.requests.append(exchange.request)
        reply = self.upstream.script.popleft() if self.upstream.script else self.upstream.fallback
        reply(exchange)

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        return


def start_upstream() -> Upstream:
    upstream = Upstream()
    handler = type("Handler", (_Handler,), {"upstream": upstream})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream.server = server
    upstream.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return upstream


def completion(text: str) -> Reply:
    """A complete answer with ``text``, as JSON or as a stream, whichever was asked for."""

    def reply(exchange: Exchange) -> None:
        if not exchange.request.stream:
            exchange.json(200, wire.completion(text))
            return
        stream(exchange, [*wire.text_chunks(text), wire.chunk({}, "stop"), wire.usage_chunk()])

    return reply


def tool_calls(calls: Sequence[tuple[str, str, dict[str, Any]]]) -> Reply:
    """Native calls (id, name, arguments), several at once, as JSON or as a stream."""

    def reply(exchange: Exchange) -> None:
        if not exchange.request.stream:
            exchange.json(200, wire.completion(None, calls))
            return
        stream(exchange, [*wire.call_chunks(calls), wire.chunk({}, "tool_calls"), wire.usage_chunk()])

    return reply


def stream(exchange: Exchange, chunks: Sequence[bytes]) -> None:
    exchange.start_stream()
    for piece in chunks:
        exchange.send(piece)
    exchange.send(wire.DONE)
    exchange.end_stream()


def failure(
    status: int, headers: dict[str, str] | None = None, message: str | None = None, code: str | None = None
) -> Reply:
    """An HTTP error of the provider's, in its error format."""

    def reply(exchange: Exchange) -> None:
        text = message or f"mock failure {status}"
        body = {"error": {"message": text, "type": "server_error", "param": None, "code": code}}
        exchange.json(status, body, headers)

    return reply


def raw(status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> Reply:
    """Any answer at all: a proxy's page, a redirect, a body that is no completion."""

    def reply(exchange: Exchange) -> None:
        exchange.raw(status, body, {"content-type": content_type, **(headers or {})})

    return reply


def garbage() -> Reply:
    """A 200 whose body is not a chat completion: the service cannot read it."""
    return raw(200, json.dumps({"unexpected": "not a chat completion"}).encode(), "application/json")


def cut_short(text: str) -> Reply:
    """A stream that sends ``text`` and then drops the connection, unfinished."""

    def reply(exchange: Exchange) -> None:
        exchange.start_stream()
        for piece in wire.text_chunks(text):
            exchange.send(piece)
        exchange.drop()

    return reply


@dataclass
class Hang:
    """A stream that sends ``text``, then holds the connection: ``started`` is set once it holds
    it, ``closed`` when the service closes it (it stopped the step); once ``release`` is set,
    ``rest`` follows and the stream ends. A request that is not streamed gets nothing until
    ``release``, then the whole answer."""

    text: str
    rest: str = ""
    release: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    closed: threading.Event = field(default_factory=threading.Event)

    def __call__(self, exchange: Exchange) -> None:
        self.started.set()
        if not exchange.request.stream:
            if exchange.wait(self.release):
                exchange.json(200, wire.completion(self.text + self.rest))
            else:
                self.closed.set()
            return
        exchange.start_stream()
        # The text in one piece: one delta, and then nothing until the release.
        for piece in wire.text_chunks(self.text, piece=len(self.text)):
            exchange.send(piece)
        if not exchange.wait(self.release):
            self.closed.set()
            return
        for piece in [wire.chunk({"content": self.rest}), wire.chunk({}, "stop"), wire.usage_chunk()]:
            exchange.send(piece)
        exchange.send(wire.DONE)
        exchange.end_stream()
