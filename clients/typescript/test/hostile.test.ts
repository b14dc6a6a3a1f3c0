// A service that answers what the contract does not allow (or lies about the steps left): the
// client ends with a ReactStepError, or the loop with a documented termination, never a
// TypeError, a RangeError, a tool run with what is not an object, or a loop past its limit.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { ReactStepClient, type LoopTool } from "../src/index.js";
import { thrown } from "./support/thrown.js";

const llmConfig = { modelName: "gpt-4o", tokenLimit: 16000, reservedOutputTokens: 1000 };
const request = { user_query: "q", llm_config: llmConfig };

/** A client whose service answers every request with `answer(n)`, n counting from 1. */
function served(answer: (n: number) => Response): { client: ReactStepClient; asked: () => number } {
  let n = 0;
  const client = new ReactStepClient({
    baseUrl: "http://reactstep.invalid",
    fetch: async () => answer(++n),
  });
  return { client, asked: () => n };
}

const json = (body: unknown) => new Response(JSON.stringify(body), { headers: { "content-type": "application/json" } });
const events = (text: string) => new Response(text, { headers: { "content-type": "text/event-stream" } });

/** A step proposing `tool` with `args`, the service saying `left` steps remain. */
function proposal(tool: string, args: unknown, left: number) {
  return {
    session_id: "s",
    request_id: "r",
    status: "action_proposed",
    thought: "t",
    action_details: { tool_name: tool, tool_args: args, raw_action_string: "", tool_call_id: "c" },
    direct_response: null,
    updated_conversation_history: [{ role: "user", content: "q" }],
    iterations_remaining: left,
    termination_reason: null,
    usage: null,
    warnings: [],
    context_report: null,
    conversation_summary: null,
    prompt: null,
    error: null,
  };
}

async function drained(client: ReactStepClient): Promise<unknown[]> {
  const seen: unknown[] = [];
  for await (const event of client.stream(request)) {
    seen.push(event);
  }
  return seen;
}

describe("a hostile service", () => {
  test("JSON nested past the parser's depth is an unreadable_response", async () => {
    const deep = "[".repeat(200_000) + "]".repeat(200_000);
    const { client } = served(() => new Response(deep, { headers: { "content-type": "application/json" } }));
    assert.equal((await thrown(client.step(request))).type, "unreadable_response");
  });

  test("an event whose data is null, or of the wrong type, is an unreadable_response", async () => {
    for (const text of [
      "event: thought\ndata: null\n\n",
      "event: answer\ndata: {\"delta\": 5}\n\n",
      "event: error\ndata: null\n\n",
      "event: error\ndata: {\"error\": {\"type\": 5, \"message\": {}}}\n\n",
      "event: step\ndata: null\n\n",
    ]) {
      const { client } = served(() => events(text));
      assert.equal((await thrown(drained(client))).type, "unreadable_response", text);
    }
  });

  test("a step without its history or with a null body ends the loop as a failure, no tool run", async () => {
    const broken = { ...proposal("echo", { text: "x" }, 5), updated_conversation_history: undefined };
    for (const answer of [json(null), json(broken), json({ ...proposal("echo", {}, 5), parallel_actions: "x" })]) {
      let ran = 0;
      const tools: Record<string, LoopTool> = { echo: { run: async () => String(++ran) } };
      const { client } = served(() => answer.clone());
      const result = await client.runLoop({ question: "q", tools, llmConfig, stream: false });
      assert.equal(result.terminationReason, "failure");
      assert.equal(ran, 0);
    }
  });

  test("a service that never counts down cannot run the loop past maxIterations", async () => {
    let ran = 0;
    const tools: Record<string, LoopTool> = { echo: { run: async () => String(++ran) } };
    const { client, asked } = served((n) => json(proposal("echo", { text: `call ${n}` }, 99)));
    const result = await client.runLoop({ question: "q", tools, llmConfig, stream: false, maxIterations: 3 });
    assert.equal(result.terminationReason, "max_iterations");
    assert.equal(result.iterations, 3);
    assert.equal(asked(), 3);
    assert.equal(ran, 3);
  });

  test("arguments that are not an object, and names of Object.prototype, run no tool", async () => {
    let ran = 0;
    const tools: Record<string, LoopTool> = { echo: { run: async () => String(++ran) } };
    const calls: [string, unknown][] = [
      ["echo", "rm -rf /"],
      ["echo", null],
      ["constructor", {}],
      ["__proto__", {}],
      ["toString", {}],
    ];
    const { client } = served((n) => json(proposal(...calls[n - 1]!, n < calls.length ? 9 : 0)));
    const result = await client.runLoop({ question: "q", tools, llmConfig, stream: false, maxIterations: 10 });
    assert.equal(ran, 0);
    const observations = result.steps.map((step) => step.observation);
    assert.deepEqual(observations.slice(0, 2), [
      "the arguments of echo are not a JSON object",
      "the arguments of echo are not a JSON object",
    ]);
    assert.deepEqual(observations.slice(2), [
      "there is no tool named constructor",
      "there is no tool named __proto__",
      "there is no tool named toString",
    ]);
    assert.deepEqual(Object.entries(result.toolUsage), [
      ["echo", 2],
      ["constructor", 1],
      ["__proto__", 1],
      ["toString", 1],
    ]);
  });
});
