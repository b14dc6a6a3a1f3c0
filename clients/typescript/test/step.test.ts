// step() against the real server, offline through mock_response, and the bearer token.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ReactStepClient, ReactStepError, type ReactStepRequest } from "../src/index.js";
import { startService, type Service } from "./support/server.js";

const llmConfig = { modelName: "gpt-4o", tokenLimit: 8192, reservedOutputTokens: 512 };

function request(mock: string, extra: Partial<ReactStepRequest> = {}): ReactStepRequest {
  return {
    user_query: "Where is login handled?",
    available_tools_prompt_segment: "- code_search(query) - search the code\n- read_file(path) - read a file",
    llm_config: llmConfig,
    mock_response: mock,
    ...extra,
  };
}

describe("step", () => {
  let service: Service;
  before(async () => {
    service = await startService();
  });
  after(async () => {
    await service.stop();
  });

  test("a proposed call comes back typed, with its id on the call and on the history's turn", async () => {
    const client = new ReactStepClient({ baseUrl: `${service.url}/` });
    const step = await client.step(
      request('Thought: I should search for the login code.\nAction: code_search(query="login")', {
        session_id: "ts-step-1",
        max_iterations_left: 4,
      }),
    );
    assert.equal(step.status, "action_proposed");
    assert.equal(step.session_id, "ts-step-1");
    assert.equal(step.thought, "I should search for the login code.");
    assert.equal(step.action_details?.tool_name, "code_search");
    assert.deepEqual(step.action_details?.tool_args, { query: "login" });
    assert.equal(step.iterations_remaining, 3);
    const id = step.action_details?.tool_call_id;
    assert.match(id ?? "", /^call_[A-Za-z0-9]{24}$/);
    const turns = step.updated_conversation_history;
    assert.equal(turns.length, 2);
    assert.equal(turns[0]?.role, "user");
    assert.equal(turns[1]?.role, "assistant");
    assert.equal(turns[1]?.toolCall?.id, id);
  });

  test("a final answer comes back as a direct response that ends the loop with success", async () => {
    const client = new ReactStepClient({ baseUrl: service.url });
    const step = await client.step(request("Thought: I know this.\nFinal Answer: In src/auth.js."));
    assert.equal(step.status, "direct_response_provided");
    assert.equal(step.direct_response, "In src/auth.js.");
    assert.equal(step.termination_reason, "success");
    assert.equal(step.action_details, null);
    assert.equal(step.error, null);
  });

  test("a caller's own fetch is used for every request", async () => {
    const seen: string[] = [];
    const client = new ReactStepClient({
      baseUrl: service.url,
      fetch: (input, init) => {
        seen.push(String(input));
        return fetch(input, init);
      },
    });
    const step = await client.step(request("Thought: fine.\nFinal Answer: yes"));
    assert.equal(step.direct_response, "yes");
    assert.deepEqual(seen, [`${service.url}/api/agent/react_step`]);
  });
});

describe("apiToken", () => {
  const token = "ts-client-test-token-0123456789";
  let service: Service;
  before(async () => {
    service = await startService({ REACTSTEP_API_TOKENS: token });
  });
  after(async () => {
    await service.stop();
  });

  test("the token is sent as a bearer token, and a server that needs one refuses a client without it", async () => {
    const body = request("Thought: fine.\nFinal Answer: authorised");
    const withToken = new ReactStepClient({ baseUrl: service.url, apiToken: token });
    assert.equal((await withToken.step(body)).direct_response, "authorised");

    const without = new ReactStepClient({ baseUrl: service.url });
    await assert.rejects(without.step(body), (error: unknown) => {
      assert.ok(error instanceof ReactStepError);
      assert.equal(error.status, 401);
      assert.equal(error.type, "unauthorized");
      assert.equal(error.retryable, false);
      return true;
    });
  });
});
