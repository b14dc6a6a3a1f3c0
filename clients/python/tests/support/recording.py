"""httpx's own transports, keeping every request a client sends (its path and JSON body) before
sending it on: a loop's requests, as the service got them, for the tests to read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Sent:
    path: str
    body: dict[str, Any]


class Recorder:
    """The requests sent, in order, by both transports below."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def keep(self, request: httpx.Request) -> None:
        self.sent.append(Sent(request.url.path, json.loads(request.content)))

    def paths(self) -> list[str]:
        return [sent.path.removeprefix("/api/agent/") for sent in self.sent]

    def bodies(self, *paths: str) -> list[dict[str, Any]]:
        """The bodies sent to these paths (``plan``, ``react_step/stream`` …), in order."""
        return [sent.body for sent in self.sent if sent.path.removeprefix("/api/agent/") in paths]


class RecordingTransport(httpx.HTTPTransport):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.recorder.keep(request)
        return super().handle_request(request)


class AsyncRecordingTransport(httpx.AsyncHTTPTransport):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.recorder.keep(request)
        return await super().handle_async_request(request)
