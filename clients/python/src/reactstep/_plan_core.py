"""The loop's bookkeeping around a plan and an evaluation (``plan``, ``approve_plan``,
``reflect``), shared by the sync and async drivers (loop.py, aloop.py), which do the I/O: each
request, what each answer means, and the plan's adjustments after failed calls. The step's own
bookkeeping is in ``_loop_core``."""

from __future__ import annotations

from typing import Any

from ._loop_core import Answered, LoopCore
from .errors import ReactStepError
from .loop_types import (
    LoopError,
    LoopEvaluating,
    LoopEvaluation,
    LoopPlan,
    LoopPlanApproval,
    LoopPlanning,
    LoopResult,
)
from .planning import (
    MAX_PLAN_ADJUSTMENTS,
    ApprovePlan,
    PlanApprovalRequest,
    RejectPlan,
    observation_sent,
    plan_decision,
    rejected,
    retry_query,
)
from .types import EvaluateResponse, EvaluationMade, ExecutionPlan, PlanMade, PlanResponse, QualityEvaluation

NO_PLAN = "the loop was asked to plan, and its client has no plan()"
NO_EVALUATE = "the loop was asked to reflect, and its client has no evaluate()"


class PlanCore:
    def __init__(self, core: LoopCore) -> None:
        self.core = core
        self._adjustments = 0

    # The plan, before the first step.

    def plan_request(self, iterations_left: int) -> dict[str, Any] | LoopResult:
        """The first plan's request; the loop's end when a scripted model has no output for it."""
        core = self.core
        request = core.scripted(core.side_request(core.options.question))
        if request is None:
            return core.scripted_out()
        request["max_iterations_left"] = iterations_left
        core.emit(LoopPlanning(0))
        return request

    def planned(self, response: PlanResponse) -> ExecutionPlan | LoopResult:
        """The plan the service made, told and kept; the loop's end when it made none."""
        core = self.core
        core.took(response)
        if not isinstance(response, PlanMade):
            why = f"the service answered a plan of status {response.status}"
            return core.end("failure", f"no plan was made: {why}")
        core.result.plan = response.plan
        core.emit(LoopPlan(0, response.plan))
        return response.plan

    def plan_failed(self, error: ReactStepError) -> LoopResult:
        return self.core.failed(error, "no plan was made: ")

    def approval_request(self, plan: ExecutionPlan) -> PlanApprovalRequest:
        # A copy: what approve_plan does to it changes nothing the loop follows.
        return PlanApprovalRequest(plan.model_copy(deep=True))

    def decided(self, answer: object) -> LoopResult | None:
        """What ``approve_plan`` answered: the loop's end unless it approved."""
        try:
            decision = plan_decision(answer)
        except TypeError as error:
            return self.approval_failed(error)
        reason = decision.reason if isinstance(decision, RejectPlan) else None
        self.core.emit(LoopPlanApproval(0, isinstance(decision, ApprovePlan), reason))
        if isinstance(decision, RejectPlan):
            return self.core.end("plan_rejected", rejected(decision))
        return None

    def approval_failed(self, error: Exception) -> LoopResult:
        message = f"approving the plan failed: {type(error).__name__}: {error}"
        self.core.result.errors.append(LoopError("approval", message))
        return self.core.end("failure", message)

    # The plan, adjusted after a failed call.

    def adjustment_request(self, observation: str, iteration: int) -> dict[str, Any] | None:
        """The request adjusting the plan to a failed call's ``observation``; ``None`` when there
        is no plan, the run made its adjustments, or a scripted model has no output for it."""
        core = self.core
        plan = core.result.current_plan
        if plan is None or self._adjustments >= MAX_PLAN_ADJUSTMENTS:
            return None
        request = core.scripted(core.side_request(core.options.question))
        if request is None:
            self._unadjusted(f"the scripted responses ran out after {core.scripted_count} steps")
            return None
        # Each try is a model call: the bound counts the failed ones too.
        self._adjustments += 1
        request["previous_plan"] = plan.model_dump(mode="json")
        request["latest_observation"] = observation_sent(observation)
        core.emit(LoopPlanning(iteration))
        return request

    def adjusted(self, response: PlanResponse, observation: str, iteration: int) -> None:
        """The adjusted plan, followed from here; the plan stays as it was when none was made."""
        self.core.took(response)
        if not isinstance(response, PlanMade):
            self._unadjusted(f"the service answered a plan of status {response.status}")
            return
        adjusted = LoopPlan(iteration, response.plan, observation)
        self.core.result.plan_adjustments.append(adjusted)
        self.core.emit(adjusted)

    def adjustment_failed(self, error: ReactStepError) -> None:
        self._unadjusted(f"{error.type}: {error.message}", error)

    def _unadjusted(self, why: str, error: ReactStepError | None = None) -> None:
        self.core.result.errors.append(LoopError("service", f"the plan adjustment failed: {why}", error))

    # The evaluation of a final answer.

    def evaluation_request(self, answered: Answered, iteration: int) -> dict[str, Any] | None:
        """The request evaluating the answer; ``None`` (the failure kept) when a scripted model has
        no output for it."""
        core = self.core
        request = core.scripted(core.side_request(core.options.question))
        if request is None:
            self._unevaluated(f"the scripted responses ran out after {core.scripted_count} steps")
            return None
        request["candidate_answer"] = answered.answer
        plan = core.result.current_plan
        if plan is not None:
            request["plan"] = plan.model_dump(mode="json")
        core.emit(LoopEvaluating(iteration, answered.answer))
        return request

    def evaluated(
        self, response: EvaluateResponse, answered: Answered, iteration: int
    ) -> QualityEvaluation | None:
        """The evaluation, told and kept; ``None`` (the failure kept) when none was made."""
        self.core.took(response)
        if not isinstance(response, EvaluationMade):
            self._unevaluated(f"the service answered an evaluation of status {response.status}")
            return None
        made = LoopEvaluation(iteration, answered.answer, response.evaluation)
        self.core.result.evaluations.append(made)
        self.core.emit(made)
        return response.evaluation

    def evaluation_failed(self, error: ReactStepError) -> None:
        self._unevaluated(f"{error.type}: {error.message}", error)

    def _unevaluated(self, why: str, error: ReactStepError | None = None) -> None:
        # The answer stands: an evaluation that could not be had is no reason to lose it.
        self.core.result.errors.append(LoopError("service", f"the evaluation failed: {why}", error))

    def after_evaluation(self, answered: Answered, evaluation: QualityEvaluation | None) -> LoopResult | str:
        """The loop's end, or the user's turn that sends the model on with what is missing."""
        if evaluation is None or not evaluation.needs_retry:
            return self.core.end("success", answered.answer)
        if answered.left <= 0:
            # A guard: the service marks the last step's answer forced_final, which is never evaluated.
            return self.core.end("max_iterations", answered.answer)
        return retry_query(evaluation)
