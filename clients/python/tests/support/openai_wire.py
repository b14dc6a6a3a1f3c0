"""OpenAI's Chat Completions on the wire: what a request must be to be accepted (the checks the
real API makes, with its error bodies), and the bodies and stream chunks of its answers."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PATH = "/v1/chat/completions"
MODEL = "gpt-4o-2024-08-06"

PARAMETERS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "n",
        "stop",
        "max_tokens",
        "max_completion_tokens",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "user",
        "seed",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "store",
        "metadata",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
        "verbosity",
        "safety_identifier",
    }
)
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True)
class Refusal:
    """The API's answer to a request it does not accept."""

    status: int
    message: str
    code: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": None,
                "code": self.code,
            }
        }


def refusal_of(method: str, path: str, headers: Mapping[str, str], raw: bytes) -> Refusal | None:
    """Why the real API would refuse this request; ``None`` when it would accept it."""
    if method != "POST" or path != PATH:
        return Refusal(404, f"Invalid URL ({method} {path})")
    if not headers.get("authorization", "").startswith("Bearer ") or len(headers["authorization"]) < 15:
        return Refusal(401, "You didn't provide an API key.")
    if not headers.get("content-type", "").startswith("application/json"):
        return Refusal(400, "Invalid content type: expected application/json")
    try:
        body = json.loads(raw)
    except ValueError:
        return Refusal(400, "We could not parse the JSON body of your request.")
    if not isinstance(body, dict):
        return Refusal(400, "The request body must be a JSON object.")
    return _body_refusal(body)


def _body_refusal(body: dict[str, Any]) -> Refusal | None:
    unknown = sorted(set(body) - PARAMETERS)
    if unknown:
        return Refusal(400, f"Unrecognized request argument supplied: {unknown[0]}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return Refusal(400, "you must provide a model parameter")
    if "stream" in body and not isinstance(body["stream"], bool):
        return Refusal(400, "Invalid type for 'stream': expected a boolean")
    if "stream_options" in body and body.get("stream") is not True:
        return Refusal(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
    if "parallel_tool_calls" in body and not body.get("tools"):
        return Refusal(400, "'parallel_tool_calls' is only allowed when 'tools' are specified.")
    return (
        _numbers_refusal(body) or _tools_refusal(body.get("tools")) or _messages_refusal(body.get("messages"))
    )


def _numbers_refusal(body: dict[str, Any]) -> Refusal | None:
    temperature = body.get("temperature")
    if temperature is not None and not (isinstance(temperature, (int, float)) and 0 <= temperature <= 2):
        return Refusal(400, "Invalid 'temperature': expected a number from 0 to 2")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and not (isinstance(value, int) and value >= 1):
            return Refusal(400, f"Invalid '{name}': expected an integer of at least 1")
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) or (isinstance(stop, list) and len(stop) <= 4)):
        return Refusal(400, "Invalid 'stop': expected a string or up to 4 strings")
    return None


def _tools_refusal(tools: object) -> Refusal | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not tools:
        return Refusal(400, "Invalid 'tools': empty array. Expected an array with minimum length 1")
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            return Refusal(400, "Invalid 'tools': each tool must be {type: function, function: {...}}")
        if not isinstance(function.get("name"), str) or not isinstance(function.get("parameters", {}), dict):
            return Refusal(400, "Invalid 'tools': a function needs a name and an object of parameters")
    return None


def _messages_refusal(messages: object) -> Refusal | None:
    if not isinstance(messages, list) or not messages:
        return Refusal(400, "Invalid 'messages': empty array. Expected an array with minimum length 1")
    pending: list[str] = []
    for index, message in enumerate(messages):
        refusal = _message_refusal(index, message, pending)
        if refusal is not None:
            return refusal
    return None


def _message_refusal(index: int, message: object, pending: list[str]) -> Refusal | None:
    """Checks one message; ``pending`` holds the ids of calls not yet answered."""
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        return Refusal(400, f"Invalid 'messages[{index}].role'")
    role, content = message["role"], message.get("content")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if call_id not in pending:
            return Refusal(
                400,
                f"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[{index}])",
            )
        pending.remove(call_id)
        return (
            None if isinstance(content, (str, list)) else Refusal(400, f"Invalid 'messages[{index}].content'")
        )
    if pending:
        return Refusal(
            400,
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            + ", ".join(pending),
        )
    calls = message.get("tool_calls") if role == "assistant" else None
    if calls:
        pending.extend(call["id"] for call in calls)
        return None
    return None if isinstance(content, (str, list)) else Refusal(400, f"Invalid 'messages[{index}].content'")


def completion(text: str | None, calls: Sequence[tuple[str, str, dict[str, Any]]] = ()) -> dict[str, Any]:
    """A whole answer: ``text``, or calls (id, name, arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    if calls:
        message["tool_calls"] = [_call(call_id, name, args) for call_id, name, args in calls]
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": USAGE,
        "service_tier": "default",
        "system_fingerprint": "fp_mock",
    }


USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 12,
    "total_tokens": 112,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One chunk of a stream, as its ``data:`` line."""
    body = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "system_fingerprint": "fp_mock",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def usage_chunk() -> bytes:
    body = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [],
        "usage": USAGE,
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def text_chunks(text: str, piece: int = 7) -> list[bytes]:
    """``text`` streamed as the API does: the role first, then the content in pieces."""
    first = chunk({"role": "assistant", "content": "", "refusal": None})
    return [first, *(chunk({"content": text[at : at + piece]}) for at in range(0, len(text), piece))]


def call_chunks(calls: Sequence[tuple[str, str, dict[str, Any]]]) -> list[bytes]:
    """Parallel calls streamed as the API does: each call's id and name, then its arguments in pieces."""
    made = [chunk({"role": "assistant", "content": None, "refusal": None})]
    for index, (call_id, name, args) in enumerate(calls):
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        made.append(chunk({"tool_calls": [opening]}))
        text = json.dumps(args)
        for at in range(0, len(text), 5):
            made.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": text[at : at + 5]}}]})
            )
    return made
