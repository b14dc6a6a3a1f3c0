// plan() and evaluate() against the real server (scripted with mock_response, and through the mock
// upstream), plain and streamed: a valid plan, a plan the service refuses, an adjusted plan, the
// service's retry rule over the model's word, and scores outside 0–10.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ReactStepClient,
  ReactStepError,
  type EvaluateRequest,
  type ExecutionPlan,
  type PlanRequest,
  type PlanResponse,
  type StreamEvent,
} from "../src/index.js";
import { completion, startService, startUpstream, type Service, type Upstream } from "./support/server.js";

const llmConfig = { modelName: "gpt-4o", tokenLimit: 8192, reservedOutputTokens: 512 };
const key = { llmKey: "sk-test-0000000000000000000000" };

const readFile = {
  name: "read_file",
  description: "Read a file.",
  parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
};

const twoSteps =
  'Thought: Read it, then explain.\nFinal Answer: {"complexity": "medium", "steps": [' +
  '{"step_number": 1, "description": "Read the test", "tool_name": "read_file", "parameters": {"path": "tests/login.rs"}}, ' +
  '{"step_number": 2, "description": "Explain the fix", "depends_on": [1], "required": false}], "estimated_iterations": 2}';

/** What the model said of an answer, as the final answer of an evaluation. */
function scored(completeness: number, needsRetry: boolean, missing: string[] = []): string {
  const evaluation = {
    completeness_score: completeness,
    quality_score: 6,
    missing_info: missing,
    suggestions: missing.map((m) => `find ${m}`),
    needs_retry: needsRetry,
  };
  return `Thought: Scored.\nFinal Answer: ${JSON.stringify(evaluation)}`;
}

const onePlan: ExecutionPlan = {
  complexity: "simple",
  steps: [{ step_number: 1, description: "Answer from what is known", tool_name: null, parameters: {}, required: true, depends_on: [] }],
  estimated_iterations: 1,
};

async function collect<S>(events: AsyncIterable<StreamEvent<S>>): Promise<StreamEvent<S>[]> {
  const all: StreamEvent<S>[] = [];
  for await (const event of events) {
    all.push(event);
  }
  return all;
}

describe("plan and evaluate", () => {
  let upstream: Upstream;
  let service: Service;
  let client: ReactStepClient;
  before(async () => {
    upstream = await startUpstream();
    service = await startService({ REACTSTEP_OPENAI_BASE_URL: upstream.baseUrl, REACTSTEP_RETRIES: "0" });
    client = new ReactStepClient({ baseUrl: service.url });
  });
  after(async () => {
    await service.stop();
    await upstream.close();
  });

  test("plan() answers the plan, its defaults filled in, typed without a cast", async () => {
    const request: PlanRequest = { user_query: "Fix the failing login test", tools: [readFile], llm_config: llmConfig, mock_response: twoSteps };
    const response = await client.plan(request);
    assert.equal(response.status, "direct_response_provided");
    if (response.status !== "direct_response_provided") {
      return;
    }
    // `plan` is not optional on this branch: no `?.` needed.
    const plan: ExecutionPlan = response.plan;
    assert.deepEqual(plan, {
      complexity: "medium",
      steps: [
        { step_number: 1, description: "Read the test", tool_name: "read_file", parameters: { path: "tests/login.rs" }, required: true, depends_on: [] },
        { step_number: 2, description: "Explain the fix", tool_name: null, parameters: {}, required: false, depends_on: [1] },
      ],
      estimated_iterations: 2,
    });
    assert.equal(response.thought, "Read it, then explain.");
    assert.deepEqual(response.direct_response_json, plan);
  });

  test("streamPlan() sends the thought as it forms, then the same plan", async () => {
    const events = await collect(
      client.streamPlan({ user_query: "Fix the failing login test", tools: [readFile], llm_config: llmConfig, mock_response: twoSteps }),
    );
    const last = events.at(-1);
    assert.equal(last?.type, "step");
    if (last?.type !== "step" || last.step.status !== "direct_response_provided") {
      assert.fail(JSON.stringify(last));
    }
    assert.equal(last.step.plan.steps.length, 2);
    const thought = events.flatMap((e) => (e.type === "thought" ? [e.delta] : [])).join("");
    assert.equal(thought, last.step.thought);
  });

  test("a plan naming a tool that does not exist is an invalid_model_output error, plain and streamed", async () => {
    const bad =
      'Thought: x.\nFinal Answer: {"complexity": "simple", "steps": [{"step_number": 1, "description": "Read", "tool_name": "nope", "parameters": {}}], "estimated_iterations": 1}';
    const request: PlanRequest = { user_query: "Fix", tools: [readFile], llm_config: llmConfig, mock_response: bad };
    await assert.rejects(client.plan(request), (error: unknown) => {
      assert.ok(error instanceof ReactStepError);
      assert.equal(error.type, "invalid_model_output");
      assert.equal(error.status, 502);
      assert.equal(error.rawOutput, bad);
      assert.match(error.message, /nope/);
      return true;
    });
    const events = await collect(client.streamPlan(request));
    const last = events.at(-1);
    assert.ok(last?.type === "error", JSON.stringify(events));
    assert.equal(last.error.type, "invalid_model_output");
    assert.equal(last.error.status, 502);
  });

  test("a plan request with a final answer schema is an invalid_request naming the field", async () => {
    await assert.rejects(
      client.plan({ user_query: "Fix", llm_config: llmConfig, react: { final_answer_schema: true }, mock_response: twoSteps }),
      (error: unknown) => {
        assert.ok(error instanceof ReactStepError);
        assert.equal(error.type, "invalid_request");
        assert.deepEqual(
          error.fields.map((f) => f.field),
          ["react.final_answer_schema"],
        );
        return true;
      },
    );
  });

  test("plan() through the provider adjusts the previous plan to the latest observation", async () => {
    upstream.script.push(
      completion(
        'Thought: The test is elsewhere.\nFinal Answer: {"complexity": "simple", "steps": [{"step_number": 1, "description": "Read the real test", "tool_name": "read_file", "parameters": {"path": "tests/auth.rs"}}], "estimated_iterations": 1}',
      ),
    );
    const seen = upstream.requests.length;
    const response: PlanResponse = await client.plan({
      user_query: "Fix the failing login test",
      tools: [readFile],
      llm_config: { ...llmConfig, provider: "openai" },
      user_api_keys: key,
      previous_plan: onePlan,
      latest_observation: "tests/login.rs does not exist; the login test is in tests/auth.rs",
    });
    assert.ok(response.status === "direct_response_provided");
    assert.equal(response.plan.steps[0]?.parameters["path"], "tests/auth.rs");
    assert.equal(response.usage?.prompt_tokens, 100);
    // The model was shown the earlier plan and what was observed.
    const sent = JSON.stringify(upstream.requests[seen]?.body);
    assert.match(sent, /tests\/auth\.rs/);
    assert.match(sent, /Answer from what is known/);
  });

  const evaluation = (mock: string, more: Partial<EvaluateRequest> = {}): EvaluateRequest => ({
    user_query: "Why does login fail?",
    llm_config: llmConfig,
    candidate_answer: "Something in auth.",
    mock_response: mock,
    ...more,
  });

  test("evaluate(): the service's rule overrules the model's needs_retry, and says so", async () => {
    const low = await client.evaluate(evaluation(scored(5, false, ["the failing line"])));
    assert.ok(low.status === "direct_response_provided");
    assert.deepEqual(low.evaluation, {
      completeness_score: 5,
      quality_score: 6,
      missing_info: ["the failing line"],
      suggestions: ["find the failing line"],
      needs_retry: true,
    });
    assert.match(low.warnings.join("\n"), /needs_retry is true, not the model's false/);
    const high = await client.evaluate(evaluation(scored(9, true)));
    assert.ok(high.status === "direct_response_provided");
    assert.equal(high.evaluation.needs_retry, false);
    assert.match(high.warnings.join("\n"), /needs_retry is false, not the model's true/);
    // 7 keeps the model's word.
    const middle = await client.evaluate(evaluation(scored(7, true)));
    assert.ok(middle.status === "direct_response_provided");
    assert.equal(middle.evaluation.needs_retry, true);
    assert.deepEqual(middle.warnings, []);
  });

  test("evaluate(): never a retry once the loop took more than the plan's estimate + 2 steps", async () => {
    const turns = (n: number) => [
      { role: "user" as const, content: "Why does login fail?" },
      ...Array.from({ length: n }, (_, i) => ({ role: "assistant" as const, content: `step ${i + 1}` })),
    ];
    const within = await client.evaluate(evaluation(scored(3, true, ["x"]), { plan: onePlan, conversation_history: turns(3) }));
    assert.ok(within.status === "direct_response_provided");
    assert.equal(within.evaluation.needs_retry, true);
    const past = await client.evaluate(evaluation(scored(3, true, ["x"]), { plan: onePlan, conversation_history: turns(4) }));
    assert.ok(past.status === "direct_response_provided");
    assert.equal(past.evaluation.needs_retry, false);
    assert.match(past.warnings.join("\n"), /more than the plan's estimated_iterations \+ 2/);
  });

  test("evaluate(): a score outside 0–10 is an invalid_model_output error, plain and streamed", async () => {
    const request = evaluation(scored(11, false));
    await assert.rejects(client.evaluate(request), (error: unknown) => {
      assert.ok(error instanceof ReactStepError);
      assert.equal(error.type, "invalid_model_output");
      assert.equal(error.status, 502);
      return true;
    });
    const events = await collect(client.streamEvaluate(request));
    const last = events.at(-1);
    assert.ok(last?.type === "error", JSON.stringify(events));
    assert.equal(last.error.type, "invalid_model_output");
  });

  test("streamEvaluate() through the provider: the thought streams, then the evaluation", async () => {
    upstream.script.push(completion(scored(9, false)));
    const events = await collect(
      client.streamEvaluate({
        user_query: "Why does login fail?",
        llm_config: { ...llmConfig, provider: "openai" },
        user_api_keys: key,
        candidate_answer: "The session is never stored.",
      }),
    );
    const last = events.at(-1);
    assert.ok(last?.type === "step" && last.step.status === "direct_response_provided", JSON.stringify(events));
    assert.equal(last.step.evaluation.completeness_score, 9);
    assert.equal(last.step.evaluation.needs_retry, false);
    assert.equal(events.flatMap((e) => (e.type === "thought" ? [e.delta] : [])).join(""), "Scored.");
    assert.match(JSON.stringify(upstream.requests.at(-1)?.body), /The session is never stored\./);
  });

  test("evaluate() without a candidate answer is an invalid_request", async () => {
    await assert.rejects(client.evaluate(evaluation(scored(9, false), { candidate_answer: "  " })), (error: unknown) => {
      assert.ok(error instanceof ReactStepError);
      assert.equal(error.type, "invalid_request");
      assert.equal(error.status, 400);
      return true;
    });
  });
});
