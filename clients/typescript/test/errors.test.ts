// Every family of error thrown as a ReactStepError (a 400 naming its fields, a 422, a 502 from
// the upstream, a 429 with Retry-After), and the retries that are off unless asked for.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import { ReactStepClient, type ReactStepRequest } from "../src/index.js";
import { completion, failure, garbage, startService, startUpstream, type Service, type Upstream } from "./support/server.js";
import { thrown } from "./support/thrown.js";

const history = [
  { role: "user" as const, content: "Where is login handled?" },
  { role: "assistant" as const, content: "In src/auth.js." },
];

/** A step that goes to the mock upstream (OpenAI's wire format). */
const upstreamStep: ReactStepRequest = {
  user_query: "And logout?",
  conversation_history: history,
  llm_config: { modelName: "gpt-4o", provider: "openai", tokenLimit: 8192, reservedOutputTokens: 512 },
  user_api_keys: { llmKey: "sk-test-0000000000000000000000" },
  max_iterations_left: 5,
};

describe("errors", () => {
  let upstream: Upstream;
  let service: Service;
  before(async () => {
    upstream = await startUpstream();
    service = await startService({ REACTSTEP_OPENAI_BASE_URL: upstream.baseUrl, REACTSTEP_RETRIES: "0" });
  });
  after(async () => {
    await service.stop();
    await upstream.close();
  });
  beforeEach(() => {
    upstream.requests.length = 0;
    upstream.script.length = 0;
  });

  test("a 400 names each failing field, and the history comes back unchanged", async () => {
    const client = new ReactStepClient({ baseUrl: service.url });
    const error = await thrown(
      client.step({
        user_query: "",
        conversation_history: history,
        llm_config: { modelName: "gpt-4o", tokenLimit: 0, reservedOutputTokens: 512 },
        mock_response: "Final Answer: x",
      }),
    );
    assert.equal(error.status, 400);
    assert.equal(error.type, "invalid_request");
    assert.equal(error.retryable, false);
    assert.equal(error.retryAfter, undefined);
    assert.ok(error.fields.some((f) => f.field === "llm_config.tokenLimit"), JSON.stringify(error.fields));
    assert.ok(error.fields.every((f) => f.message.length > 0));
    assert.deepEqual(
      error.updatedConversationHistory.map((t) => [t.role, t.content]),
      history.map((t) => [t.role, t.content]),
    );
    assert.equal(error.response?.status, "error");
    assert.ok(error.message.includes("llm_config.tokenLimit"), error.message);
  });

  test("a 422 says the mandatory prompt does not fit", async () => {
    const client = new ReactStepClient({ baseUrl: service.url });
    const error = await thrown(
      client.step({
        user_query: "Explain this repository in depth. ".repeat(200),
        llm_config: { modelName: "gpt-4o", tokenLimit: 600, reservedOutputTokens: 500 },
        mock_response: "Final Answer: x",
      }),
    );
    assert.equal(error.status, 422);
    assert.equal(error.type, "context_overflow");
    assert.equal(error.retryable, false);
  });

  test("a 502 comes from an upstream whose reply cannot be read; without retries it is sent once", async () => {
    upstream.fallback = garbage();
    const client = new ReactStepClient({ baseUrl: service.url });
    const error = await thrown(client.step(upstreamStep));
    assert.equal(error.status, 502);
    assert.equal(error.type, "llm_bad_response");
    assert.equal(error.retryable, true);
    assert.equal(error.iterationsRemaining, 5);
    assert.equal(error.updatedConversationHistory.length, history.length);
    assert.equal(upstream.requests.length, 1);
  });

  test("retries of a retryable error are bounded, and each is announced", async () => {
    upstream.fallback = garbage();
    const retries: { attempt: number; delayMs: number; type: string }[] = [];
    const client = new ReactStepClient({
      baseUrl: service.url,
      retry: {
        attempts: 3,
        baseDelayMs: 1,
        maxDelayMs: 5,
        onRetry: ({ attempt, delayMs, error }) => retries.push({ attempt, delayMs, type: error.type }),
      },
    });
    const error = await thrown(client.step(upstreamStep));
    assert.equal(error.type, "llm_bad_response");
    assert.equal(upstream.requests.length, 3);
    assert.deepEqual(
      retries.map((r) => [r.attempt, r.type]),
      [
        [1, "llm_bad_response"],
        [2, "llm_bad_response"],
      ],
    );
    assert.ok(retries.every((r) => r.delayMs >= 0 && r.delayMs <= 5), JSON.stringify(retries));
  });

  test("a 429 carries Retry-After, and a retry waits that long before it succeeds", async () => {
    upstream.fallback = completion("Thought: Now it works.\nFinal Answer: Logout is in src/auth.js too.");
    upstream.script.push(failure(429, { "retry-after": "1" }));
    const plain = new ReactStepClient({ baseUrl: service.url });
    const error = await thrown(plain.step(upstreamStep));
    assert.equal(error.status, 429);
    assert.equal(error.type, "llm_rate_limited");
    assert.equal(error.retryable, true);
    assert.equal(error.retryAfter, 1);

    upstream.script.push(failure(429, { "retry-after": "1" }));
    const waits: number[] = [];
    const retrying = new ReactStepClient({
      baseUrl: service.url,
      retry: { attempts: 2, onRetry: ({ delayMs }) => waits.push(delayMs) },
    });
    const step = await retrying.step(upstreamStep);
    assert.equal(step.direct_response, "Logout is in src/auth.js too.");
    assert.deepEqual(waits, [1000]);
  });

  test("a Retry-After longer than the longest wait is not cut short: the error is thrown", async () => {
    upstream.script.push(failure(429, { "retry-after": "7" }));
    const waits: number[] = [];
    const client = new ReactStepClient({
      baseUrl: service.url,
      retry: { attempts: 3, maxDelayMs: 2000, onRetry: ({ delayMs }) => waits.push(delayMs) },
    });
    const error = await thrown(client.step(upstreamStep));
    assert.equal(error.retryAfter, 7);
    assert.deepEqual(waits, []);
    assert.equal(upstream.requests.length, 1);
  });

  test("an error that is not retryable is never retried", async () => {
    upstream.script.push(failure(401));
    const client = new ReactStepClient({ baseUrl: service.url, retry: true });
    const error = await thrown(client.step(upstreamStep));
    assert.equal(error.status, 401);
    assert.equal(error.type, "llm_auth");
    assert.equal(error.retryable, false);
    assert.equal(upstream.requests.length, 1);
  });

  test("an answer that is not the service's is an unreadable_response", async () => {
    const client = new ReactStepClient({
      baseUrl: service.url,
      fetch: async () => new Response("<html>bad gateway</html>", { status: 503, headers: { "content-type": "text/html" } }),
    });
    const error = await thrown(client.step(upstreamStep));
    assert.equal(error.status, 503);
    assert.equal(error.type, "unreadable_response");
    assert.equal(error.retryable, true);
  });
});
