"""The loop an agent runs, synchronously: send the step, ask the user about the calls that need
approval, run the calls (several at once, in threads, when the model proposed several), answer
each call's id with a ``tool_observation``, and go on until the model answers, the loop stalls,
fails, runs out of steps, or the caller cancels."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, Unpack

from ._loop_core import LoopCore, failure_of
from .approval import Approver, Plan
from .errors import ReactStepError
from .events import StreamEvent
from .loop_types import LoopApproval, LoopKwargs, LoopOptions, LoopResult, LoopStep, LoopWaiting
from .tools import Tool, ToolContext
from .types import ActionDetails, LlmConfig, StepResponse


class EventIterator(Iterable[StreamEvent], AbstractContextManager["EventIterator"], Protocol):
    """What ``stream`` returns: the events, ``with`` to close the stream when left early, and
    ``abort()`` to cut it from another thread."""

    def abort(self) -> None: ...


class StepSender(Protocol):
    """What the loop needs of a client: one step, plain or streamed. ``Client`` is one."""

    def step(self, request: Mapping[str, Any]) -> StepResponse: ...

    def stream(self, request: Mapping[str, Any]) -> EventIterator: ...


def run_loop(
    client: StepSender,
    question: str,
    *,
    tools: Sequence[Tool[Any, Any] | Callable[..., Any]],
    llm_config: LlmConfig | Mapping[str, Any],
    approve: Approver | None = None,
    cancel: threading.Event | None = None,
    **options: Unpack[LoopKwargs],
) -> LoopResult:
    """Runs the loop on ``question`` to its end, through ``client``.

    ``approve`` is asked about each call of a tool marked ``needs_approval``, in the calls'
    order, before any of the step's calls runs. Setting ``cancel`` ends the loop as
    ``cancelled``: a streamed step in flight is cut at once (the service stops it and its model
    call); a step sent with ``stream=False`` is let finish; tools see it in their
    ``ToolContext`` and the loop ends when they return.
    """
    settings = LoopOptions(question=question, llm_config=llm_config, **options)
    return _Loop(client, LoopCore(settings, tools), approve, cancel).run()


class _Loop:
    def __init__(
        self, client: StepSender, core: LoopCore, approve: Approver | None, cancel: threading.Event | None
    ) -> None:
        self.client = client
        self.core = core
        self.approve = approve
        self.cancel = cancel

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def run(self) -> LoopResult:
        core = self.core
        query = core.options.question
        left = max(1, core.options.max_iterations)
        iteration = 0
        while True:
            iteration += 1
            if self.cancelled():
                return core.cancelled()
            request = core.request(query, left, iteration)
            if request is None:
                return core.scripted_out()
            try:
                step = self.send(request, iteration)
            except ReactStepError as error:
                return core.cancelled() if self.cancelled() else core.failed(error)
            if step is None:
                return core.cancelled()
            calls = core.absorb(step, iteration)
            if isinstance(calls, LoopResult):
                return calls
            ended = self.act(step, calls, iteration)
            if ended is not None:
                return ended
            after = core.after_calls(step)
            if isinstance(after, LoopResult):
                return after
            query, left = "", after

    def send(self, request: dict[str, Any], iteration: int) -> StepResponse | None:
        """One step, streamed unless the caller asked otherwise; ``None`` when cancelled."""
        self.core.emit(LoopWaiting(iteration))
        if not self.core.options.stream:
            return self.client.step(request)
        with self.client.stream(request) as events, _cut_when(self.cancel, events):
            for event in events:
                if self.cancelled():
                    return None
                step = self.core.streamed(event, iteration)
                if step is not None:
                    return step
        raise ReactStepError.unreadable(200, "the event stream ended without its step")

    def act(self, step: StepResponse, calls: list[ActionDetails], iteration: int) -> LoopResult | None:
        """Answers every call of the step; the loop's end when it ends here."""
        core = self.core
        ended = core.announce(calls, iteration)
        if ended is not None:
            return ended
        plans: list[Plan] = []
        for call in calls:
            plan = self.plan(call, iteration)
            if isinstance(plan, LoopResult):
                return plan
            plans.append(plan)
        records = self.execute(calls, plans, iteration, step.thought or "")
        if self.cancelled():
            return core.cancelled()
        core.answer_calls(step, records)
        return None

    def plan(self, call: ActionDetails, iteration: int) -> Plan | LoopResult:
        asked = self.core.approval_request(call, iteration)
        decision: object = None
        if asked is not None and self.approve is not None:
            try:
                decision = self.approve(asked)
                plan = self.core.plan(call, asked, True, decision)
            except Exception as error:
                return self.core.approval_failed(call, error)
        else:
            plan = self.core.plan(call, asked, False, None)
        if plan.decision is not None:
            self.core.emit(LoopApproval(iteration, call.tool_name, call.tool_call_id, plan.decision))
        return plan

    def execute(
        self, calls: list[ActionDetails], plans: list[Plan], iteration: int, thought: str
    ) -> list[LoopStep]:
        """Runs the planned calls at once, each in a thread; their records in the calls' order."""
        with ThreadPoolExecutor(max_workers=max(1, len(calls))) as pool:
            outcomes = list(
                pool.map(lambda pair: self.outcome(pair[0], pair[1], iteration), zip(calls, plans))
            )
        return [
            self.core.record(call, iteration, thought, outcome, plan)
            for call, plan, outcome in zip(calls, plans, outcomes)
        ]

    def outcome(self, call: ActionDetails, plan: Plan, iteration: int) -> tuple[str, bool]:
        """The observation of one call, and whether it is an error."""
        if plan.refusal is not None or plan.arguments is None:
            return plan.refusal or "", True
        tool = self.core.tool_of(call)
        if isinstance(tool, str):
            return tool, True
        context = ToolContext(call.tool_call_id, iteration, self.cancel)
        try:
            return tool.run(plan.arguments, context), False
        except Exception as error:
            return failure_of(error, tool), True


@contextmanager
def _cut_when(cancel: threading.Event | None, events: EventIterator) -> Iterator[None]:
    """While the block runs, a thread cuts the stream once ``cancel`` is set: a read that waits
    for the model ends at once, and the service stops the step."""
    if cancel is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.05):
                events.abort()
                return

    threading.Thread(target=watch, name="reactstep-cancel", daemon=True).start()
    try:
        yield
    finally:
        done.set()
