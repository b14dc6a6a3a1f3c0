// stream() against the real server: the events of a streamed step, the same step as step()
// returns, an aborted stream that stops the step upstream, and an error after the stream began.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ReactStepClient,
  ReactStepError,
  type ReactStepRequest,
  type StepResponse,
  type StreamEvent,
} from "../src/index.js";
import { cutShort, hang, startService, startUpstream, type Service, type Upstream } from "./support/server.js";

const offline = { modelName: "gpt-4o", tokenLimit: 8192, reservedOutputTokens: 512 };
const upstreamModel = { ...offline, provider: "openai" as const };
const key = { llmKey: "sk-test-0000000000000000000000" };

async function collect(events: AsyncIterable<StreamEvent>): Promise<StreamEvent[]> {
  const all: StreamEvent[] = [];
  for await (const event of events) {
    all.push(event);
  }
  return all;
}

/**
 * The step without what differs between two requests: the request id, the turns' times, the
 * call id the service makes anew for each step (checked to be the same on the call and its turn),
 * and the timings a stream's terminal event carries (a plain answer has them in its headers).
 */
function comparable(step: StepResponse): unknown {
  const { request_id: _id, server_timing: _timing, ...rest } = step;
  const id = step.action_details?.tool_call_id;
  const turns = step.updated_conversation_history.map(({ timestamp: _t, ...turn }) => turn);
  if (id !== undefined) {
    const last = turns.at(-1);
    assert.equal(last?.toolCall?.id, id);
    return {
      ...rest,
      action_details: { ...step.action_details, tool_call_id: "(made by the service)" },
      updated_conversation_history: [...turns.slice(0, -1), { ...last, toolCall: { ...last?.toolCall, id: "(made by the service)" } }],
    };
  }
  return { ...rest, updated_conversation_history: turns };
}

describe("stream", () => {
  let upstream: Upstream;
  let service: Service;
  let client: ReactStepClient;
  before(async () => {
    upstream = await startUpstream();
    service = await startService({
      REACTSTEP_OPENAI_BASE_URL: upstream.baseUrl,
      REACTSTEP_RETRIES: "0",
      REACTSTEP_STREAM_HEARTBEAT_SECS: "1",
    });
    client = new ReactStepClient({ baseUrl: service.url });
  });
  after(async () => {
    await service.stop();
    await upstream.close();
  });

  for (const [name, mock] of [
    ["an answer", "Thought: The login code lives in the auth module, as the context shows.\nFinal Answer: Login is handled in src/auth.js by login()."],
    ["a proposed call", 'Thought: The login code is what I need to find first.\nAction: code_search(query="login")'],
  ] as const) {
    test(`the events of ${name} add up to the step, and the step is the one step() returns`, async () => {
      const body: ReactStepRequest = {
        session_id: `ts-stream-${name.length}`,
        user_query: "Where is login handled?",
        available_tools_prompt_segment: "- code_search(query) - search the code",
        llm_config: offline,
        mock_response: mock,
      };
      const events = await collect(client.stream(body));
      const last = events.at(-1);
      assert.equal(last?.type, "step", JSON.stringify(events));
      assert.ok(last?.type === "step");
      const streamed = last.step;
      const thought = events.flatMap((e) => (e.type === "thought" ? [e.delta] : [])).join("");
      const answer = events.flatMap((e) => (e.type === "answer" ? [e.delta] : [])).join("");
      // mock_response streams in pieces of 8 bytes: a thought of this length comes in several.
      assert.ok(events.filter((e) => e.type === "thought").length > 1, JSON.stringify(events));
      assert.equal(thought, streamed.thought);
      assert.equal(answer, streamed.direct_response ?? "");
      const plain = await client.step(body);
      assert.deepEqual(comparable(streamed), comparable(plain));
    });
  }

  // The bound turns a step the service never stops into a failure instead of a hang.
  test("an aborted stream rejects with the abort, and the service stops the step and its upstream call", { timeout: 30_000 }, async () => {
    const held = hang("Thought: I will look at the login code before I answer.\n");
    upstream.script.push(held.reply);
    const controller = new AbortController();
    const seen: StreamEvent[] = [];
    const reading = (async () => {
      for await (const event of client.stream(
        { user_query: "Where is login handled?", llm_config: upstreamModel, user_api_keys: key },
        { signal: controller.signal },
      )) {
        seen.push(event);
        if (event.type === "thought") {
          controller.abort();
        }
      }
    })();
    await assert.rejects(reading, (error: unknown) => {
      assert.ok(error instanceof Error);
      assert.equal(error.name, "AbortError");
      return true;
    });
    assert.equal(seen[0]?.type, "thought");
    assert.ok(seen.every((e) => e.type === "thought"), JSON.stringify(seen));
    // The service closes its upstream request once the client has gone; the test waits for it.
    await held.closed;
  });

  test("leaving the loop early closes the stream too, and the service stops the step", { timeout: 30_000 }, async () => {
    const held = hang("Thought: Reading the file first is the way to find it.\n");
    upstream.script.push(held.reply);
    let first: StreamEvent | undefined;
    for await (const event of client.stream({ user_query: "Where?", llm_config: upstreamModel, user_api_keys: key })) {
      first = event;
      break;
    }
    assert.equal(first?.type, "thought");
    await held.closed;
  });

  test("a heartbeat while the model is quiet is no event", { timeout: 30_000 }, async () => {
    // The client's fetch copies what the service sends, to tell when a heartbeat went by; the
    // upstream finishes its answer only then.
    let heartbeat!: () => void;
    const sawHeartbeat = new Promise<void>((resolve) => {
      heartbeat = resolve;
    });
    const watching = new ReactStepClient({
      baseUrl: service.url,
      fetch: async (input, init) => {
        const response = await fetch(input, init);
        if (response.body === null) {
          return response;
        }
        const [mine, theirs] = response.body.tee();
        void (async () => {
          const decoder = new TextDecoder();
          let text = "";
          for await (const piece of mine) {
            text += decoder.decode(piece, { stream: true });
            if (text.includes(": heartbeat\n")) {
              heartbeat();
            }
          }
        })();
        return new Response(theirs, { status: response.status, headers: response.headers });
      },
    });
    upstream.script.push(hang("Thought: Let me think about this for a while.\n", sawHeartbeat, "Final Answer: Done thinking.").reply);
    const events = await collect(watching.stream({ user_query: "Think", llm_config: upstreamModel, user_api_keys: key }));
    assert.deepEqual([...new Set(events.map((e) => e.type))], ["thought", "answer", "step"], JSON.stringify(events));
    const last = events.at(-1);
    assert.ok(last?.type === "step");
    assert.equal(last.step.direct_response, "Done thinking.");
    assert.equal(events.flatMap((e) => (e.type === "answer" ? [e.delta] : [])).join(""), "Done thinking.");
  });

  test("a failure after the stream began is its last event, a ReactStepError with the history echoed", async () => {
    upstream.script.push(cutShort("Thought: I was about to"));
    const history = [{ role: "user" as const, content: "An earlier question" }, { role: "assistant" as const, content: "An earlier answer" }];
    const events = await collect(
      client.stream({ user_query: "And now?", conversation_history: history, llm_config: upstreamModel, user_api_keys: key }),
    );
    const last = events.at(-1);
    assert.equal(last?.type, "error", JSON.stringify(events));
    assert.ok(last?.type === "error");
    assert.ok(last.error instanceof ReactStepError);
    assert.equal(last.error.status, 502);
    assert.ok(["llm_bad_response", "llm_unavailable"].includes(last.error.type), last.error.type);
    assert.deepEqual(
      last.error.updatedConversationHistory.map((t) => [t.role, t.content]),
      history.map((t) => [t.role, t.content]),
    );
  });

  test("a refusal before the stream begins is thrown, not streamed", async () => {
    const events = client.stream({ user_query: "", llm_config: offline, mock_response: "Final Answer: x" });
    await assert.rejects(collect(events), (error: unknown) => {
      assert.ok(error instanceof ReactStepError);
      assert.equal(error.status, 400);
      assert.equal(error.type, "invalid_request");
      assert.ok(error.fields.some((f) => f.field === "user_query"), JSON.stringify(error.fields));
      return true;
    });
  });
});
