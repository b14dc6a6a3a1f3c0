"""The loop an agent runs, synchronously: send the step, ask the user about the calls that need
approval, run the calls (several at once, in threads, when the model proposed several), answer
each call's id with a ``tool_observation``, and go on until the model answers, the loop stalls,
fails, runs out of steps, or the caller cancels. With ``plan`` it asks for a plan first (and
``approve_plan``'s approval of it), sends it with each step and has it adjusted after a failed
call; with ``reflect`` it has each final answer evaluated before accepting it, as ``reactstep run
--plan --reflect`` does."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, Unpack, runtime_checkable

from ._loop_core import Answered, LoopCore, failure_of
from ._plan_core import NO_EVALUATE, NO_PLAN, PlanCore
from .approval import Approver, Plan
from .errors import ReactStepError
from .events import StreamEvent
from .loop_types import LoopApproval, LoopKwargs, LoopOptions, LoopResult, LoopStep, LoopWaiting
from .planning import PlanApprover
from .tools import Tool, ToolContext
from .types import ActionDetails, EvaluateResponse, LlmConfig, PlanResponse, StepResponse


class EventIterator(Iterable[StreamEvent], AbstractContextManager["EventIterator"], Protocol):
    """What ``stream`` returns: the events, ``with`` to close the stream when left early, and
    ``abort()`` to cut it from another thread."""

    def abort(self) -> None: ...


class StepSender(Protocol):
    """What the loop needs of a client: one step, plain or streamed. ``Client`` is one."""

    def step(self, request: Mapping[str, Any]) -> StepResponse: ...

    def stream(self, request: Mapping[str, Any]) -> EventIterator: ...


@runtime_checkable
class Planner(Protocol):
    """What the loop needs of a client for ``plan``: a plan. ``Client`` is one."""

    def plan(self, request: Mapping[str, Any]) -> PlanResponse: ...


@runtime_checkable
class Evaluator(Protocol):
    """What the loop needs of a client for ``reflect``: an evaluation. ``Client`` is one."""

    def evaluate(self, request: Mapping[str, Any]) -> EvaluateResponse: ...


def run_loop(
    client: StepSender,
    question: str,
    *,
    tools: Sequence[Tool[Any, Any] | Callable[..., Any]],
    llm_config: LlmConfig | Mapping[str, Any],
    approve: Approver | None = None,
    approve_plan: PlanApprover | None = None,
    cancel: threading.Event | None = None,
    **options: Unpack[LoopKwargs],
) -> LoopResult:
    """Runs the loop on ``question`` to its end, through ``client``.

    ``approve`` is asked about each call of a tool marked ``needs_approval``, in the calls'
    order, before any of the step's calls runs. ``approve_plan`` (which implies ``plan``) is
    asked about the plan before any step: ``ApprovePlan()``, or ``RejectPlan(reason)``, which
    ends the loop as ``plan_rejected`` with no step run; a raise, or any other answer, ends it as
    ``failure``. With ``plan`` the client needs a ``plan()``, with ``reflect`` an ``evaluate()``
    (``Client`` has both). Setting ``cancel`` ends the loop as ``cancelled``: a streamed step in
    flight is cut at once (the service stops it and its model call); a step sent with
    ``stream=False``, a plan or an evaluation is let finish; tools see it in their
    ``ToolContext`` and the loop ends when they return.
    """
    settings = LoopOptions(question=question, llm_config=llm_config, **options)
    return _Loop(client, LoopCore(settings, tools), approve, approve_plan, cancel).run()


class _Loop:
    def __init__(
        self,
        client: StepSender,
        core: LoopCore,
        approve: Approver | None,
        approve_plan: PlanApprover | None,
        cancel: threading.Event | None,
    ) -> None:
        self.client = client
        self.core = core
        self.planning = PlanCore(core)
        self.approve = approve
        self.approve_plan = approve_plan
        self.cancel = cancel

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def run(self) -> LoopResult:
        core = self.core
        query = core.options.question
        left = max(1, core.options.max_iterations)
        if core.options.plan or self.approve_plan is not None:
            ended = self.plan_first(left)
            if ended is not None:
                return ended
        iteration = 0
        while True:
            iteration += 1
            if self.cancelled():
                return core.cancelled()
            request = core.request(query, left)
            if request is None:
                return core.scripted_out()
            try:
                step = self.send(request, iteration)
            except ReactStepError as error:
                return core.cancelled() if self.cancelled() else core.failed(error)
            if step is None:
                return core.cancelled()
            after = self.go_on(step, iteration)
            if isinstance(after, LoopResult):
                return after
            query, left = after

    def go_on(self, step: StepResponse, iteration: int) -> LoopResult | tuple[str, int]:
        """After a step: the loop's end, or the next step's question and the steps left."""
        core = self.core
        outcome = core.absorb(step, iteration)
        if isinstance(outcome, LoopResult):
            return outcome
        if isinstance(outcome, Answered):
            retry = self.reflect(outcome, iteration)
            return retry if isinstance(retry, LoopResult) else (retry, outcome.left)
        ended = self.act(step, outcome, iteration)
        if ended is not None:
            return ended
        left = core.after_calls(step)
        return left if isinstance(left, LoopResult) else ("", left)

    def plan_first(self, iterations_left: int) -> LoopResult | None:
        """Asks for the plan and for its approval; the loop's end when it ends there."""
        core, planning = self.core, self.planning
        if not isinstance(self.client, Planner):
            return core.end("failure", NO_PLAN)
        request = planning.plan_request(iterations_left)
        if isinstance(request, LoopResult):
            return request
        try:
            plan = planning.planned(self.client.plan(request))
        except ReactStepError as error:
            return core.cancelled() if self.cancelled() else planning.plan_failed(error)
        if isinstance(plan, LoopResult):
            return plan
        if self.approve_plan is None:
            return None
        try:
            answer = self.approve_plan(planning.approval_request(plan))
        except Exception as error:
            return planning.approval_failed(error)
        return planning.decided(answer)

    def reflect(self, answered: Answered, iteration: int) -> LoopResult | str:
        """The evaluation of a final answer: the loop's end, or the question that sends it on."""
        core, planning = self.core, self.planning
        if not isinstance(self.client, Evaluator):
            return core.end("failure", NO_EVALUATE)
        if self.cancelled():
            return core.cancelled()
        request = planning.evaluation_request(answered, iteration)
        evaluation = None
        if request is not None:
            try:
                evaluation = planning.evaluated(self.client.evaluate(request), answered, iteration)
            except ReactStepError as error:
                if self.cancelled():
                    return core.cancelled()
                planning.evaluation_failed(error)
        return planning.after_evaluation(answered, evaluation)

    def adjust(self, records: list[LoopStep], iteration: int) -> None:
        """The plan adjusted to each failed call of the step, while the run may adjust it."""
        if not isinstance(self.client, Planner):
            return
        for record in (record for record in records if record.is_error):
            request = self.planning.adjustment_request(record.observation, iteration)
            if request is None:
                return
            try:
                self.planning.adjusted(self.client.plan(request), record.observation, iteration)
            except ReactStepError as error:
                self.planning.adjustment_failed(error)

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
        self.adjust(records, iteration)
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
        """Runs the planned calls at once, each in a thread, at most ``max_parallel_tools`` at a
        time; their records in the calls' order."""
        workers = max(1, min(len(calls), self.core.options.max_parallel_tools))
        with ThreadPoolExecutor(max_workers=workers) as pool:
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
