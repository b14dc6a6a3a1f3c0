"""The loop an agent runs, on asyncio: as loop.py, with the step, the approvals and the tools
awaited, the calls of one step run concurrently, and a ``cancel`` event that stops what is in
flight at once (the stream is closed, so the service stops the step and its model call)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar, Unpack

from ._loop_core import LoopCore, failure_of
from .approval import AsyncApprover, Plan
from .errors import ReactStepError
from .events import StreamEvent
from .loop_types import LoopApproval, LoopKwargs, LoopOptions, LoopResult, LoopStep, LoopWaiting
from .tools import Tool, ToolContext
from .types import ActionDetails, LlmConfig, StepResponse

T = TypeVar("T")


class AsyncEventIterator(
    AsyncIterable[StreamEvent], AbstractAsyncContextManager["AsyncEventIterator"], Protocol
):
    """What ``stream`` returns: the events, and ``async with`` to close the stream when left early."""


class AsyncStepSender(Protocol):
    """What the loop needs of a client: one step, plain or streamed. ``AsyncClient`` is one."""

    async def step(self, request: Mapping[str, Any]) -> StepResponse: ...

    def stream(self, request: Mapping[str, Any]) -> AsyncEventIterator: ...


class _Cancelled(Exception):
    """The loop's cancel event was set while something was awaited."""


async def arun_loop(
    client: AsyncStepSender,
    question: str,
    *,
    tools: Sequence[Tool[Any, Any] | Callable[..., Any]],
    llm_config: LlmConfig | Mapping[str, Any],
    approve: AsyncApprover | None = None,
    cancel: asyncio.Event | None = None,
    **options: Unpack[LoopKwargs],
) -> LoopResult:
    """Runs the loop on ``question`` to its end, through ``client`` (see ``run_loop``).

    ``approve`` may be a plain function or a coroutine function. Setting ``cancel`` stops the
    step, approval or tools in flight and ends the loop as ``cancelled``.
    """
    settings = LoopOptions(question=question, llm_config=llm_config, **options)
    loop = _Loop(client, LoopCore(settings, tools), approve, cancel)
    try:
        return await loop.run()
    except _Cancelled:
        return loop.core.cancelled()


class _Loop:
    def __init__(
        self,
        client: AsyncStepSender,
        core: LoopCore,
        approve: AsyncApprover | None,
        cancel: asyncio.Event | None,
    ) -> None:
        self.client = client
        self.core = core
        self.approve = approve
        self.cancel = cancel

    async def run(self) -> LoopResult:
        core = self.core
        query = core.options.question
        left = max(1, core.options.max_iterations)
        iteration = 0
        while True:
            iteration += 1
            self.check()
            request = core.request(query, left, iteration)
            if request is None:
                return core.scripted_out()
            try:
                step = await self.racing(self.send(request, iteration))
            except ReactStepError as error:
                return core.failed(error)
            calls = core.absorb(step, iteration)
            if isinstance(calls, LoopResult):
                return calls
            ended = await self.act(step, calls, iteration)
            if ended is not None:
                return ended
            after = core.after_calls(step)
            if isinstance(after, LoopResult):
                return after
            query, left = "", after

    def check(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise _Cancelled

    async def racing(self, work: Awaitable[T]) -> T:
        """``work``'s result; ``_Cancelled`` (``work`` cancelled) when the cancel event comes first."""
        if self.cancel is None:
            return await work
        task = asyncio.ensure_future(work)
        waiter = asyncio.ensure_future(self.cancel.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise _Cancelled
        return task.result()

    async def send(self, request: dict[str, Any], iteration: int) -> StepResponse:
        self.core.emit(LoopWaiting(iteration))
        if not self.core.options.stream:
            return await self.client.step(request)
        async with self.client.stream(request) as events:
            async for event in events:
                step = self.core.streamed(event, iteration)
                if step is not None:
                    return step
        raise ReactStepError.unreadable(200, "the event stream ended without its step")

    async def act(self, step: StepResponse, calls: list[ActionDetails], iteration: int) -> LoopResult | None:
        core = self.core
        ended = core.announce(calls, iteration)
        if ended is not None:
            return ended
        plans: list[Plan] = []
        for call in calls:
            plan = await self.plan(call, iteration)
            if isinstance(plan, LoopResult):
                return plan
            plans.append(plan)
        records = await self.racing(self.execute(calls, plans, iteration, step.thought or ""))
        self.check()
        core.answer_calls(step, records)
        return None

    async def plan(self, call: ActionDetails, iteration: int) -> Plan | LoopResult:
        asked = self.core.approval_request(call, iteration)
        if asked is None or self.approve is None:
            plan = self.core.plan(call, asked, False, None)
        else:
            try:
                decision = await self.racing(_awaited(self.approve(asked)))
                plan = self.core.plan(call, asked, True, decision)
            except _Cancelled:
                raise
            except Exception as error:
                return self.core.approval_failed(call, error)
        if plan.decision is not None:
            self.core.emit(LoopApproval(iteration, call.tool_name, call.tool_call_id, plan.decision))
        return plan

    async def execute(
        self, calls: list[ActionDetails], plans: list[Plan], iteration: int, thought: str
    ) -> list[LoopStep]:
        outcomes = await asyncio.gather(
            *(self.outcome(call, plan, iteration) for call, plan in zip(calls, plans))
        )
        return [
            self.core.record(call, iteration, thought, outcome, plan)
            for call, plan, outcome in zip(calls, plans, outcomes)
        ]

    async def outcome(self, call: ActionDetails, plan: Plan, iteration: int) -> tuple[str, bool]:
        if plan.refusal is not None or plan.arguments is None:
            return plan.refusal or "", True
        tool = self.core.tool_of(call)
        if isinstance(tool, str):
            return tool, True
        context = ToolContext(call.tool_call_id, iteration, self.cancel)
        try:
            return await tool.arun(plan.arguments, context), False
        except Exception as error:
            return failure_of(error, tool), True


async def _awaited(value: T | Awaitable[T]) -> T:
    if inspect.isawaitable(value):
        return await value
    return value
