"""Asking the user before a tool runs: the request the ``approve`` callback gets, its three
answers, and what each means for the call."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias


@dataclass(frozen=True)
class ApprovalRequest:
    """A call the model proposed, of a tool marked ``needs_approval``."""

    tool_call_id: str | None
    tool: str
    arguments: dict[str, Any]
    iteration: int


@dataclass(frozen=True)
class Approve:
    """Run the call as the model proposed it."""


@dataclass(frozen=True)
class Deny:
    """Do not run the call; the model is told so, with the reason."""

    reason: str


@dataclass(frozen=True)
class Edit:
    """Run the call with these arguments instead (a JSON object)."""

    arguments: Mapping[str, Any] = field(default_factory=dict)


Decision: TypeAlias = Approve | Deny | Edit
Approver: TypeAlias = Callable[[ApprovalRequest], Decision]
AsyncApprover: TypeAlias = Callable[[ApprovalRequest], Decision | Awaitable[Decision]]

DENIED = "The user denied this call"
NO_APPROVER = (
    "This call needs the user's approval and no one could approve it "
    "(the loop was given no approve callback): it was not run"
)


@dataclass(frozen=True)
class Plan:
    """What becomes of one call: run with ``arguments``, or answered with ``refusal`` unrun."""

    arguments: dict[str, Any] | None
    refusal: str | None
    decision: Decision | None


def unasked(arguments: dict[str, Any]) -> Plan:
    """A call of a tool that needs no approval."""
    return Plan(arguments=arguments, refusal=None, decision=None)


def unapprovable() -> Plan:
    """A call that needs approval when the loop has no ``approve`` callback."""
    return Plan(arguments=None, refusal=NO_APPROVER, decision=Deny(NO_APPROVER))


def plan_of(decision: object, proposed: dict[str, Any]) -> Plan:
    """What the callback's answer means for the call; ``TypeError`` for an answer that is none of
    the three."""
    if isinstance(decision, Approve):
        return Plan(arguments=proposed, refusal=None, decision=decision)
    if isinstance(decision, Deny):
        return Plan(arguments=None, refusal=f"{DENIED}: {decision.reason}", decision=decision)
    if isinstance(decision, Edit):
        return _edited(decision)
    raise TypeError(f"approve returned {decision!r}, not Approve(), Deny(reason) or Edit(arguments)")


def _edited(decision: Edit) -> Plan:
    why = _not_json_object(decision.arguments)
    if why is not None:
        refusal = f"{DENIED}: the arguments the user edited are not a JSON object ({why})"
        return Plan(arguments=None, refusal=refusal, decision=decision)
    return Plan(arguments=dict(decision.arguments), refusal=None, decision=decision)


def _not_json_object(value: object) -> str | None:
    """Why ``value`` is not a JSON object; ``None`` when it is one."""
    if not isinstance(value, Mapping):
        return f"a {type(value).__name__}"
    if not all(isinstance(key, str) for key in value):
        return "a key is not a string"
    try:
        json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as error:
        return f"not JSON: {error}"
    return None
