"""What a loop is given and what it reports: its settings, its events, each call it ran, and
its result. The termination reasons are those of the Rust driver (``reactstep run``) and of the
TypeScript client's ``runLoop``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, TypedDict

from .approval import Decision
from .errors import ReactStepError
from .types import ConversationTurn, LlmConfig

TerminationReason: TypeAlias = Literal["success", "max_iterations", "stalled", "cancelled", "failure"]

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
    """``service``, ``approval``, or the name of the tool that failed."""
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
    """The service's error that ended the loop, the tools' failures, an approval that failed."""
    usage: LoopUsage = field(default_factory=LoopUsage)
    """Tokens the service reported, summed over the steps."""
    history: list[ConversationTurn] = field(default_factory=list)
    """The conversation at the end: send it with the next question to go on."""
    session_id: str | None = None


class LoopKwargs(TypedDict, total=False):
    """The loop's settings that have defaults (``LoopOptions`` documents each)."""

    key: str | None
    provider_keys: Mapping[str, str] | None
    max_iterations: int
    stall_threshold: int
    failure_phrases: Sequence[str]
    on_event: Callable[[LoopEvent], None] | None
    stream: bool
    mock_responses: Sequence[str] | None
    final_answer_schema: Mapping[str, Any] | bool | None
    request: Mapping[str, Any] | None


@dataclass(frozen=True)
class LoopOptions:
    question: str
    llm_config: LlmConfig | Mapping[str, Any]
    key: str | None = None
    """The user's own LLM key (``user_api_keys.llmKey``), for the first model of ``llm_config``."""
    provider_keys: Mapping[str, str] | None = None
    """The keys of ``llm_config.fallbacks``, by provider (``user_api_keys.providerKeys``)."""
    max_iterations: int = 10
    """Steps at most; the last one asks the model to answer."""
    stall_threshold: int = 3
    """The same call (tool and arguments) this many times in a row ends the loop as ``stalled``;
    the service's loop guard (422 ``loop_detected``) ends it as ``stalled`` too."""
    failure_phrases: Sequence[str] = DEFAULT_FAILURE_PHRASES
    """An answer holding one of these (case aside) ends the loop as ``failure``."""
    on_event: Callable[[LoopEvent], None] | None = None
    """Everything the loop does, as it happens."""
    stream: bool = True
    """Steps through the streaming endpoint, so thought deltas arrive as they form."""
    mock_responses: Sequence[str] | None = None
    """A scripted model: one output per step, sent as that step's ``mock_response``."""
    final_answer_schema: Mapping[str, Any] | bool | None = None
    """A JSON Schema the final answer must match (``react.final_answer_schema``)."""
    request: Mapping[str, Any] | None = None
    """More fields for every step's request: code context, ``react`` settings, ``session_id`` …"""
