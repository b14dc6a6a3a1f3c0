// The bound on a quiet stream (`streamIdleTimeoutMs`), against a fake service on loopback: a peer
// that opens a stream and dribbles one byte every 50 ms, never ending a block, is cut at the bound
// with a retryable `transport_error`; heartbeats keep a stream alive past it; the time the caller
// holds an event is not the peer's; and the bound is checked when the client is made.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";

import { ReactStepClient, type StreamEvent } from "../src/index.js";
import { thrown } from "./support/thrown.js";

const BOUND_MS = 300;
/** How often the dribbling peer sends its next byte. */
const DRIBBLE_EVERY_MS = 50;
/** Past this the dribbling peer drops the connection: a client that does not bound its wait then fails the test rather than hangs it. */
const DRIBBLE_GIVE_UP_MS = 30_000;

const request = {
  user_query: "q",
  llm_config: { modelName: "gpt-4o", tokenLimit: 8192, reservedOutputTokens: 512 },
  mock_response: "Final Answer: a",
};
const thought = 'event: thought\ndata: {"delta": "I am thinking"}\n\n';
const step = `event: step\ndata: ${JSON.stringify({
  session_id: "s",
  request_id: "r",
  status: "direct_response_provided",
  thought: "I am thinking",
  action_details: null,
  direct_response: "a",
  updated_conversation_history: [],
  iterations_remaining: 0,
  termination_reason: "success",
  usage: null,
  warnings: [],
  context_report: null,
  conversation_summary: null,
  prompt: null,
  error: null,
})}\n\n`;

interface Quiet {
  url: string;
  /** Resolves once the client has closed the stream's connection. */
  closed: Promise<void>;
  stop(): Promise<void>;
}

/** A fake reactstep answering every request with an event stream whose body `body` writes. */
async function quietService(body: (res: ServerResponse) => void): Promise<Quiet> {
  let closed!: () => void;
  const whenClosed = new Promise<void>((resolve) => {
    closed = resolve;
  });
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.on("close", () => closed());
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
      body(res);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    closed: whenClosed,
    async stop() {
      server.closeAllConnections();
      server.close();
      await once(server, "close");
    },
  };
}

/** The start of a block, then one byte every 50 ms, the block never ended. */
function dribble(sent: { bytes: number }): (res: ServerResponse) => void {
  return (res) => {
    res.write('event: thought\ndata: {"delta": "');
    const every = setInterval(() => {
      res.write("x");
      sent.bytes += 1;
    }, DRIBBLE_EVERY_MS);
    const giveUp = setTimeout(() => res.destroy(), DRIBBLE_GIVE_UP_MS);
    res.on("close", () => {
      clearInterval(every);
      clearTimeout(giveUp);
    });
  };
}

/** `count` heartbeat comments, one every `everyMs`, then `then` and the end; lines end with `end`. */
function heartbeats(count: number, everyMs: number, then: string, end: string): (res: ServerResponse) => void {
  return (res) => {
    let sent = 0;
    const every = setInterval(() => {
      res.write(`: heartbeat${end}${end}`);
      sent += 1;
      if (sent === count) {
        clearInterval(every);
        res.end(then);
      }
    }, everyMs);
    res.on("close", () => clearInterval(every));
  };
}

async function collect(events: AsyncIterable<StreamEvent>, held?: () => Promise<void>): Promise<StreamEvent[]> {
  const all: StreamEvent[] = [];
  for await (const event of events) {
    all.push(event);
    await held?.();
  }
  return all;
}

/** The timers this process holds (the client's included). */
const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;

describe("a quiet stream", () => {
  test("a peer that dribbles a block forever is cut at the bound, with a retryable transport_error", { timeout: 60_000 }, async () => {
    const sent = { bytes: 0 };
    const quiet = await quietService(dribble(sent));
    try {
      const client = new ReactStepClient({ baseUrl: quiet.url, streamIdleTimeoutMs: BOUND_MS });
      const before = timers();
      const error = await thrown(collect(client.stream(request)));
      assert.equal(error.type, "transport_error");
      assert.equal(error.retryable, true);
      assert.equal(error.status, 0);
      assert.match(error.message, /no whole event arrived within 0\.3 s/);
      // The bytes kept coming: none of them is a whole block.
      assert.ok(sent.bytes > 0);
      await quiet.closed;
      // The client's timer went with the stream (the peer's went when it saw the close).
      assert.ok(timers() <= before, `timers before ${before}, after ${timers()}`);
    } finally {
      await quiet.stop();
    }
  });

  for (const [name, end] of [
    ["\\n", "\n"],
    ["\\r\\n", "\r\n"],
  ] as const) {
    test(`heartbeats keep a stream alive past the bound (lines ended by ${name})`, { timeout: 60_000 }, async () => {
      // Ten heartbeats 100 ms apart: a second of no event, over three times the bound.
      const quiet = await quietService(heartbeats(10, 100, (thought + step).replaceAll("\n", end), end));
      try {
        const client = new ReactStepClient({ baseUrl: quiet.url, streamIdleTimeoutMs: BOUND_MS });
        const before = timers();
        const events = await collect(client.stream(request));
        assert.deepEqual(
          events.map((event) => event.type),
          ["thought", "step"],
        );
        // Each wait's timer went with it: none is left for the deadlines the heartbeats moved.
        assert.ok(timers() <= before, `timers before ${before}, after ${timers()}`);
      } finally {
        await quiet.stop();
      }
    });
  }

  test("the time the caller holds an event is not the peer's", { timeout: 60_000 }, async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const quiet = await quietService((res) => {
      res.write(thought);
      void released.then(() => res.end(step));
    });
    try {
      const client = new ReactStepClient({ baseUrl: quiet.url, streamIdleTimeoutMs: BOUND_MS });
      // The caller holds the thought for twice the bound; the service then answers at once.
      const events = await collect(client.stream(request), async () => {
        await delay(2 * BOUND_MS);
        release();
      });
      assert.deepEqual(
        events.map((event) => event.type),
        ["thought", "step"],
      );
    } finally {
      await quiet.stop();
    }
  });

  test("a bound that is not a positive, finite number of milliseconds is refused", () => {
    for (const bound of [0, -1, -0.5, Number.NaN, Number.POSITIVE_INFINITY, "500" as unknown as number]) {
      assert.throws(
        () => new ReactStepClient({ baseUrl: "http://reactstep.invalid", streamIdleTimeoutMs: bound }),
        (error: unknown) =>
          error instanceof RangeError && /streamIdleTimeoutMs must be a positive number of milliseconds/.test(error.message),
        String(bound),
      );
    }
    assert.doesNotThrow(() => new ReactStepClient({ baseUrl: "http://reactstep.invalid", streamIdleTimeoutMs: undefined }));
    assert.doesNotThrow(() => new ReactStepClient({ baseUrl: "http://reactstep.invalid", streamIdleTimeoutMs: 0.5 }));
  });
});
