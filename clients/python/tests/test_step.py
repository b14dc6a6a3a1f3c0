"""step() against the real server, offline through mock_response and through the mock upstream:
the typed step, requests as models or mappings, extra headers, the bearer token, the timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from reactstep import AsyncClient, Client, LlmConfig, ReactStepError, ReactStepRequest, StepEvent

from .support.requests import OFFLINE, offline, via_upstream
from .support.service import Service, start_service
from .support.upstream import Hang, Upstream

PROPOSED = 'Thought: I should search for the login code.\nAction: code_search(query="login")'
ANSWERED = "Thought: I know this.\nFinal Answer: In src/auth.js."


def test_a_proposed_call_comes_back_typed_with_its_id_on_the_call_and_on_the_history(
    service: Service,
) -> None:
    with Client(f"{service.url}/") as client:
        step = client.step(offline(PROPOSED, session_id="py-step-1", max_iterations_left=4))
    assert step.status == "action_proposed"
    assert step.session_id == "py-step-1"
    assert step.thought == "I should search for the login code."
    assert step.action_details is not None
    assert step.action_details.tool_name == "code_search"
    assert step.action_details.tool_args == {"query": "login"}
    assert step.iterations_remaining == 3
    call_id = step.action_details.tool_call_id or ""
    assert len(call_id) == 29 and call_id.startswith("call_") and call_id[5:].isalnum()
    turns = step.updated_conversation_history
    assert [turn.role for turn in turns] == ["user", "assistant"]
    assert turns[1].toolCall is not None and turns[1].toolCall.id == call_id


def test_a_final_answer_is_a_direct_response_that_ends_the_loop_with_success(service: Service) -> None:
    with Client(service.url) as client:
        step = client.step(offline(ANSWERED))
    assert step.status == "direct_response_provided"
    assert step.direct_response == "In src/auth.js."
    assert step.termination_reason == "success"
    assert step.action_details is None
    assert step.error is None


def test_a_request_model_sends_only_the_fields_it_was_given(service: Service) -> None:
    model = ReactStepRequest(
        user_query="Where is login handled?",
        llm_config=LlmConfig(**OFFLINE),
        mock_response=ANSWERED,
        session_id="py-model-1",
    )
    with Client(service.url) as client:
        from_model = client.step(model)
        from_mapping = client.step({**offline(ANSWERED), "session_id": "py-model-1"})
    # No unknown-field warning (a model would send every default as a field if it sent them all),
    # and the same step as the mapping's.
    assert from_model.warnings == from_mapping.warnings
    assert (from_model.thought, from_model.direct_response) == (
        from_mapping.thought,
        from_mapping.direct_response,
    )
    assert from_model.session_id == "py-model-1"


def test_extra_headers_go_with_every_call(service: Service) -> None:
    with Client(service.url, headers={"x-request-id": "py-client-request-1"}) as client:
        step = client.step(offline(ANSWERED))
        streamed = [event for event in client.stream(offline(ANSWERED))]
    assert step.request_id == "py-client-request-1"
    last = streamed[-1]
    assert isinstance(last, StepEvent)
    assert last.step.request_id == "py-client-request-1"


def test_the_async_client_steps_the_same(service: Service) -> None:
    async def main() -> tuple[str | None, str | None]:
        async with AsyncClient(service.url, headers={"x-request-id": "py-async-1"}) as client:
            step = await client.step(offline(PROPOSED))
        assert step.action_details is not None
        return step.action_details.tool_name, step.request_id

    assert asyncio.run(main()) == ("code_search", "py-async-1")


@pytest.fixture(scope="module")
def token_service() -> Iterator[Service]:
    started = start_service({"REACTSTEP_API_TOKENS": TOKEN})
    yield started
    started.stop()


TOKEN = "py-client-test-token-0123456789"


def test_the_token_is_sent_as_a_bearer_token_and_a_server_that_needs_one_refuses_a_client_without(
    token_service: Service,
) -> None:
    body = offline("Thought: fine.\nFinal Answer: authorised")
    with Client(token_service.url, api_token=TOKEN) as client:
        assert client.step(body).direct_response == "authorised"
    with Client(token_service.url) as client, pytest.raises(ReactStepError) as raised:
        client.step(body)
    assert (raised.value.status, raised.value.type, raised.value.retryable) == (401, "unauthorized", False)


def test_the_async_client_sends_the_token_too(token_service: Service) -> None:
    async def main() -> str | None:
        async with AsyncClient(token_service.url, api_token=TOKEN) as client:
            return (await client.step(offline("Thought: fine.\nFinal Answer: async"))).direct_response

    assert asyncio.run(main()) == "async"


def test_a_step_past_the_timeout_is_a_retryable_transport_error_and_the_service_stops_the_call(
    upstream_service: Service, upstream: Upstream
) -> None:
    held = Hang("Thought: I will take my time.\n")
    upstream.script.append(held)
    with Client(upstream_service.url, timeout=httpx.Timeout(0.5, connect=5.0)) as client:
        with pytest.raises(ReactStepError) as raised:
            client.step(via_upstream())
    error = raised.value
    assert (error.status, error.type, error.retryable) == (0, "transport_error", True)
    assert isinstance(error.__cause__, httpx.ReadTimeout)
    assert error.response is None and error.updated_conversation_history == []
    # The client closed its connection; the service stops the step and closes its upstream call.
    assert held.closed.wait(20)
