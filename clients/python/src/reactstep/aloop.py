"""The loop an agent runs, on asyncio: as loop.py, with the step, the plan, the evaluations, the
approvals and the tools awaited, the calls of one step run concurrently, and a ``cancel`` event
that stops what is in flight at once (the stream is closed, so the service stops the step and its
model call)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar, Unpack, runtime_checkable

from ._loop_core import Answered, LoopCore, failure_of
from ._plan_core import NO_EVALUATE, NO_PLAN, PlanCore
from .approval import AsyncApprover, Plan
from .errors import ReactStepError
from .events import StreamEvent
from .loop_types import LoopApproval, LoopKwargs, LoopOptions, LoopResult, LoopStep, LoopWaiting
from .planning import AsyncPlanApprover
from .tools import Tool, ToolContext
from .types import ActionDetails, EvaluateResponse, LlmConfig, PlanResponse, StepResponse

T = TypeVar("T")


class AsyncEventIterator(
    AsyncIterable[StreamEvent], AbstractAsyncContextManager["AsyncEventIterator"], Protocol
):
    """What ``stream`` returns: the events, and ``async with`` to close the stream when left early."""


class AsyncStepSender(Protocol):
    """What the loop needs of a client: one step, plain or streamed. ``AsyncClient`` is one."""

    async def step(self, request: Mapping[str, Any]) -> StepResponse: ...

    def stream(self, request: Mapping[str, Any]) -> AsyncEventIterator: ...


@runtime_checkable
class AsyncPlanner(Protocol):
    """What the loop needs of a client for ``plan``: a plan. ``AsyncClient`` is one."""

    async def plan(self, request: Mapping[str, Any]) -> PlanResponse: ...


@runtime_checkable
class AsyncEvaluator(Protocol):
    """What the loop needs of a client for ``reflect``: an evaluation. ``AsyncClient`` is one."""

    async def evaluate(self, request: Mapping[str, Any]) -> EvaluateResponse: ...


class _Cancelled(Exception):
    """The loop's cancel event was set while something was awaited."""


async def arun_loop(
    client: AsyncStepSender,
    question: str,
    *,
    tools: Sequence[Tool[Any, Any] | Callable[..., Any]],
    llm_config: LlmConfig | Mapping[str, Any],
    approve: AsyncApprover | None = None,
    approve_plan: AsyncPlanApprover | None = None,
    cancel: asyncio.Event | None = None,
    **options: Unpack[LoopKwargs],
) -> LoopResult:
    """Runs the loop on ``question`` to its end, through ``client`` (see ``run_loop``).

    ``approve`` and ``approve_plan`` may be plain functions or coroutine functions. Setting
    ``cancel`` stops the step, plan, evaluation, approval or tools in flight and ends the loop as
    ``cancelled``.
    """
    settings = LoopOptions(question=question, llm_config=llm_config, **options)
    loop = _Loop(client, LoopCore(settings, tools), approve, approve_plan, cancel)
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
        approve_plan: AsyncPlanApprover | None,
        cancel: asyncio.Event | None,
    ) -> None:
        self.client = client
        self.core = core
        self.planning = PlanCore(core)
        self.approve = approve
        self.approve_plan = approve_plan
        self.cancel = cancel

    async def run(self) -> LoopResult:
        core = self.core
        query = core.options.question
        left = max(1, core.options.max_iterations)
        if core.options.plan or self.approve_plan is not None:
            ended = await self.plan_first(left)
            if ended is not None:
                return ended
        iteration = 0
        while True:
            iteration += 1
            self.check()
            request = core.request(query, left)
            if request is None:
                return core.scripted_out()
            try:
                step = await self.racing(self.send(request, iteration))
            except ReactStepError as error:
                return core.failed(error)
            after = await self.go_on(step, iteration)
            if isinstance(after, LoopResult):
                return after
            query, left = after

    async def go_on(self, step: StepResponse, iteration: int) -> LoopResult | tuple[str, int]:
        """After a step: the loop's end, or the next step's question and the steps left."""
        core = self.core
        outcome = core.absorb(step, iteration)
        if isinstance(outcome, LoopResult):
            return outcome
        if isinstance(outcome, Answered):
            retry = await self.reflect(outcome, iteration)
            return retry if isinstance(retry, LoopResult) else (retry, outcome.left)
        ended = await self.act(step, outcome, iteration)
        if ended is not None:
            return ended
        left = core.after_calls(step)
        return left if isinstance(left, LoopResult) else ("", left)

    async def plan_first(self, iterations_left: int) -> LoopResult | None:
        """Asks for the plan and for its approval; the loop's end when it ends there."""
        core, planning = self.core, self.planning
        if not isinstance(self.client, AsyncPlanner):
            return core.end("failure", NO_PLAN)
        request = planning.plan_request(iterations_left)
        if isinstance(request, LoopResult):
            return request
        try:
            plan = planning.planned(await self.racing(self.client.plan(request)))
        except ReactStepError as error:
            return planning.plan_failed(error)
        if isinstance(plan, LoopResult):
            return plan
        if self.approve_plan is None:
            return None
        try:
            answer = await self.racing(_awaited(self.approve_plan(planning.approval_request(plan))))
        except _Cancelled:
            raise
        except Exception as error:
            return planning.approval_failed(error)
        return planning.decided(answer)

    async def reflect(self, answered: Answered, iteration: int) -> LoopResult | str:
        """The evaluation of a final answer: the loop's end, or the question that sends it on."""
        core, planning = self.core, self.planning
        if not isinstance(self.client, AsyncEvaluator):
            return core.end("failure", NO_EVALUATE)
        self.check()
        request = planning.evaluation_request(answered, iteration)
        evaluation = None
        if request is not None:
            try:
                response = await self.racing(self.client.evaluate(request))
                evaluation = planning.evaluated(response, answered, iteration)
            except ReactStepError as error:
                planning.evaluation_failed(error)
        return planning.after_evaluation(answered, evaluation)

    async def adjust(self, records: list[LoopStep], iteration: int) -> None:
        """The plan adjusted to each failed call of the step, while the run may adjust it."""
        if not isinstance(self.client, AsyncPlanner):
            return
        for record in (record for record in records if record.is_error):
            request = self.planning.adjustment_request(record.observation, iteration)
            if request is None:
                return
            try:
                response = await self.racing(self.client.plan(request))
                self.planning.adjusted(response, record.observation, iteration)
            except ReactStepError as error:
                self.planning.adjustment_failed(error)

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
        await self.adjust(records, iteration)
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
        # At most ``max_parallel_tools`` at a time; their records in the calls' order.
        room = asyncio.Semaphore(max(1, self.core.options.max_parallel_tools))

        async def bounded(call: ActionDetails, plan: Plan) -> tuple[str, bool]:
            async with room:
                return await self.outcome(call, plan, iteration)

        outcomes = await asyncio.gather(*(bounded(call, plan) for call, plan in zip(calls, plans)))
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
