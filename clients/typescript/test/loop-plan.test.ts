// runLoop's `plan`, `approvePlan` and `reflect` against the real server, with a scripted model
// (mock_response per request: the plan, the steps, the evaluations) and through the mock
// upstream: a plan followed, a retry the evaluation asked for then a pass, the service's rule
// ending the retries, a rejected plan, and the failures.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ReactStepClient,
  runLoop,
  type EvaluateRequest,
  type LoopEvent,
  type LoopTool,
  type PlanApprovalRequest,
  type PlanRequest,
  type ReactStepRequest,
} from "../src/index.js";
import type { StepSender } from "../src/events.js";
import { completion, startService, startUpstream, type Service, type Upstream } from "./support/server.js";

const llmConfig = { modelName: "gpt-4o", tokenLimit: 16000, reservedOutputTokens: 1000 };

const files: Record<string, string> = {
  "src/auth.ts": "export function login(user: string) { return session(user); }\n",
  "src/session.ts": "export function session(user: string) { return { user }; }\n",
};

function tools(): { read: string[]; tools: Record<string, LoopTool> } {
  const read: string[] = [];
  return {
    read,
    tools: {
      read_file: {
        description: "Read a file of the workspace",
        parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
        run: async (args) => {
          const path = String(args["path"]);
          read.push(path);
          const text = files[path];
          if (text === undefined) {
            throw new Error(`no such file: ${path}`);
          }
          return text;
        },
      },
    },
  };
}

/** A plan's output: `estimated` iterations, reading auth.ts then answering. */
function planned(estimated: number): string {
  const plan = {
    complexity: "medium",
    steps: [
      { step_number: 1, description: "Read where login is", tool_name: "read_file", parameters: { path: "src/auth.ts" } },
      { step_number: 2, description: "Say what login returns", depends_on: [1] },
    ],
    estimated_iterations: estimated,
  };
  return `Thought: Read, then answer.\nFinal Answer: ${JSON.stringify(plan)}`;
}

/** An evaluation's output. */
function scored(completeness: number, missing: string[] = [], suggestions: string[] = []): string {
  const evaluation = { completeness_score: completeness, quality_score: 7, missing_info: missing, suggestions, needs_retry: completeness < 7 };
  return `Thought: Scored.\nFinal Answer: ${JSON.stringify(evaluation)}`;
}

/** `client`, keeping every request the loop sends through it, by endpoint. */
function recording(client: ReactStepClient): { sender: StepSender; steps: ReactStepRequest[]; plans: PlanRequest[]; evaluations: EvaluateRequest[] } {
  const steps: ReactStepRequest[] = [];
  const plans: PlanRequest[] = [];
  const evaluations: EvaluateRequest[] = [];
  const sender: StepSender = {
    step: (request, options) => (steps.push(request), client.step(request, options)),
    stream: (request, options) => (steps.push(request), client.stream(request, options)),
    plan: (request, options) => (plans.push(request), client.plan(request, options)),
    evaluate: (request, options) => (evaluations.push(request), client.evaluate(request, options)),
  };
  return { sender, steps, plans, evaluations };
}

describe("runLoop with plan and reflect", () => {
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

  test("plans first, reflects, goes on with what is missing, then passes", async () => {
    const { read, tools: loopTools } = tools();
    const events: LoopEvent[] = [];
    const sent = recording(client);
    const result = await runLoop(sent.sender, {
      question: "What does login return?",
      tools: loopTools,
      llmConfig,
      plan: true,
      reflect: true,
      request: { explicit_context: [{ path: "notes.md", content: "login is in src/auth.ts" }] },
      onEvent: (event) => events.push(event),
      mockResponses: [
        planned(2),
        "Thought: Read auth.\nAction: read_file(path='src/auth.ts')",
        "Thought: Enough.\nFinal Answer: login calls session.",
        scored(5, ["what session returns"], ["read src/session.ts"]),
        "Thought: Read session too.\nAction: read_file(path='src/session.ts')",
        "Thought: Now whole.\nFinal Answer: login(user) returns session(user), an object holding the user.",
        scored(9),
      ],
    });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.success, true);
    assert.equal(result.answer, "login(user) returns session(user), an object holding the user.");
    assert.equal(result.iterations, 4);
    assert.deepEqual(read, ["src/auth.ts", "src/session.ts"]);
    // The plan, with the service's defaults filled in.
    assert.equal(result.plan?.complexity, "medium");
    assert.equal(result.plan?.estimated_iterations, 2);
    assert.deepEqual(result.plan?.steps.map((s) => [s.step_number, s.tool_name, s.required, s.depends_on]), [
      [1, "read_file", true, []],
      [2, null, true, [1]],
    ]);
    // Both answers were evaluated; the first asked for more.
    assert.deepEqual(
      result.evaluations.map((e) => [e.iteration, e.answer, e.evaluation.completeness_score, e.evaluation.needs_retry]),
      [
        [2, "login calls session.", 5, true],
        [4, "login(user) returns session(user), an object holding the user.", 9, false],
      ],
    );
    // Every step carried the plan as a file of its context, after the caller's own files.
    assert.equal(sent.plans.length, 1);
    assert.equal(sent.steps.length, 4);
    for (const step of sent.steps) {
      assert.deepEqual(step.explicit_context, [
        { path: "notes.md", content: "login is in src/auth.ts" },
        { path: "execution-plan.json", content: JSON.stringify(result.plan) },
      ]);
    }
    // Each evaluation had the question, the history so far with the answer, and the plan.
    assert.deepEqual(
      sent.evaluations.map((e) => [e.user_query, e.candidate_answer, e.plan, e.conversation_history?.at(-1)?.content]),
      [
        ["What does login return?", "login calls session.", result.plan, "login calls session."],
        ["What does login return?", result.answer, result.plan, result.answer],
      ],
    );
    // The model read the question, then what was missing.
    const users = result.history.filter((t) => t.role === "user").map((t) => t.content);
    assert.equal(users.length, 2, JSON.stringify(result.history));
    assert.equal(users[0], "What does login return?");
    assert.match(users[1] ?? "", /^Your answer is not complete yet \(completeness 5\/10, quality 7\/10\)/);
    assert.match(users[1] ?? "", /What is missing:\n- what session returns\nSuggestions:\n- read src\/session\.ts$/);
    // Nothing of the planning exchange went into the loop's history.
    assert.ok(!result.history.some((t) => t.content.includes("Make a plan")), JSON.stringify(result.history));
    // The events, in order, around the plan and the evaluations.
    const order = events
      .filter((e) => ["planning", "plan", "answer", "evaluating", "evaluation", "waiting"].includes(e.type))
      .map((e) => `${e.type}@${e.iteration}`);
    assert.deepEqual(order, [
      "planning@0",
      "plan@0",
      "waiting@1",
      "waiting@2",
      "answer@2",
      "evaluating@2",
      "evaluation@2",
      "waiting@3",
      "waiting@4",
      "answer@4",
      "evaluating@4",
      "evaluation@4",
    ]);
    const planEvent = events.find((e) => e.type === "plan");
    assert.ok(planEvent?.type === "plan");
    assert.deepEqual(planEvent.plan, result.plan);
  });

  test("the service's rule ends the retries once the loop overran the plan's estimate by more than 2", async () => {
    const { tools: loopTools } = tools();
    const low = scored(3, ["everything"]);
    const result = await client.runLoop({
      question: "What does login return?",
      tools: loopTools,
      llmConfig,
      plan: true,
      reflect: true,
      stream: false,
      mockResponses: [
        planned(1),
        "Thought: a\nFinal Answer: one",
        low,
        "Thought: b\nFinal Answer: two",
        low,
        "Thought: c\nFinal Answer: three",
        low,
        "Thought: d\nFinal Answer: four",
        low,
        "Thought: never asked\nFinal Answer: five",
      ],
    });
    // 1 + 2 = 3 steps allowed: the fourth answer stands, however it scored.
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.answer, "four");
    assert.equal(result.iterations, 4);
    assert.deepEqual(
      result.evaluations.map((e) => [e.answer, e.evaluation.completeness_score, e.evaluation.needs_retry]),
      [
        ["one", 3, true],
        ["two", 3, true],
        ["three", 3, true],
        ["four", 3, false],
      ],
    );
  });

  test("the loop's own step limit bounds the retries without a plan", async () => {
    const { tools: loopTools } = tools();
    const result = await client.runLoop({
      question: "What does login return?",
      tools: loopTools,
      llmConfig,
      reflect: true,
      maxIterations: 2,
      mockResponses: ["Thought: a\nFinal Answer: one", scored(2, ["all of it"]), "Thought: b\nFinal Answer: two", scored(9)],
    });
    // The second step was the last: its answer was asked for, so it is not evaluated.
    assert.equal(result.terminationReason, "max_iterations", result.answer);
    assert.equal(result.answer, "two");
    assert.equal(result.plan, undefined);
    assert.deepEqual(result.evaluations.map((e) => e.answer), ["one"]);
  });

  test("approvePlan sees the plan and may approve it", async () => {
    const { tools: loopTools } = tools();
    const asked: PlanApprovalRequest[] = [];
    const events: LoopEvent[] = [];
    const result = await client.runLoop({
      question: "What does login return?",
      tools: loopTools,
      llmConfig,
      approvePlan: (request) => {
        asked.push(request);
        request.plan.steps.length = 0;
        return { decision: "approve" };
      },
      onEvent: (event) => events.push(event),
      mockResponses: [planned(2), "Thought: Known.\nFinal Answer: a session"],
    });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(asked.length, 1);
    // approvePlan got a copy: its change did not reach the plan the loop followed.
    assert.equal(result.plan?.steps.length, 2);
    assert.deepEqual(
      events.flatMap((e) => (e.type === "plan_approval" ? [[e.approved, e.reason]] : [])),
      [[true, undefined]],
    );
  });

  test("a rejected plan ends the loop as plan_rejected before any step", async () => {
    const { read, tools: loopTools } = tools();
    const events: LoopEvent[] = [];
    const result = await client.runLoop({
      question: "What does login return?",
      tools: loopTools,
      llmConfig,
      plan: true,
      approvePlan: async () => ({ decision: "reject", reason: "read session.ts first" }),
      onEvent: (event) => events.push(event),
      mockResponses: [planned(2), "Thought: never sent\nAction: read_file(path='src/auth.ts')"],
    });
    assert.equal(result.terminationReason, "plan_rejected");
    assert.equal(result.success, false);
    assert.equal(result.answer, "the plan was not approved, so nothing ran: read session.ts first");
    assert.equal(result.iterations, 0);
    assert.deepEqual(read, []);
    assert.equal(result.plan?.estimated_iterations, 2);
    assert.deepEqual(events.map((e) => e.type), ["planning", "plan", "plan_approval"]);
  });

  test("approvePlan throwing or answering nonsense ends the loop as failure; an abort as cancelled", async () => {
    const { tools: loopTools } = tools();
    const thrown = await client.runLoop({
      question: "q",
      tools: loopTools,
      llmConfig,
      approvePlan: () => {
        throw new Error("no terminal");
      },
      mockResponses: [planned(2)],
    });
    assert.equal(thrown.terminationReason, "failure");
    assert.equal(thrown.answer, "approving the plan failed: no terminal");
    assert.deepEqual(thrown.errors.map((e) => e.source), ["approval"]);
    const nonsense = await client.runLoop({
      question: "q",
      tools: loopTools,
      llmConfig,
      approvePlan: () => ({ decision: "maybe" }) as never,
      mockResponses: [planned(2)],
    });
    assert.equal(nonsense.terminationReason, "failure");
    assert.match(nonsense.answer, /\{"decision":"maybe"\} is neither/);
    const controller = new AbortController();
    const aborted = await client.runLoop({
      question: "q",
      tools: loopTools,
      llmConfig,
      signal: controller.signal,
      approvePlan: () => {
        controller.abort();
        return new Promise(() => undefined);
      },
      mockResponses: [planned(2)],
    });
    assert.equal(aborted.terminationReason, "cancelled");
  });

  test("a plan the service refuses ends the loop as failure; an evaluation it refuses lets the answer stand", async () => {
    const { tools: loopTools } = tools();
    const badPlan = await client.runLoop({
      question: "q",
      tools: loopTools,
      llmConfig,
      plan: true,
      mockResponses: ['Thought: x\nFinal Answer: {"complexity": "simple", "steps": [{"step_number": 1, "description": "d", "tool_name": "nope"}], "estimated_iterations": 1}'],
    });
    assert.equal(badPlan.terminationReason, "failure");
    assert.equal(badPlan.iterations, 0);
    assert.match(badPlan.answer, /^no plan was made: invalid_model_output: /);
    assert.equal(badPlan.errors[0]?.error?.type, "invalid_model_output");
    const badEvaluation = await client.runLoop({
      question: "q",
      tools: loopTools,
      llmConfig,
      reflect: true,
      mockResponses: ["Thought: a\nFinal Answer: one", scored(11)],
    });
    assert.equal(badEvaluation.terminationReason, "success");
    assert.equal(badEvaluation.answer, "one");
    assert.equal(badEvaluation.iterations, 1);
    assert.deepEqual(badEvaluation.evaluations, []);
    assert.match(badEvaluation.errors[0]?.message ?? "", /^the evaluation failed: invalid_model_output: /);
    assert.equal(badEvaluation.errors[0]?.error?.status, 502);
    const ranOut = await client.runLoop({ question: "q", tools: loopTools, llmConfig, reflect: true, mockResponses: ["Thought: a\nFinal Answer: one"] });
    assert.equal(ranOut.terminationReason, "success");
    assert.equal(ranOut.answer, "one");
    assert.deepEqual(ranOut.errors.map((e) => e.message), ["the evaluation failed: the scripted responses ran out after 1 steps"]);
    const planRanOut = await client.runLoop({ question: "q", tools: loopTools, llmConfig, plan: true, mockResponses: [] });
    assert.equal(planRanOut.terminationReason, "failure");
    assert.equal(planRanOut.answer, "the scripted responses ran out after 0 steps");
  });

  test("through the provider: the key goes with the plan and the evaluation, and their tokens are counted", async () => {
    const { tools: loopTools } = tools();
    const seen = upstream.requests.length;
    upstream.script.push(
      completion(planned(2)),
      completion("Thought: Known.\nFinal Answer: a session object"),
      completion(scored(8)),
    );
    const result = await client.runLoop({
      question: "What does login return?",
      tools: loopTools,
      llmConfig: { ...llmConfig, provider: "openai" },
      key: "sk-test-0000000000000000000000",
      plan: true,
      reflect: true,
      // Plain answers carry the mock's usage (100 + 12) each: three calls, three times that.
      stream: false,
    });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.answer, "a session object");
    const sent = upstream.requests.slice(seen);
    assert.equal(sent.length, 3);
    assert.ok(sent.every((r) => r.raw.headers["authorization"] === "Bearer sk-test-0000000000000000000000"));
    // The step was sent the plan; the evaluation was shown the answer, and the plan it followed.
    assert.match(JSON.stringify(sent[1]?.body), /execution-plan\.json/);
    assert.match(JSON.stringify(sent[1]?.body), /Read where login is/);
    assert.match(JSON.stringify(sent[2]?.body), /a session object/);
    assert.match(JSON.stringify(sent[2]?.body), /Read where login is/);
    assert.deepEqual(result.usage, { promptTokens: 300, completionTokens: 36 });
    assert.equal(result.evaluations[0]?.evaluation.needs_retry, false);
  });
});
