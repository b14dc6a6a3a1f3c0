"""What a loop is given and what it reports: its settings, its events, each call it ran, the
plans it followed and the evaluations it had made, and its result. The termination reasons are
those of the Rust driver (``reactstep run``) and of the TypeScript client's ``runLoop``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, TypedDict

from .approval import Decision
from .errors import ReactStepError
from .types import ConversationTurn, ExecutionPlan, LlmConfig, QualityEvaluation

TerminationReason: TypeAlias = Literal[
    "success", "max_iterations", "stalled", "cancelled", "failure", "plan_rejected"
]
"""``plan_rejected``: ``approve_plan`` rejected the plan, and no step ran."""

DEFAULT_FAILURE_PHRASES = ("i cannot complete", "i can't complete", "unable to complete the task")


@dataclass(frozen=True)
class LoopWaiting:
    type: ClassVar[Literal["waiting"]] = "waiting"
    iteration: int


@dataclass(frozen=True)
class LoopThoughtDelta:
    type: ClassVar[Literal["thought_delta"]] = "thought_delta"
    iteration: int
    delta: str


@dataclass(frozen=True)
class LoopAnswerDelta:
    type: ClassVar[Literal["answer_delta"]] = "answer_delta"
    iteration: int
    delta: str


@dataclass(frozen=True)
class LoopRetry:
    """The deltas of this step so far are void; the model is asked again."""

    type: ClassVar[Literal["retry"]] = "retry"
    iteration: int
    reason: str


@dataclass(frozen=True)
class LoopThought:
    type: ClassVar[Literal["thought"]] = "thought"
    iteration: int
    thought: str


@dataclass(frozen=True)
class LoopAction:
    type: ClassVar[Literal["action"]] = "action"
    iteration: int
    tool: str
    args: dict[str, Any]
    tool_call_id: str | None


@dataclass(frozen=True)
class LoopApproval:
    """The user's decision on a call of a tool that needs approval."""

    type: ClassVar[Literal["approval"]] = "approval"
    iteration: int
    tool: str
    tool_call_id: str | None
    decision: Decision


@dataclass(frozen=True)
class LoopObservation:
    type: ClassVar[Literal["observation"]] = "observation"
    iteration: int
    tool: str
    tool_call_id: str | None
    observation: str
    is_error: bool


@dataclass(frozen=True)
class LoopAnswer:
    type: ClassVar[Literal["answer"]] = "answer"
    iteration: int
    answer: str


@dataclass(frozen=True)
class LoopPlanning:
    """A plan is being asked for: before the first step (iteration 0), or to adjust the plan
    after a call of step ``iteration`` failed."""

    type: ClassVar[Literal["planning"]] = "planning"
    iteration: int


@dataclass(frozen=True)
class LoopPlan:
    """The plan the loop follows from here: the first one (iteration 0, ``observation`` None,
    told before ``approve_plan`` is asked), or the plan adjusted after a call of step
    ``iteration`` failed with ``observation`` (these are also ``LoopResult.plan_adjustments``)."""

    type: ClassVar[Literal["plan"]] = "plan"
    iteration: int
    plan: ExecutionPlan
    observation: str | None = None


@dataclass(frozen=True)
class LoopPlanApproval:
    """What ``approve_plan`` decided, before any step (iteration 0); ``reason`` with a rejection."""

    type: ClassVar[Literal["plan_approval"]] = "plan_approval"
    iteration: int
    approved: bool
    reason: str | None


@dataclass(frozen=True)
class LoopEvaluating:
    """With ``reflect``: the answer of this iteration is being evaluated."""

    type: ClassVar[Literal["evaluating"]] = "evaluating"
    iteration: int
    answer: str


@dataclass(frozen=True)
class LoopEvaluation:
    """A final answer evaluated (``reflect``), and what the service made of it: with
    ``evaluation.needs_retry`` the loop goes on (unless out of steps). Also the records of
    ``LoopResult.evaluations``."""

    type: ClassVar[Literal["evaluation"]] = "evaluation"
    iteration: int
    answer: str
    evaluation: QualityEvaluation


LoopEvent: TypeAlias = (
    LoopWaiting
    | LoopThoughtDelta
    | LoopAnswerDelta
    | LoopRetry
    | LoopThought
    | LoopAction
    | LoopApproval
    | LoopObservation
    | LoopAnswer
    | LoopPlanning
    | LoopPlan
    | LoopPlanApproval
    | LoopEvaluating
    | LoopEvaluation
)


@dataclass(frozen=True)
class LoopStep:
    """One call the loop answered."""

    iteration: int
    thought: str
    tool: str
    args: dict[str, Any]
    """The arguments the call ran with: the user's, after an ``Edit`` (the model's proposal is in
    the history)."""
    tool_call_id: str | None
    observation: str
    is_error: bool
    approval: Decision | None = None
    """The user's decision, for a tool that needs approval; ``None`` for the others."""


@dataclass(frozen=True)
class LoopError:
    source: str
    """``service`` (a step, plan or evaluation), ``approval`` (of a call or the plan), or the
    name of the tool that failed."""
    message: str
    error: ReactStepError | None = None


@dataclass
class LoopUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class LoopResult:
    answer: str = ""
    """The model's answer, or why the loop ended without one."""
    answer_json: Any = None
    """With ``final_answer_schema``: the answer as the JSON value that matched it."""
    success: bool = False
    termination_reason: TerminationReason = "failure"
    iterations: int = 0
    """Steps the service answered."""
    steps: list[LoopStep] = field(default_factory=list)
    tool_usage: dict[str, int] = field(default_factory=dict)
    """Calls per tool."""
    errors: list[LoopError] = field(default_factory=list)
    """The service's error that ended the loop, the tools' failures, an approval that failed, a
    plan adjustment or an evaluation that could not be had."""
    usage: LoopUsage = field(default_factory=LoopUsage)
    """Tokens the service reported, summed over the steps (the plans and the evaluations included)."""
    plan: ExecutionPlan | None = None
    """With ``plan``: the plan made before the first step (the one ``approve_plan`` was asked about)."""
    plan_adjustments: list[LoopPlan] = field(default_factory=list)
    """With ``plan``: each plan adjusted after a failed call, in order (at most 3)."""
    evaluations: list[LoopEvaluation] = field(default_factory=list)
    """With ``reflect``: each final answer evaluated, in order (the last one the loop's answer,
    unless it ended otherwise)."""
    history: list[ConversationTurn] = field(default_factory=list)
    """The conversation at the end: send it with the next question to go on."""
    session_id: str | None = None

    @property
    def current_plan(self) -> ExecutionPlan | None:
        """The plan the loop follows: the last adjustment's, or the first one."""
        return self.plan_adjustments[-1].plan if self.plan_adjustments else self.plan


class LoopKwargs(TypedDict, total=False):
    """The loop's settings that have defaults (``LoopOptions`` documents each)."""

    key: str | None
    provider_keys: Mapping[str, str] | None
    max_iterations: int
    max_parallel_tools: int
    stall_threshold: int
    failure_phrases: Sequence[str]
    on_event: Callable[[LoopEvent], None] | None
    stream: bool
    mock_responses: Sequence[str] | None
    final_answer_schema: Mapping[str, Any] | bool | None
    request: Mapping[str, Any] | None
    plan: bool
    reflect: bool


@dataclass(frozen=True)
class LoopOptions:
    question: str
    llm_config: LlmConfig | Mapping[str, Any]
    # Left out of the repr: a traceback that shows locals, or a log line, never holds a key.
    key: str | None = field(default=None, repr=False)
    """The user's own LLM key (``user_api_keys.llmKey``), for the first model of ``llm_config``."""
    provider_keys: Mapping[str, str] | None = field(default=None, repr=False)
    """The keys of ``llm_config.fallbacks``, by provider (``user_api_keys.providerKeys``)."""
    max_iterations: int = 10
    """Steps at most; the last one asks the model to answer."""
    max_parallel_tools: int = 8
    """A turn's calls (``parallel_actions``) run at most this many at once, each in a thread of its
    own (with the async client, as tasks); the rest wait their turn. Below 1 is 1."""
    stall_threshold: int = 6
    """The same call (tool and arguments) this many times in a row ends the loop as ``stalled``.
    The service's loop guard acts first: it warns the model at the third such call and refuses the
    sixth (422 ``loop_detected``), which ends the loop as ``stalled`` too; this count is the
    backstop for a guard set off or higher."""
    failure_phrases: Sequence[str] = DEFAULT_FAILURE_PHRASES
    """An answer holding one of these (case aside) ends the loop as ``failure``."""
    on_event: Callable[[LoopEvent], None] | None = None
    """Everything the loop does, as it happens."""
    stream: bool = True
    """Steps through the streaming endpoint, so thought deltas arrive as they form."""
    mock_responses: Sequence[str] | None = None
    """A scripted model: one output per request the loop sends, in order, as its
    ``mock_response``: with ``plan`` the plan's first, and each adjustment's right after the step
    whose call failed; with ``reflect`` each evaluation's right after the answer it evaluates."""
    final_answer_schema: Mapping[str, Any] | bool | None = None
    """A JSON Schema the final answer must match (``react.final_answer_schema``)."""
    request: Mapping[str, Any] | None = None
    """More fields for every step's request: code context, ``react`` settings, ``session_id`` …
    (the plan's and the evaluations' too, less ``final_answer_schema``, which they refuse)."""
    plan: bool = False
    """Plan first: before the first step, ``plan()`` with the question, the tools and
    ``request``'s context. The plan goes to ``on_event`` (``LoopPlan``), to ``approve_plan`` when
    given, into ``LoopResult.plan``, with every step as a file of its context
    (``execution-plan.json`` in ``explicit_context``, as ``reactstep run --plan`` sends it), and
    with ``reflect`` into each evaluation (its ``estimated_iterations`` bounds the retries). A plan
    the service could not make ends the loop as ``failure`` (``no plan was made: …``) before any
    step. After a call fails (an error observation: the tool raised, was unknown, or the call was
    denied) the plan is adjusted to it, ``plan()`` given ``previous_plan`` and
    ``latest_observation``, at most 3 times a run (tries that failed included); an adjustment the
    service could not make leaves the plan as it was, its failure in ``errors``. ``approve_plan``
    implies it."""
    reflect: bool = False
    """Reflect before accepting a final answer: ``evaluate()`` with the question, the loop's
    history, the answer and the plan. When the service's ``needs_retry`` says so (completeness
    under 7) the loop goes on with a user turn telling the model what is missing and what to do;
    otherwise the answer stands. Bounded by ``max_iterations``, and with ``plan`` by the service's
    rule (never a retry past the plan's ``estimated_iterations`` + 2 steps). When no evaluation can
    be had (the service's error, the scripted responses run out) the answer stands, the failure in
    ``errors``. Answers that end the loop anyway (a failure phrase, the last step's) are not
    evaluated."""
