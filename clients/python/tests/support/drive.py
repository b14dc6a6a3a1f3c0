"""A loop run through either client: the tests of the loop run once with ``Client.run_loop`` and
once with ``AsyncClient.run_loop``, with the same tools and the same assertions."""

from __future__ import annotations

import asyncio
from typing import Any, Literal, TypeAlias

from reactstep import AsyncClient, Client, LoopResult

from .recording import AsyncRecordingTransport, Recorder, RecordingTransport

Kind: TypeAlias = Literal["sync", "async"]
KINDS: tuple[Kind, ...] = ("sync", "async")

# The model settings the loop tests step with.
LLM = {"modelName": "gpt-4o", "tokenLimit": 16000, "reservedOutputTokens": 1000}


def run(kind: Kind, url: str, question: str, **options: Any) -> LoopResult:
    """``run_loop`` of the sync client, or ``run_loop`` of the async one in an event loop of its own."""
    if kind == "sync":
        with Client(url) as client:
            return client.run_loop(question, **options)

    async def main() -> LoopResult:
        async with AsyncClient(url) as client:
            return await client.run_loop(question, **options)

    return asyncio.run(main())


def run_recorded(kind: Kind, url: str, question: str, **options: Any) -> tuple[LoopResult, Recorder]:
    """``run`` through a client whose transport keeps every request the loop sends."""
    recorder = Recorder()
    if kind == "sync":
        with Client(url, transport=RecordingTransport(recorder)) as client:
            return client.run_loop(question, **options), recorder

    async def main() -> LoopResult:
        async with AsyncClient(url, transport=AsyncRecordingTransport(recorder)) as client:
            return await client.run_loop(question, **options)

    return asyncio.run(main()), recorder
