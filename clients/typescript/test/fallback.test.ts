// runLoop with `llmConfig.fallbacks` against the real server: the first model is rate limited,
// the fallback answers, and each key reaches only its own model's calls.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ReactStepClient, type LlmConfig } from "../src/index.js";
import { completion, failure, startService, startUpstream, type Service, type Upstream } from "./support/server.js";

const FIRST_KEY = "sk-first-model-key-0000000000";
const FALLBACK_KEY = "sk-fallback-model-key-1111111111";

describe("runLoop with fallbacks", () => {
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

  test("a rate-limited first model falls back, each model called with its own key", async () => {
    const limited = failure(429);
    const answer = completion("Thought: The session wraps the user.\nFinal Answer: login returns a session.");
    upstream.fallback = (request, res) => (request.body["model"] === "gpt-4o" ? limited : answer)(request, res);
    const llmConfig: LlmConfig = {
      modelName: "gpt-4o",
      tokenLimit: 16000,
      reservedOutputTokens: 1000,
      fallbacks: [{ provider: "openai", modelName: "gpt-4o-mini" }],
    };
    const client = new ReactStepClient({ baseUrl: service.url });
    const result = await client.runLoop({
      question: "What does login return?",
      tools: {},
      llmConfig,
      key: FIRST_KEY,
      providerKeys: { openai: FALLBACK_KEY },
      request: { session_id: "fallback-session" },
    });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.answer, "login returns a session.");
    const sent = upstream.requests.map((r) => [r.body["model"], r.raw.headers["authorization"]]);
    assert.deepEqual(sent, [
      ["gpt-4o", `Bearer ${FIRST_KEY}`],
      ["gpt-4o-mini", `Bearer ${FALLBACK_KEY}`],
    ]);
    assert.equal(result.sessionId, "fallback-session");
  });
});
