// runLoop against the real server with a scripted model (mock_response per step): a three-step
// loop with parallel calls answered by id, and each way a loop ends.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ReactStepClient, type LoopEvent, type LoopTool } from "../src/index.js";
import { startService, type Service } from "./support/server.js";

const llmConfig = { modelName: "gpt-4o", tokenLimit: 16000, reservedOutputTokens: 1000 };

/** Tools that record their calls and answer from a small fake workspace. */
function workspace() {
  const calls: { tool: string; args: Record<string, unknown>; toolCallId: string | undefined }[] = [];
  const files: Record<string, string> = {
    "src/auth.ts": "export function login(user: string) { return session(user); }\n",
    "src/session.ts": "export function session(user: string) { return { user }; }\n",
  };
  const tools: Record<string, LoopTool> = {
    read_file: {
      description: "Read a file of the workspace",
      parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
      run: async (args, context) => {
        calls.push({ tool: "read_file", args, toolCallId: context.toolCallId });
        const text = files[String(args["path"])];
        if (text === undefined) {
          throw new Error(`no such file: ${String(args["path"])}`);
        }
        return text;
      },
    },
    search: {
      description: "Search the workspace for a text",
      parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
      run: async (args, context) => {
        calls.push({ tool: "search", args, toolCallId: context.toolCallId });
        const query = String(args["query"]);
        return Object.entries(files)
          .filter(([, text]) => text.includes(query))
          .map(([path]) => path)
          .join("\n");
      },
    },
  };
  return { calls, tools };
}

describe("runLoop", () => {
  let service: Service;
  let client: ReactStepClient;
  before(async () => {
    service = await startService();
    client = new ReactStepClient({ baseUrl: service.url });
  });
  after(async () => {
    await service.stop();
  });

  test("three scripted steps: a call, two parallel calls answered by their ids, then the answer", async () => {
    const { calls, tools } = workspace();
    const events: LoopEvent[] = [];
    const result = await client.runLoop({
      question: "How does login make a session?",
      tools,
      llmConfig,
      maxIterations: 5,
      onEvent: (event) => events.push(event),
      mockResponses: [
        'Thought: Find where login is defined.\nAction: search(query="function login")',
        "Thought: Read both files at once.\n[read_file(path='src/auth.ts'), read_file(path='src/session.ts')]",
        "Thought: login calls session, which wraps the user.\nFinal Answer: login(user) returns session(user), an object holding the user.",
      ],
    });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.success, true);
    assert.equal(result.answer, "login(user) returns session(user), an object holding the user.");
    assert.equal(result.iterations, 3);
    assert.deepEqual(result.toolUsage, { search: 1, read_file: 2 });
    assert.deepEqual(
      result.steps.map((s) => [s.iteration, s.tool, s.args, s.observation, s.isError]),
      [
        [1, "search", { query: "function login" }, "src/auth.ts", false],
        [2, "read_file", { path: "src/auth.ts" }, "export function login(user: string) { return session(user); }\n", false],
        [2, "read_file", { path: "src/session.ts" }, "export function session(user: string) { return { user }; }\n", false],
      ],
    );
    // Every call had an id, the tools saw it, and the observation in the history answers it.
    assert.deepEqual(
      calls.map((c) => c.toolCallId),
      result.steps.map((s) => s.toolCallId),
    );
    const ids = result.steps.map((s) => s.toolCallId);
    assert.equal(new Set(ids).size, 3);
    const history = result.history;
    const parallel = history.find((t) => t.role === "assistant" && (t.toolCalls?.length ?? 0) === 2);
    assert.ok(parallel, JSON.stringify(history));
    assert.deepEqual(parallel.toolCalls?.map((c) => c.id), ids.slice(1));
    const observations = history.filter((t) => t.role === "tool_observation");
    assert.deepEqual(
      observations.map((t) => t.tool_call_id),
      ids,
    );
    assert.equal(history.at(-1)?.role, "assistant");
    assert.equal(history.at(-1)?.content, result.answer);
    // The thought streamed in pieces that add up to each step's thought.
    for (const iteration of [1, 2, 3]) {
      const pieces = events.flatMap((e) => (e.type === "thought_delta" && e.iteration === iteration ? [e.delta] : []));
      const whole = events.find((e) => e.type === "thought" && e.iteration === iteration);
      assert.ok(whole?.type === "thought");
      assert.equal(pieces.join(""), whole.thought);
    }
    assert.deepEqual(
      events.filter((e) => e.type === "action").map((e) => (e.type === "action" ? e.tool : "")),
      ["search", "read_file", "read_file"],
    );
  });

  test("the same step without streaming gives the same result", async () => {
    const { tools } = workspace();
    const result = await client.runLoop({
      question: "What does session return?",
      tools,
      llmConfig,
      stream: false,
      mockResponses: [
        "Thought: Read it.\nAction: read_file(path='src/session.ts')",
        "Thought: It is plain.\nFinal Answer: an object holding the user",
      ],
    });
    assert.equal(result.terminationReason, "success");
    assert.equal(result.iterations, 2);
    assert.equal(result.steps[0]?.observation, "export function session(user: string) { return { user }; }\n");
  });

  test("a failing tool is told to the model as an error, and the loop goes on", async () => {
    const { tools } = workspace();
    const result = await client.runLoop({
      question: "Read a missing file",
      tools,
      llmConfig,
      mockResponses: [
        "Thought: Try it.\nAction: read_file(path='src/missing.ts')",
        "Thought: It does not exist.\nFinal Answer: there is no such file",
      ],
    });
    assert.equal(result.terminationReason, "success");
    assert.equal(result.steps[0]?.isError, true);
    assert.equal(result.steps[0]?.observation, "no such file: src/missing.ts");
    assert.deepEqual(result.errors.map((e) => e.source), ["read_file"]);
    const observation = result.history.find((t) => t.role === "tool_observation");
    assert.equal(observation?.is_error, true);
    assert.equal(observation?.toolResult?.success, false);
  });

  test("the same call three times in a row is a stalled loop", async () => {
    const { calls, tools } = workspace();
    const same = "Thought: Again.\nAction: search(query='login')";
    const result = await client.runLoop({
      question: "Loop",
      tools,
      llmConfig,
      stallThreshold: 3,
      mockResponses: [same, same, same, same],
    });
    assert.equal(result.terminationReason, "stalled");
    assert.equal(result.success, false);
    assert.equal(result.iterations, 3);
    assert.equal(calls.length, 2);
  });

  for (const stream of [true, false]) {
    test(`the service's loop guard ends a repeating loop as stalled (stream: ${stream})`, async () => {
      const { calls, tools } = workspace();
      const same = "Thought: Again.\nAction: search(query='login')";
      const result = await client.runLoop({
        question: "Loop",
        tools,
        llmConfig,
        stream,
        // By default the guard acts before the client's own count.
        ...(stream ? { stallThreshold: 100 } : {}),
        mockResponses: Array<string>(8).fill(same),
      });
      assert.equal(result.terminationReason, "stalled", result.answer);
      assert.equal(result.success, false);
      assert.equal(calls.length, 5);
      const error = result.errors[0]?.error;
      assert.equal(error?.type, "loop_detected");
      assert.equal(error?.status, 422);
      assert.equal(error?.retryable, false);
      assert.equal(error?.loopGuard?.action, "stopped");
      assert.deepEqual(error?.loopGuard?.repeated, [{ tool_name: "search", tool_args: { query: "login" } }]);
      assert.match(result.answer, /^loop_detected: /);
    });
  }

  test("a model that still calls a tool on the last step ends the loop with max_iterations", async () => {
    const { tools } = workspace();
    const result = await client.runLoop({
      question: "Never done",
      tools,
      llmConfig,
      maxIterations: 2,
      mockResponses: ["Thought: One.\nAction: search(query='a')", "Thought: Two.\nAction: search(query='b')"],
    });
    assert.equal(result.terminationReason, "max_iterations");
    assert.equal(result.success, false);
    assert.equal(result.iterations, 2);
  });

  test("an answer the last step asked for (forced_final) ends the loop with max_iterations", async () => {
    const { tools } = workspace();
    const result = await client.runLoop({
      question: "Where is it?",
      tools,
      llmConfig,
      maxIterations: 2,
      mockResponses: ["Thought: One.\nAction: search(query='a')", "Thought: I must answer.\nFinal Answer: probably a.ts"],
    });
    assert.equal(result.terminationReason, "max_iterations");
    assert.equal(result.success, false);
    assert.equal(result.answer, "probably a.ts");
  });

  test("finalAnswerSchema asks for a JSON answer and returns it parsed", async () => {
    const { tools } = workspace();
    const result = await client.runLoop({
      question: "Where is it?",
      tools,
      llmConfig,
      finalAnswerSchema: { type: "object", required: ["file"], properties: { file: { type: "string" } } },
      mockResponses: ['Thought: Found.\nFinal Answer: {"file": "a.ts"}'],
    });
    assert.equal(result.terminationReason, "success");
    assert.deepEqual(result.answerJson, { file: "a.ts" });
    assert.equal(result.answer, '{"file":"a.ts"}');
  });

  test("an answer that gives up is a failure", async () => {
    const { tools } = workspace();
    const result = await client.runLoop({
      question: "Impossible",
      tools,
      llmConfig,
      mockResponses: ["Thought: No way.\nFinal Answer: I cannot complete this task."],
    });
    assert.equal(result.terminationReason, "failure");
    assert.equal(result.answer, "I cannot complete this task.");
  });

  test("a service error is a failure that keeps the error", async () => {
    const { tools } = workspace();
    const result = await client.runLoop({
      question: "Too big",
      tools,
      llmConfig: { modelName: "gpt-4o", tokenLimit: 0, reservedOutputTokens: 1 },
      mockResponses: ["Final Answer: x"],
    });
    assert.equal(result.terminationReason, "failure");
    assert.equal(result.iterations, 0);
    assert.equal(result.errors[0]?.error?.type, "invalid_request");
  });

  test("aborting the signal while a tool runs ends the loop as cancelled", async () => {
    const { tools } = workspace();
    const controller = new AbortController();
    const slow: LoopTool = {
      run: (_args, context) =>
        new Promise((_resolve, reject) => {
          context.signal?.addEventListener("abort", () => reject(new Error("stopped")), { once: true });
          controller.abort();
        }),
    };
    const result = await client.runLoop({
      question: "Cancel me",
      tools: { ...tools, slow },
      llmConfig,
      signal: controller.signal,
      mockResponses: ["Thought: Run the slow one.\nAction: slow()", "Thought: never sent\nFinal Answer: no"],
    });
    assert.equal(result.terminationReason, "cancelled");
    assert.equal(result.iterations, 1);
    assert.equal(result.steps.length, 0);
  });

  test("the calls of one step run at most maxParallelTools at once", async () => {
    // A third call running at once ends every wait: without the bound all five meet at once.
    let running = 0;
    let most = 0;
    let crowded: () => void = () => {};
    const crowd = new Promise<void>((resolve) => (crowded = resolve));
    const tools: Record<string, LoopTool> = {
      crowd: {
        description: "Wait a moment among the others",
        parameters: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] },
        run: async (args) => {
          running += 1;
          most = Math.max(most, running);
          if (running > 2) {
            crowded();
          }
          await Promise.race([crowd, new Promise((resolve) => setTimeout(resolve, 200))]);
          running -= 1;
          return String(args["n"]);
        },
      },
    };
    const result = await client.runLoop({
      question: "Crowd",
      tools,
      llmConfig,
      maxParallelTools: 2,
      mockResponses: [
        "Thought: All.\n[crowd(n=1), crowd(n=2), crowd(n=3), crowd(n=4), crowd(n=5)]",
        "Thought: Done.\nFinal Answer: crowded",
      ],
    });
    assert.equal(result.terminationReason, "success", JSON.stringify(result.errors));
    assert.deepEqual(
      result.steps.map((s) => s.observation),
      ["1", "2", "3", "4", "5"],
    );
    assert.equal(most, 2);
  });
});
