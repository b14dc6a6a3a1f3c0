"""The contract's models under short names.

Every model comes from ``_generated.py`` (datamodel-code-generator over ../../openapi.yaml);
nothing here is written by hand but the names, two literal lists the tests hold equal to the
generated ones, and the answers of ``plan`` and ``evaluate`` narrowed from ``StepFields`` (below),
so a change to the spec reaches the client's signatures.

A response is read as ``StepFields``: every field of a step, success or failure, with ``status``
saying which it is. The spec's variants (``ActionProposed``, ``DirectResponseProvided``,
``DryRun``, ``ErrorResponse``) narrow some fields to null with ``allOf``, which the generator
reads as the non-null type, so the client does not read answers through them.
"""

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field

from ._generated import (
    ActionDetails,
    ContextReport,
    ConversationTurn,
    ErrorBody,
    EvaluateRequest,
    ExecutionPlan,
    FallbackAttempt,
    FieldModel,
    LlmConfig,
    LlmFallback,
    LoopGuardReport,
    ModelUsed,
    PlanRequest,
    PlanStep,
    QualityEvaluation,
    ReactStepRequest,
    StepFields,
    StreamDelta,
    StreamRetry,
    ToolCall,
    ToolResult,
    Usage,
    UserApiKeys,
)
from ._generated import Tool as ToolDeclaration

# The keys are left out of a request's repr, and no value of a request is quoted in its
# validation errors (a traceback that shows locals, a log line): the generated models cannot
# say so themselves.
for _secret in ("llmKey", "providerKeys"):
    UserApiKeys.model_fields[_secret].repr = False
for _holding_keys in (UserApiKeys, ReactStepRequest, PlanRequest, EvaluateRequest):
    _holding_keys.model_config["hide_input_in_errors"] = True
    _holding_keys.model_rebuild(force=True)

StepResponse: TypeAlias = StepFields
"""A 2xx answer of ``react_step``, the data of the stream's ``step`` event, and (with
``status == "error"``) the body of every error."""


class PlanMade(StepFields):
    """A plan made (``POST /api/agent/plan``): a final answer whose ``plan`` is always there.
    Its ``updated_conversation_history`` is the planning exchange, not a turn of the loop."""

    status: Literal["direct_response_provided"]
    plan: ExecutionPlan


class EvaluationMade(StepFields):
    """An evaluation made (``POST /api/agent/evaluate``): a final answer whose ``evaluation`` is
    always there, ``needs_retry`` as the service's rules decide it."""

    status: Literal["direct_response_provided"]
    evaluation: QualityEvaluation


class DryRunResponse(StepFields):
    """A ``dry_run``'s answer to a plan or an evaluation: the prompt, no model called."""

    status: Literal["dry_run"]


PlanResponse: TypeAlias = Annotated[PlanMade | DryRunResponse, Field(discriminator="status")]
"""A 2xx answer of ``plan`` (the spec's ``PlanSuccess``): ``status`` tells which."""

EvaluateResponse: TypeAlias = Annotated[EvaluationMade | DryRunResponse, Field(discriminator="status")]
"""A 2xx answer of ``evaluate`` (the spec's ``EvaluateSuccess``): ``status`` tells which."""

FieldError: TypeAlias = FieldModel
"""With ``invalid_request``: one failing field and why."""

JsonObject: TypeAlias = dict[str, Any]

ErrorType: TypeAlias = Literal[
    "invalid_request",
    "payload_too_large",
    "not_found",
    "method_not_allowed",
    "context_overflow",
    "llm_auth",
    "llm_model_not_found",
    "llm_request_rejected",
    "llm_rate_limited",
    "llm_unavailable",
    "llm_bad_response",
    "invalid_model_output",
    "llm_timeout",
    "internal_error",
    "unauthorized",
    "rate_limited",
    "request_timeout",
    "headers_too_large",
    "client_disconnected",
    "rate_limiter_unavailable",
    "at_capacity",
    "overloaded",
    "loop_detected",
    "shutting_down",
]
"""Every ``error.type`` the service answers (``ErrorBody.type``; a test holds them equal)."""

StepStatus: TypeAlias = Literal["action_proposed", "direct_response_provided", "dry_run", "error"]
"""Every ``status`` of a response (``StepFields.status``; a test holds them equal)."""

__all__ = [
    "ActionDetails",
    "ContextReport",
    "ConversationTurn",
    "ErrorBody",
    "ErrorType",
    "DryRunResponse",
    "EvaluateRequest",
    "EvaluateResponse",
    "EvaluationMade",
    "ExecutionPlan",
    "FallbackAttempt",
    "FieldError",
    "JsonObject",
    "LlmConfig",
    "LlmFallback",
    "LoopGuardReport",
    "ModelUsed",
    "PlanMade",
    "PlanRequest",
    "PlanResponse",
    "PlanStep",
    "QualityEvaluation",
    "ReactStepRequest",
    "StepResponse",
    "StepStatus",
    "StreamDelta",
    "StreamRetry",
    "ToolCall",
    "ToolDeclaration",
    "ToolResult",
    "Usage",
    "UserApiKeys",
]
