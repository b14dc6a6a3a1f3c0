"""What the loop does around a plan and an evaluation (``run_loop``'s ``plan``, ``approve_plan``
and ``reflect``): what ``approve_plan`` is asked and may answer, the name the plan goes by in
each step's context, the observation sent to have the plan adjusted, and the user's turn that
sends the model on when an evaluation asks for a retry."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from .types import ExecutionPlan, QualityEvaluation

PLAN_FILE = "execution-plan.json"
"""The name the plan is sent under with each step, as a file of its context (the Rust driver's)."""

MAX_PLAN_ADJUSTMENTS = 3
"""Plan adjustments a run tries at most: each is a model call (the Rust driver's bound)."""

MAX_OBSERVATION_SENT = 64 * 1024
"""The most of a failed call's observation sent to have the plan adjusted (the Rust driver's)."""


@dataclass(frozen=True)
class PlanApprovalRequest:
    """The plan, before any step runs. A copy: changing it changes nothing."""

    plan: ExecutionPlan


@dataclass(frozen=True)
class ApprovePlan:
    """Run the loop with the plan."""


@dataclass(frozen=True)
class RejectPlan:
    """Run nothing: the loop ends as ``plan_rejected``, its answer naming the reason."""

    reason: str | None = None


PlanDecision: TypeAlias = ApprovePlan | RejectPlan
PlanApprover: TypeAlias = Callable[[PlanApprovalRequest], PlanDecision]
AsyncPlanApprover: TypeAlias = Callable[[PlanApprovalRequest], PlanDecision | Awaitable[PlanDecision]]


def plan_decision(answer: object) -> PlanDecision:
    """``approve_plan``'s answer, a blank reason as none; ``TypeError`` for an answer that is
    neither decision."""
    if isinstance(answer, ApprovePlan):
        return answer
    if isinstance(answer, RejectPlan) and (answer.reason is None or isinstance(answer.reason, str)):
        return RejectPlan(answer.reason if answer.reason and answer.reason.strip() else None)
    raise TypeError(f"approve_plan returned {answer!r}, not ApprovePlan() or RejectPlan(reason)")


def rejected(decision: RejectPlan) -> str:
    """The loop's answer when the plan was rejected."""
    why = "" if decision.reason is None else f": {decision.reason}"
    return f"the plan was not approved, so nothing ran{why}"


def plan_file(plan: ExecutionPlan) -> dict[str, Any]:
    """The plan as a file of a step's context (``explicit_context``)."""
    content = json.dumps(plan.model_dump(mode="json"), separators=(",", ":"), ensure_ascii=False)
    return {"path": PLAN_FILE, "content": content}


def observation_sent(observation: str) -> str:
    """A failed call's observation as sent to have the plan adjusted: a long one is cut (the
    whole is in the loop's steps), so the request stays small and under the service's limit."""
    if len(observation) <= MAX_OBSERVATION_SENT:
        return observation
    left_out = len(observation) - MAX_OBSERVATION_SENT
    cut = f"[cut: {left_out} of {len(observation)} characters left out]"
    return f"{observation[:MAX_OBSERVATION_SENT]}\n{cut}"


def retry_query(evaluation: QualityEvaluation) -> str:
    """The user's turn after an evaluation asked for a retry: what is missing, and what to do."""
    lines = [
        f"Your answer is not complete yet (completeness {evaluation.completeness_score}/10, "
        f"quality {evaluation.quality_score}/10). Go on, then answer again, whole."
    ]
    if evaluation.missing_info:
        lines += ["What is missing:", *(f"- {item}" for item in evaluation.missing_info)]
    if evaluation.suggestions:
        lines += ["Suggestions:", *(f"- {item}" for item in evaluation.suggestions)]
    return "\n".join(lines)
