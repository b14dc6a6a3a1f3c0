// runLoop's approval of calls to tools marked `needsApproval`, against the real server and a mock
// upstream model: what the model proposed, what the approver was asked and answered, what ran,
// and what the model was told, read from the requests the upstream received.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ReactStepClient,
  type ApprovalDecision,
  type ApprovalRequest,
  type LoopEvent,
  type LoopOptions,
  type LoopTool,
} from "../src/index.js";
import { completion, startService, startUpstream, toolCalls, type Reply, type Service, type Upstream } from "./support/server.js";

const key = "sk-test-0000000000000000000000";
const textMode = { modelName: "gpt-4o", tokenLimit: 16000, reservedOutputTokens: 1000, provider: "openai" as const };
const nativeMode = { ...textMode, tool_mode: "native" as const };

/** A loop that ignored the abort would wait on its approver for ever: this fails it instead. */
const WAIT_MS = 10_000;

const WRITE = "Thought: Save the note.\nAction: write_file(path='notes.md', text='hello')";
const DONE = "Thought: That is all.\nFinal Answer: done";

interface Run {
  tool: string;
  args: Record<string, unknown>;
  toolCallId: string | undefined;
}

/** A workspace of notes: read_file runs freely, write_file needs approval. */
function notes() {
  const runs: Run[] = [];
  const files: Record<string, string> = { "notes.md": "old\n" };
  const tools: Record<string, LoopTool> = {
    read_file: {
      parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
      run: async (args, context) => {
        runs.push({ tool: "read_file", args, toolCallId: context.toolCallId });
        return files[String(args["path"])] ?? `no such file: ${String(args["path"])}`;
      },
    },
    write_file: {
      needsApproval: true,
      parameters: {
        type: "object",
        properties: { path: { type: "string" }, text: { type: "string" } },
        required: ["path", "text"],
      },
      run: async (args, context) => {
        runs.push({ tool: "write_file", args, toolCallId: context.toolCallId });
        const text = String(args["text"]);
        files[String(args["path"])] = text;
        return `wrote ${text.length} characters to ${String(args["path"])}`;
      },
    },
  };
  return { runs, files, tools };
}

/** An approver answering with `decide`, keeping every request it was asked. */
function approver(decide: (request: ApprovalRequest, index: number) => unknown) {
  const asked: ApprovalRequest[] = [];
  const approve = (request: ApprovalRequest): ApprovalDecision | Promise<ApprovalDecision> => {
    asked.push(request);
    return decide(request, asked.length - 1) as ApprovalDecision;
  };
  return { asked, approve };
}

type Message = { role: string; content: string | null; tool_call_id?: string };

describe("runLoop's approval", () => {
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
   * Runs the loop with the model's replies scripted (a string is a plain completion); returns
   * the result, its events, and the messages of each request the upstream received.
   */
  async function run(replies: (string | Reply)[], options: Partial<LoopOptions> & Pick<LoopOptions, "tools">) {
    upstream.script.length = 0;
    upstream.script.push(...replies.map((reply) => (typeof reply === "string" ? completion(reply) : reply)));
    const first = upstream.requests.length;
    const events: LoopEvent[] = [];
    const result = await client.runLoop({
      question: "Save hello in notes.md",
      llmConfig: textMode,
      key,
      onEvent: (event) => events.push(event),
      ...options,
    });
    const sent = upstream.requests.slice(first).map((request) => request.body["messages"] as Message[]);
    return { result, events, sent };
  }

  /** The last message of a request: where the observations of the step before it are. */
  function lastContent(messages: Message[] | undefined): string {
    return String(messages?.at(-1)?.content);
  }

  test("tools not marked needsApproval never ask, even beside a marked one in the same step", async () => {
    const { runs, tools } = notes();
    const { asked, approve } = approver(() => ({ decision: "approve" }));
    const read = await run(["Thought: Look first.\nAction: read_file(path='notes.md')", DONE], { tools, approve });
    assert.equal(read.result.terminationReason, "success", read.result.answer);
    assert.equal(asked.length, 0);
    assert.equal(runs.length, 1);
    assert.equal("approval" in read.result.steps[0]!, false);
    assert.equal(read.events.some((e) => e.type === "approval"), false);

    const both = await run(
      [
        toolCalls([
          { id: "call_read", name: "read_file", arguments: { path: "notes.md" } },
          { id: "call_write", name: "write_file", arguments: { path: "notes.md", text: "hello" } },
        ]),
        DONE,
      ],
      { tools, approve, llmConfig: nativeMode },
    );
    assert.equal(both.result.terminationReason, "success", both.result.answer);
    assert.deepEqual(asked.map((r) => [r.tool, r.toolCallId]), [["write_file", "call_write"]]);
    assert.deepEqual(both.result.steps.map((s) => s.approval), [undefined, "approved"]);
    assert.deepEqual(runs.slice(1).map((r) => r.tool), ["read_file", "write_file"]);
  });

  test("approve: the call runs as proposed, after the approver was asked with its id, tool, arguments, iteration and signal", async () => {
    const { runs, files, tools } = notes();
    const { asked, approve } = approver(() => ({ decision: "approve" }));
    const controller = new AbortController();
    const again = "Thought: And once more.\nAction: write_file(path='notes.md', text='hello again')";
    const { result, events, sent } = await run([WRITE, again, DONE], { tools, approve, signal: controller.signal });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(
      runs.map((r) => r.args),
      [{ path: "notes.md", text: "hello" }, { path: "notes.md", text: "hello again" }],
    );
    assert.equal(files["notes.md"], "hello again");
    assert.deepEqual(
      asked.map((r) => [r.tool, r.arguments, r.iteration, r.toolCallId]),
      [
        ["write_file", { path: "notes.md", text: "hello" }, 1, result.steps[0]?.toolCallId],
        ["write_file", { path: "notes.md", text: "hello again" }, 2, result.steps[1]?.toolCallId],
      ],
    );
    assert.ok(asked.every((r) => r.signal === controller.signal));
    assert.ok(asked.every((r) => typeof r.toolCallId === "string" && r.toolCallId !== ""));
    assert.deepEqual(result.steps.map((s) => [s.approval, s.isError]), [["approved", false], ["approved", false]]);
    assert.deepEqual(
      events.filter((e) => e.iteration === 1 && ["action", "approval", "observation"].includes(e.type)).map((e) => e.type),
      ["action", "approval", "observation"],
    );
    assert.deepEqual(
      events.flatMap((e) => (e.type === "approval" ? [[e.iteration, e.tool, e.toolCallId, e.decision]] : [])),
      [
        [1, "write_file", result.steps[0]?.toolCallId, "approved"],
        [2, "write_file", result.steps[1]?.toolCallId, "approved"],
      ],
    );
    assert.equal(lastContent(sent[1]), "Observation: wrote 5 characters to notes.md");
  });

  test("an approver that changes the request's arguments in place changes nothing", async () => {
    const { runs, tools } = notes();
    const { approve } = approver((request) => {
      request.arguments["path"] = "/etc/passwd";
      request.arguments["text"] = "evil";
      return { decision: "approve" };
    });
    const { result, events } = await run([WRITE, DONE], { tools, approve });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(runs.map((r) => r.args), [{ path: "notes.md", text: "hello" }]);
    assert.deepEqual(result.steps[0]?.args, { path: "notes.md", text: "hello" });
    const action = events.find((e) => e.type === "action");
    assert.deepEqual(action?.type === "action" ? action.args : undefined, { path: "notes.md", text: "hello" });
  });

  test("deny: the call does not run, and the model reads the denial with its reason", async () => {
    const { runs, files, tools } = notes();
    const { asked, approve } = approver(() => ({ decision: "deny", reason: "notes.md is read-only today" }));
    const { result, events, sent } = await run([WRITE, DONE], { tools, approve });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(result.iterations, 2);
    assert.equal(asked.length, 1);
    assert.equal(runs.length, 0);
    assert.equal(files["notes.md"], "old\n");
    const step = result.steps[0];
    assert.equal(step?.isError, true);
    assert.equal(step?.approval, "denied");
    assert.ok(step?.observation.startsWith("The user denied this call"), step?.observation);
    assert.ok(step?.observation.includes("notes.md is read-only today"), step?.observation);
    const observation = result.history.find((t) => t.role === "tool_observation");
    assert.equal(observation?.content, step?.observation);
    assert.equal(observation?.tool_call_id, step?.toolCallId);
    assert.equal(observation?.is_error, true);
    assert.equal(observation?.toolResult?.success, false);
    assert.equal(lastContent(sent[1]), `Observation: [the tool failed] ${step?.observation}`);
    assert.deepEqual(
      events.flatMap((e) => (e.type === "approval" ? [e.decision] : [])),
      ["denied"],
    );
    assert.deepEqual(result.errors.map((e) => e.source), ["write_file"]);
  });

  test("deny with an empty reason still tells the model the user denied it", async () => {
    const { runs, tools } = notes();
    const { approve } = approver(() => ({ decision: "deny", reason: "  " }));
    const { result, sent } = await run([WRITE, DONE], { tools, approve });
    assert.equal(runs.length, 0);
    assert.equal(result.steps[0]?.observation, "The user denied this call (no reason given).");
    assert.equal(lastContent(sent[1]), "Observation: [the tool failed] The user denied this call (no reason given).");
  });

  test("edit: the call runs with the edited arguments, and the model reads what they gave", async () => {
    const { runs, files, tools } = notes();
    const edited = { path: "drafts/notes.md", text: "hello, edited" };
    const { approve } = approver(() => ({ decision: "edit", arguments: edited }));
    const { result, events, sent } = await run([WRITE, DONE], { tools, approve });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.deepEqual(runs.map((r) => r.args), [edited]);
    assert.equal(files["drafts/notes.md"], "hello, edited");
    assert.equal(files["notes.md"], "old\n");
    assert.deepEqual(result.steps[0]?.args, edited);
    assert.equal(result.steps[0]?.approval, "edited");
    assert.equal(result.steps[0]?.isError, false);
    assert.deepEqual(events.flatMap((e) => (e.type === "approval" ? [e.decision] : [])), ["edited"]);
    // The model is told its arguments were edited, and what the edited call gave.
    assert.equal(
      lastContent(sent[1]),
      `Observation: (The user edited the arguments to ${JSON.stringify(edited)}.)\nwrote 13 characters to drafts/notes.md`,
    );
  });

  test("an edit that is JSON, though made without a prototype and sharing one value twice, runs", async () => {
    const { runs, tools } = notes();
    const shared = { mode: "append" };
    const edited = Object.assign(Object.create(null) as Record<string, unknown>, {
      path: "a.md",
      text: "x",
      options: [shared, shared],
    });
    const { approve } = approver(() => ({ decision: "edit", arguments: edited }));
    const { result } = await run([WRITE, DONE], { tools, approve });
    assert.equal(result.steps[0]?.approval, "edited", result.steps[0]?.observation);
    assert.deepEqual(runs.map((r) => JSON.parse(JSON.stringify(r.args)) as unknown), [
      { path: "a.md", text: "x", options: [{ mode: "append" }, { mode: "append" }] },
    ]);
  });

  const circular: Record<string, unknown> = { path: "a.md" };
  circular["self"] = circular;
  const refusedEdits: [string, unknown, RegExp][] = [
    ["an array", ["notes.md", "hello"], /: the arguments are an array, not a JSON object\.$/],
    ["null", null, /: the arguments are null, not a JSON object\.$/],
    ["a string", '{"path": "notes.md"}', /: the arguments are a string, not a JSON object\.$/],
    ["missing", undefined, /: the arguments are undefined, not a JSON object\.$/],
    ["a number", 7, /: the arguments are a number, not a JSON object\.$/],
    ["a Map", new Map([["path", "a.md"]]), /: the arguments are a Map, not a JSON object\.$/],
    ["a Date inside", { path: "a.md", text: new Date(0) }, /: arguments\.text is a Date, not JSON\.$/],
    ["NaN inside", { path: "a.md", size: Number.NaN }, /: arguments\.size is NaN, not a JSON number\.$/],
    ["a function inside", { path: "a.md", text: () => "x" }, /: arguments\.text is a function, not JSON\.$/],
    ["undefined in an array", { path: "a.md", lines: ["x", undefined] }, /: arguments\.lines\[1\] is undefined, not JSON\.$/],
    ["a bigint inside", { path: "a.md", size: 10n }, /: arguments\.size is a bigint, not JSON\.$/],
    ["a circular object", circular, /: arguments\.self contains itself\.$/],
  ];
  for (const [name, edited, why] of refusedEdits) {
    test(`an edit whose arguments are ${name} is refused: the call does not run and the model is told why`, async () => {
      const { runs, tools } = notes();
      const { approve } = approver(() => ({ decision: "edit", arguments: edited }));
      const { result, events, sent } = await run([WRITE, DONE], { tools, approve });
      assert.equal(result.terminationReason, "success", result.answer);
      assert.equal(runs.length, 0);
      const step = result.steps[0];
      assert.equal(step?.isError, true);
      assert.equal(step?.approval, "denied");
      assert.deepEqual(step?.args, { path: "notes.md", text: "hello" });
      assert.ok(step?.observation.startsWith("The user's edit of this call was refused, so it did not run: "), step?.observation);
      assert.match(step?.observation ?? "", why);
      assert.equal(lastContent(sent[1]), `Observation: [the tool failed] ${step?.observation}`);
      assert.deepEqual(events.flatMap((e) => (e.type === "approval" ? [e.decision] : [])), ["denied"]);
    });
  }

  const badDecisions: [string, () => unknown, RegExp][] = [
    ["undefined", () => undefined, /: undefined is none of /],
    ["null", () => null, /: null is none of /],
    ["a bare string", () => "approve", /: "approve" is none of /],
    ["an array", () => ["approve"], /: \["approve"\] is none of /],
    ["an empty object", () => ({}), /: \{\} is none of /],
    ["an unknown decision", () => ({ decision: "yes" }), /: \{"decision":"yes"\} is none of /],
    ["a decision in capitals", () => ({ decision: "APPROVE" }), /: \{"decision":"APPROVE"\} is none of /],
    ["a deny without its reason", () => ({ decision: "deny" }), /: \{"decision":"deny"\} is none of /],
    ["a deny whose reason is a number", () => ({ decision: "deny", reason: 42 }), /: \{"decision":"deny","reason":42\} is none of /],
    ["a promise of nothing", () => Promise.resolve(undefined), /: undefined is none of /],
    ["an object whose decision throws", () => ({ get decision(): string { throw new Error("no decision here"); } }), /: reading the decision threw: no decision here\.$/],
  ];
  for (const [name, decide, why] of badDecisions) {
    test(`a decision that is ${name} is refused like a bad edit: the call does not run, the loop goes on`, async () => {
      const { runs, tools } = notes();
      const { approve } = approver(decide);
      const { result, sent } = await run([WRITE, DONE], { tools, approve });
      assert.equal(result.terminationReason, "success", result.answer);
      assert.equal(runs.length, 0);
      const step = result.steps[0];
      assert.equal(step?.isError, true);
      assert.equal(step?.approval, "denied");
      assert.ok(step?.observation.startsWith("The approval's answer was refused, so this call did not run"), step?.observation);
      assert.match(step?.observation ?? "", why);
      assert.equal(lastContent(sent[1]), `Observation: [the tool failed] ${step?.observation}`);
    });
  }

  test("a marked tool without an approve option is denied: the model is told no one could approve it", async () => {
    const { runs, tools } = notes();
    const { result, events, sent } = await run([WRITE, DONE], { tools });
    assert.equal(result.terminationReason, "success", result.answer);
    assert.equal(runs.length, 0);
    const step = result.steps[0];
    assert.equal(step?.isError, true);
    assert.equal(step?.approval, "denied");
    assert.match(step?.observation ?? "", /needs the user's approval and no one could approve it/);
    assert.equal(lastContent(sent[1]), `Observation: [the tool failed] ${step?.observation}`);
    assert.deepEqual(events.flatMap((e) => (e.type === "approval" ? [e.decision] : [])), ["denied"]);
  });

  const throwing: [string, () => unknown, string][] = [
    ["throws", () => { throw new Error("the policy server is down"); }, "the policy server is down"],
    ["rejects", () => Promise.reject(new Error("the policy server is down")), "the policy server is down"],
    ["rejects with a string", () => Promise.reject("no policy"), "no policy"],
    ["throws a value with no prototype", () => { throw Object.create(null); }, "a value that cannot be shown"],
  ];
  for (const [name, decide, message] of throwing) {
    test(`an approver that ${name} ends the loop as failure naming the error, and nothing runs`, async () => {
      const { runs, tools } = notes();
      const { asked, approve } = approver(decide);
      const { result, sent } = await run([WRITE, DONE], { tools, approve });
      assert.equal(result.terminationReason, "failure");
      assert.equal(result.success, false);
      assert.equal(result.answer, `approving write_file failed: ${message}`);
      assert.deepEqual(result.errors, [{ source: "approval", message: result.answer }]);
      assert.equal(asked.length, 1);
      assert.equal(runs.length, 0);
      assert.equal(result.steps.length, 0);
      assert.equal(result.iterations, 1);
      assert.equal(sent.length, 1);
    });
  }

  test("aborting the signal while the approver waits ends the loop as cancelled, and nothing runs", { timeout: WAIT_MS }, async () => {
    const { runs, tools } = notes();
    const controller = new AbortController();
    let asked!: (request: ApprovalRequest) => void;
    const whenAsked = new Promise<ApprovalRequest>((resolve) => {
      asked = resolve;
    });
    // An approver that never answers, like a dialog the user leaves open.
    const approve = (request: ApprovalRequest): Promise<ApprovalDecision> => {
      asked(request);
      return new Promise<ApprovalDecision>(() => undefined);
    };
    const loop = run([WRITE, DONE], { tools, approve, signal: controller.signal });
    const request = await whenAsked;
    assert.equal(request.signal?.aborted, false);
    controller.abort();
    const { result, sent } = await loop;
    assert.equal(result.terminationReason, "cancelled");
    assert.equal(request.signal?.aborted, true);
    assert.equal(runs.length, 0);
    assert.equal(result.steps.length, 0);
    assert.equal(result.iterations, 1);
    assert.equal(sent.length, 1);
  });

  test("a signal aborted before a call is asked about ends the loop without asking", { timeout: WAIT_MS }, async () => {
    const { runs, tools } = notes();
    const controller = new AbortController();
    const { asked, approve } = approver(() => ({ decision: "approve" }));
    const events: LoopEvent[] = [];
    const { result } = await run([WRITE, DONE], {
      tools,
      approve,
      signal: controller.signal,
      onEvent: (event) => {
        events.push(event);
        if (event.type === "action") {
          controller.abort();
        }
      },
    });
    assert.equal(result.terminationReason, "cancelled");
    assert.equal(asked.length, 0);
    assert.equal(runs.length, 0);
    assert.deepEqual(events.map((e) => e.type).filter((t) => t === "action" || t === "approval"), ["action"]);
  });

  test("an approver that rejects because the signal aborted ends the loop as cancelled, not failure", { timeout: WAIT_MS }, async () => {
    const { runs, tools } = notes();
    const controller = new AbortController();
    const approve = (request: ApprovalRequest): Promise<ApprovalDecision> =>
      new Promise<ApprovalDecision>((_resolve, reject) => {
        request.signal?.addEventListener("abort", () => reject(new Error("the dialog was closed")), { once: true });
        controller.abort();
      });
    const { result } = await run([WRITE, DONE], { tools, approve, signal: controller.signal });
    assert.equal(result.terminationReason, "cancelled");
    assert.deepEqual(result.errors, []);
    assert.equal(runs.length, 0);
  });

  test("aborting while the second of two parallel calls waits runs neither, not even the approved first", { timeout: WAIT_MS }, async () => {
    const { runs, tools } = notes();
    const controller = new AbortController();
    const { asked, approve } = approver((_request, index) => {
      if (index === 0) {
        return { decision: "approve" };
      }
      controller.abort();
      return new Promise<ApprovalDecision>(() => undefined);
    });
    const both = toolCalls([
      { id: "call_a", name: "write_file", arguments: { path: "a.md", text: "a" } },
      { id: "call_b", name: "write_file", arguments: { path: "b.md", text: "b" } },
    ]);
    const { result } = await run([both, DONE], { tools, approve, signal: controller.signal, llmConfig: nativeMode });
    assert.equal(result.terminationReason, "cancelled");
    assert.deepEqual(asked.map((r) => r.toolCallId), ["call_a", "call_b"]);
    assert.equal(runs.length, 0);
    assert.equal(result.steps.length, 0);
  });

  for (const [stream, deniedFirst] of [
    [true, false],
    [false, true],
  ] as const) {
    test(`two parallel calls, one approved and one denied (denied ${deniedFirst ? "first" : "second"}, stream: ${stream}): asked in order, one at a time, each answered by its own id`, async () => {
      const { runs, tools } = notes();
      const denied = deniedFirst ? "call_a" : "call_b";
      let waiting = 0;
      let mostWaiting = 0;
      const { asked, approve } = approver((request) => {
        waiting += 1;
        mostWaiting = Math.max(mostWaiting, waiting);
        const decision: ApprovalDecision =
          request.toolCallId === denied ? { decision: "deny", reason: `not ${String(request.arguments["path"])}` } : { decision: "approve" };
        // Answers a little later: a loop that asked about both at once would have two waiting.
        return Promise.resolve().then(() => {
          waiting -= 1;
          return decision;
        });
      });
      const both = toolCalls([
        { id: "call_a", name: "write_file", arguments: { path: "a.md", text: "aaa" } },
        { id: "call_b", name: "write_file", arguments: { path: "b.md", text: "bb" } },
      ]);
      const { result, events, sent } = await run([both, DONE], { tools, approve, stream, llmConfig: nativeMode });
      assert.equal(result.terminationReason, "success", result.answer);
      assert.deepEqual(asked.map((r) => [r.toolCallId, r.arguments["path"]]), [["call_a", "a.md"], ["call_b", "b.md"]]);
      assert.equal(mostWaiting, 1);
      const approved = deniedFirst ? "call_b" : "call_a";
      assert.deepEqual(runs.map((r) => r.toolCallId), [approved]);
      assert.deepEqual(
        result.steps.map((s) => [s.toolCallId, s.approval, s.isError]),
        [
          ["call_a", deniedFirst ? "denied" : "approved", deniedFirst],
          ["call_b", deniedFirst ? "approved" : "denied", !deniedFirst],
        ],
      );
      assert.deepEqual(
        events.flatMap((e) => (e.type === "approval" ? [[e.toolCallId, e.decision]] : [])),
        result.steps.map((s) => [s.toolCallId, s.approval]),
      );
      const observations = result.history.filter((t) => t.role === "tool_observation");
      assert.deepEqual(observations.map((t) => [t.tool_call_id, t.is_error]), result.steps.map((s) => [s.toolCallId, s.isError]));
      // The model got one result per call, each under its own id: the denial under the denied one.
      const toolMessages = (sent[1] ?? []).filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m.content]);
      const wrote = (path: string, n: number) => `wrote ${n} characters to ${path}`;
      assert.deepEqual(
        toolMessages,
        deniedFirst
          ? [["call_a", "[the tool failed] The user denied this call: not a.md"], ["call_b", wrote("b.md", 2)]]
          : [["call_a", wrote("a.md", 3)], ["call_b", "[the tool failed] The user denied this call: not b.md"]],
      );
    });
  }
});
