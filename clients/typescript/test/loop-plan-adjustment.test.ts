// runLoop's plan adjusted after a failed call, against the real server and a mock upstream model:
// which requests the model got (the plan, the steps, the adjustments), what each adjustment was
// shown (the plan in force and the failed call's observation), and which plan each later step
// carried, all read from the requests the upstream received.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ReactStepClient, type LoopEvent, type LoopOptions, type LoopTool } from "../src/index.js";
import { completion, failure, startService, startUpstream, toolCalls, type Reply, type Service, type Upstream } from "./support/server.js";

const key = "sk-test-0000000000000000000000";
const textMode = { modelName: "gpt-4o", tokenLimit: 16000, reservedOutputTokens: 1000, provider: "openai" as const };
const nativeMode = { ...textMode, tool_mode: "native" as const };

const QUESTION = "What does login return?";
const DONE = "Thought: That is enough.\nFinal Answer: login returns a session.";

/**
 * The words that open a plan request's task, those that make it an adjustment (src/step/plan.rs),
 * and those that open an evaluation's (src/step/evaluation.rs).
 */
const PLANNING = "Make a plan for the task below";
const ADJUSTING = "This is an adjustment";
const EVALUATING = "Evaluate the candidate answer below";

/**
 * A plan's output with one step, `description`, reading `path`: each plan of a test has its own
 * description, so where it was sent tells which plan was in force.
 */
function planOf(description: string, path = "src/auth.ts"): string {
  const plan = {
    complexity: "simple",
    steps: [{ step_number: 1, description, tool_name: "read_file", parameters: { path } }],
    estimated_iterations: 2,
  };
  return `Thought: Plan it.\nFinal Answer: ${JSON.stringify(plan)}`;
}

/** A step that reads `path`. */
function reads(path: string): string {
  return `Thought: Read ${path}.\nAction: read_file(path='${path}')`;
}

/** read_file over two files (any other path throws: a failed call), and write_file, which needs approval. */
function workspace(): { read: string[]; tools: Record<string, LoopTool> } {
  const files: Record<string, string> = { "src/auth.ts": "export const login = () => session();\n" };
  const read: string[] = [];
  const tools: Record<string, LoopTool> = {
    read_file: {
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
    write_file: {
      needsApproval: true,
      parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
      run: async () => "written",
    },
  };
  return { read, tools };
}

/** What one request to the upstream was: the plan, an adjustment of it, an evaluation, or a step. */
type Kind = "plan" | "adjustment" | "evaluation" | "step";

interface Sent {
  kind: Kind;
  /** The request's whole body as JSON: the plan a step carried is in it as text. */
  text: string;
  /** The last user message: the plan request's framed task. */
  lastUser: string;
  /** The messages before the last user message, one after another: the history it was sent. */
  before: string;
}

function sentOf(body: Record<string, unknown>): Sent {
  const messages = (body["messages"] ?? []) as { role: string; content: unknown }[];
  const last = messages.map((m) => m.role).lastIndexOf("user");
  const lastUser = String(messages[last]?.content ?? "");
  const kind: Kind = lastUser.includes(EVALUATING)
    ? "evaluation"
    : !lastUser.includes(PLANNING)
      ? "step"
      : lastUser.includes(ADJUSTING)
        ? "adjustment"
        : "plan";
  return { kind, text: JSON.stringify(body), lastUser, before: messages.slice(0, Math.max(0, last)).map((m) => String(m.content)).join("\n") };
}

describe("runLoop's plan adjusted after a failed call", () => {
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

  /**
   * Runs the loop (with `plan`, plain steps) with the model's replies scripted (a string is a
   * plain completion); the result, its events, and each request the upstream received.
   */
  async function run(replies: (string | Reply)[], options: Partial<LoopOptions> = {}) {
    upstream.script.length = 0;
    upstream.script.push(...replies.map((reply) => (typeof reply === "string" ? completion(reply) : reply)));
    const first = upstream.requests.length;
    const events: LoopEvent[] = [];
    const result = await client.runLoop({
      question: QUESTION,
      tools: workspace().tools,
      llmConfig: textMode,
      key,
      plan: true,
      stream: false,
      onEvent: (event) => events.push(event),
      ...options,
    });
    const sent = upstream.requests.slice(first).map((request) => sentOf(request.body));
    // Every reply scripted was asked for: a test that scripted more than ran would prove less.
    assert.equal(upstream.script.length, 0, `replies left unasked: ${sent.map((s) => s.kind).join(", ")}`);
    return { result, events, sent };
  }

  test("a failed call has the plan adjusted to its observation, and the next steps carry the adjusted plan", async () => {
    const { read, tools } = workspace();
    const { result, events, sent } = await run(
      [planOf("Open the login module", "src/login.ts"), reads("src/login.ts"), planOf("Open the auth module instead"), reads("src/auth.ts"), DONE],
      { tools },
    );
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(read, ["src/login.ts", "src/auth.ts"]);
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "adjustment", "step", "step"]);
    // The adjustment was shown the plan in force and what the failed call returned.
    const adjustment = sent[2]!.lastUser;
    assert.match(adjustment, /Earlier plan:\n\{.*Open the login module.*\}\n\nLatest observation:\nno such file: src\/login\.ts\n\nTask: What does login return\?\n/s);
    // The step before carried the first plan; the steps after, the adjusted one only.
    assert.match(sent[1]!.text, /execution-plan\.json/);
    assert.match(sent[1]!.text, /Open the login module/);
    assert.doesNotMatch(sent[1]!.text, /Open the auth module instead/);
    for (const step of [sent[3]!, sent[4]!]) {
      assert.match(step.text, /execution-plan\.json/);
      assert.match(step.text, /Open the auth module instead/);
      assert.doesNotMatch(step.text, /Open the login module/);
    }
    // The result keeps the first plan and the adjustment, with the call it answered.
    assert.equal(result.plan?.steps[0]?.description, "Open the login module");
    assert.equal(result.planAdjustments.length, 1);
    const [made] = result.planAdjustments;
    assert.deepEqual([made?.iteration, made?.tool, made?.observation], [1, "read_file", "no such file: src/login.ts"]);
    assert.equal(made?.toolCallId, result.steps[0]?.toolCallId);
    assert.deepEqual(made?.plan.steps.map((s) => [s.description, s.parameters]), [["Open the auth module instead", { path: "src/auth.ts" }]]);
    // Five model calls, each 100 + 12 tokens: the adjustment's are counted.
    assert.deepEqual(result.usage, { promptTokens: 500, completionTokens: 60 });
    // The events: the failed observation, then the adjustment asked for and made, then the next step.
    const order = events
      .filter((e) => ["observation", "adjusting_plan", "plan_adjustment", "waiting"].includes(e.type))
      .map((e) => `${e.type}@${e.iteration}`);
    assert.deepEqual(order, ["waiting@1", "observation@1", "adjusting_plan@1", "plan_adjustment@1", "waiting@2", "observation@2", "waiting@3"]);
    const asking = events.find((e) => e.type === "adjusting_plan");
    assert.ok(asking?.type === "adjusting_plan");
    assert.deepEqual([asking.tool, asking.observation], ["read_file", "no such file: src/login.ts"]);
    const announced = events.find((e) => e.type === "plan_adjustment");
    assert.ok(announced?.type === "plan_adjustment");
    const { type: _type, ...announcedAdjustment } = announced;
    assert.deepEqual(announcedAdjustment, made);
  });

  test("a successful call has no plan adjusted", async () => {
    const { result, events, sent } = await run([planOf("Open the auth module"), reads("src/auth.ts"), DONE]);
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "step"]);
    assert.deepEqual(result.planAdjustments, []);
    assert.ok(!events.some((e) => e.type === "adjusting_plan" || e.type === "plan_adjustment"));
  });

  test("without plan a failed call asks for no plan at all", async () => {
    const { result, events, sent } = await run([reads("src/login.ts"), DONE], { plan: false });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.steps[0]?.isError, true);
    assert.deepEqual(sent.map((s) => s.kind), ["step", "step"]);
    assert.doesNotMatch(sent[1]!.text, /execution-plan\.json/);
    assert.equal(result.plan, undefined);
    assert.deepEqual(result.planAdjustments, []);
    assert.ok(!events.some((e) => e.type === "adjusting_plan" || e.type === "plan_adjustment"));
  });

  test("a denied call is a failed one: the plan is adjusted to the denial", async () => {
    const write = "Thought: Save it.\nAction: write_file(path='notes.md')";
    const { result, sent } = await run([planOf("Save the notes"), write, planOf("Answer without saving"), DONE], {
      approve: () => ({ decision: "deny", reason: "not in this workspace" }),
    });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "adjustment", "step"]);
    assert.equal(result.steps[0]?.approval, "denied");
    assert.match(sent[2]!.lastUser, /Latest observation:\n[^\n]*not in this workspace/);
    assert.equal(result.planAdjustments[0]?.observation, result.steps[0]?.observation);
    assert.match(sent[3]!.text, /Answer without saving/);
    assert.doesNotMatch(sent[3]!.text, /Save the notes/);
  });

  test("at most 3 adjustments a run: a 4th failed call asks for no plan, and the third adjusted plan stays", async () => {
    const { result, events, sent } = await run([
      planOf("Plan zero"),
      reads("a.ts"),
      planOf("Plan one"),
      reads("b.ts"),
      planOf("Plan two"),
      reads("c.ts"),
      planOf("Plan three"),
      reads("d.ts"),
      DONE,
    ]);
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(result.steps.map((s) => s.isError), [true, true, true, true]);
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "adjustment", "step", "adjustment", "step", "adjustment", "step", "step"]);
    // The second adjustment had the history its step was sent: the first call, not its own,
    // which it was shown as the latest observation.
    assert.match(sent[4]!.before, /Action: read_file\(path="a\.ts"\)/);
    assert.doesNotMatch(sent[4]!.before, /b\.ts/);
    assert.match(sent[4]!.lastUser, /Latest observation:\nno such file: b\.ts\n/);
    // Each adjustment was made from the plan in force before it.
    assert.deepEqual(
      [sent[2]!, sent[4]!, sent[6]!].map((s) => s.lastUser.match(/Plan (zero|one|two|three)/g)),
      [["Plan zero"], ["Plan one"], ["Plan two"]],
    );
    assert.deepEqual(
      result.planAdjustments.map((a) => [a.iteration, a.observation, a.plan.steps[0]?.description]),
      [
        [1, "no such file: a.ts", "Plan one"],
        [2, "no such file: b.ts", "Plan two"],
        [3, "no such file: c.ts", "Plan three"],
      ],
    );
    // The steps after the third adjustment, the 4th failure's included, carry the third plan.
    for (const step of [sent[7]!, sent[8]!]) {
      assert.match(step.text, /Plan three/);
      assert.doesNotMatch(step.text, /Plan (zero|one|two)\b/);
    }
    assert.equal(events.filter((e) => e.type === "adjusting_plan").length, 3);
    assert.deepEqual(result.errors.map((e) => e.source), ["read_file", "read_file", "read_file", "read_file"]);
  });

  test("a plan request that fails leaves the plan as it was and the loop going on; the next failure tries again", async () => {
    const { result, events, sent } = await run([
      planOf("Plan zero"),
      reads("a.ts"),
      failure(500),
      reads("b.ts"),
      planOf("Plan one"),
      DONE,
    ]);
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.answer, "login returns a session.");
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "adjustment", "step", "adjustment", "step"]);
    // The step after the failed request carried the old plan; the one after the second, the new.
    assert.match(sent[3]!.text, /Plan zero/);
    assert.match(sent[4]!.lastUser, /Earlier plan:\n\{.*Plan zero.*\}\n\nLatest observation:\nno such file: b\.ts/s);
    assert.match(sent[5]!.text, /Plan one/);
    assert.doesNotMatch(sent[5]!.text, /Plan zero/);
    // Only the adjustment made is kept; the failure is said in errors, after its call's.
    assert.deepEqual(result.planAdjustments.map((a) => [a.iteration, a.plan.steps[0]?.description]), [[2, "Plan one"]]);
    assert.deepEqual(result.errors.map((e) => e.source), ["read_file", "service", "read_file"]);
    const failed = result.errors[1];
    assert.match(failed?.message ?? "", /^the plan adjustment failed: \w+: /);
    assert.equal(failed?.error?.status, 502);
    // Asked for twice, made once.
    assert.deepEqual(
      events.filter((e) => e.type === "adjusting_plan" || e.type === "plan_adjustment").map((e) => `${e.type}@${e.iteration}`),
      ["adjusting_plan@1", "adjusting_plan@2", "plan_adjustment@2"],
    );
  });

  test("a plan request that failed is one of the 3: two adjustments are made after it, and a 4th failed call asks for none", async () => {
    const { result, sent } = await run([
      planOf("Plan zero"),
      reads("a.ts"),
      failure(500),
      reads("b.ts"),
      planOf("Plan one"),
      reads("c.ts"),
      planOf("Plan two"),
      reads("d.ts"),
      DONE,
    ]);
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(sent.map((s) => s.kind), [
      "plan",
      "step",
      "adjustment",
      "step",
      "adjustment",
      "step",
      "adjustment",
      "step",
      "step",
    ]);
    assert.deepEqual(result.planAdjustments.map((a) => a.plan.steps[0]?.description), ["Plan one", "Plan two"]);
    assert.match(sent[8]!.text, /Plan two/);
  });

  test("with reflect, the evaluation is given the adjusted plan", async () => {
    const evaluation = { completeness_score: 9, quality_score: 8, missing_info: [], suggestions: [], needs_retry: false };
    const { result, sent } = await run(
      [planOf("Plan zero"), reads("a.ts"), planOf("Plan one"), DONE, `Thought: Scored.\nFinal Answer: ${JSON.stringify(evaluation)}`],
      { reflect: true },
    );
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "adjustment", "step", "evaluation"]);
    assert.match(sent[4]!.lastUser, /The plan the work followed:\n\{.*Plan one.*\}\n/s);
    assert.doesNotMatch(sent[4]!.lastUser, /Plan zero/);
    assert.equal(result.evaluations[0]?.evaluation.completeness_score, 9);
  });

  test("two failed calls in one step have the plan adjusted twice, in their order", async () => {
    const { result, sent } = await run(
      [
        planOf("Plan zero"),
        toolCalls([
          { id: "call_a", name: "read_file", arguments: { path: "a.ts" } },
          { id: "call_b", name: "read_file", arguments: { path: "b.ts" } },
        ]),
        planOf("Plan one"),
        planOf("Plan two"),
        DONE,
      ],
      { llmConfig: nativeMode },
    );
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "adjustment", "adjustment", "step"]);
    assert.match(sent[2]!.lastUser, /Earlier plan:\n\{.*Plan zero.*\}\n\nLatest observation:\nno such file: a\.ts\n/s);
    assert.match(sent[3]!.lastUser, /Earlier plan:\n\{.*Plan one.*\}\n\nLatest observation:\nno such file: b\.ts\n/s);
    assert.deepEqual(
      result.planAdjustments.map((a) => [a.toolCallId, a.plan.steps[0]?.description]),
      [
        ["call_a", "Plan one"],
        ["call_b", "Plan two"],
      ],
    );
    assert.match(sent[4]!.text, /Plan two/);
    assert.doesNotMatch(sent[4]!.text, /Plan (zero|one)\b/);
  });

  test("scripted: each adjustment takes the next output; one run out leaves the plan and the loop going on", async () => {
    const { tools } = workspace();
    const adjusted = await client.runLoop({
      question: QUESTION,
      tools,
      llmConfig: textMode,
      plan: true,
      mockResponses: [planOf("Plan zero"), reads("a.ts"), planOf("Plan one"), DONE],
    });
    assert.equal(adjusted.terminationReason, "success", adjusted.answer);
    assert.deepEqual(adjusted.planAdjustments.map((a) => a.plan.steps[0]?.description), ["Plan one"]);
    // The plan's output went to the adjustment, not to a step: two steps ran.
    assert.equal(adjusted.iterations, 2);
    const ranOut = await client.runLoop({
      question: QUESTION,
      tools,
      llmConfig: textMode,
      plan: true,
      mockResponses: [planOf("Plan zero"), reads("a.ts")],
    });
    assert.deepEqual(ranOut.planAdjustments, []);
    assert.deepEqual(ranOut.errors.map((e) => e.message), ["no such file: a.ts", "the plan adjustment failed: the scripted responses ran out after 2 steps"]);
    // The loop went on to the next step, which found the script spent.
    assert.equal(ranOut.terminationReason, "failure");
    assert.equal(ranOut.answer, "the scripted responses ran out after 2 steps");
    assert.equal(ranOut.iterations, 1);
  });

  test("aborting while the plan is adjusted ends the loop as cancelled, with no step after", async () => {
    const controller = new AbortController();
    // The adjustment's model call never answers: the loop leaves it only by the abort.
    const held: Reply = () => controller.abort();
    const { result, sent } = await run([planOf("Plan zero"), reads("a.ts"), held], { signal: controller.signal });
    assert.equal(result.terminationReason, "cancelled", result.answer);
    assert.deepEqual(sent.map((s) => s.kind), ["plan", "step", "adjustment"]);
    assert.deepEqual(result.planAdjustments, []);
    assert.ok(!result.errors.some((e) => e.source === "service"), JSON.stringify(result.errors));
  });
});
