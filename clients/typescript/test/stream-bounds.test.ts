// What else bounds a stream, against fake services on loopback: its response head is due within
// `streamIdleTimeoutMs` of the request (a head dribbled a byte every 50 ms, or none at all, is cut
// there with a retryable `transport_error`, while the caller's own signal still aborts as it
// always did); a stream whose lines end with a bare `\r` gives its last event, the connection
// left open or closed; a line past 16 MiB ends the stream as an `unreadable_response`; and a long
// line in many small pieces comes whole.
import assert from "node:assert/strict";
import { getEventListeners, once } from "node:events";
import { createServer as createHttpServer, type ServerResponse } from "node:http";
import { createServer as createNetServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";

import { ReactStepClient, type StreamEvent } from "../src/index.js";
import { thrown } from "./support/thrown.js";

const BOUND_MS = 300;
/** How often a dribbling peer sends its next byte. */
const DRIBBLE_EVERY_MS = 50;
/** Past this a peer drops the connection: a client that does not bound its wait then fails the test rather than hangs it. */
const GIVE_UP_MS = 30_000;
const MIB = 1024 * 1024;

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
  termination_reason: null,
  usage: null,
  warnings: [],
  context_report: null,
  conversation_summary: null,
  prompt: null,
  error: null,
})}\n\n`;

interface Fake {
  url: string;
  /** Resolves once the client has closed the connection. */
  closed: Promise<void>;
  stop(): Promise<void>;
}

/**
 * A fake reactstep on a raw socket: it reads the request, then `answer` writes what it will (the
 * server's own `http` module could not leave a head unfinished).
 */
async function rawService(answer: (socket: Socket) => void): Promise<Fake> {
  let closed!: () => void;
  const whenClosed = new Promise<void>((resolve) => {
    closed = resolve;
  });
  const sockets = new Set<Socket>();
  const server = createNetServer((socket) => {
    sockets.add(socket);
    let received = "";
    let answered = false;
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("latin1");
      const end = received.indexOf("\r\n\r\n");
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(received)?.[1] ?? 0);
      if (!answered && end >= 0 && received.length >= end + 4 + length) {
        answered = true;
        answer(socket);
      }
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      sockets.delete(socket);
      closed();
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    closed: whenClosed,
    async stop() {
      for (const socket of sockets) {
        socket.destroy();
      }
      server.close();
      await once(server, "close");
    },
  };
}

/** The start of a stream's head, then one byte every 50 ms: the head never ends. */
function dribbledHead(sent: { bytes: number }): (socket: Socket) => void {
  return (socket) => {
    socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-dribble: ");
    const every = setInterval(() => {
      socket.write("a");
      sent.bytes += 1;
    }, DRIBBLE_EVERY_MS);
    const giveUp = setTimeout(() => socket.destroy(), GIVE_UP_MS);
    socket.on("close", () => {
      clearInterval(every);
      clearTimeout(giveUp);
    });
  };
}

/** No answer at all. */
function silence(socket: Socket): void {
  const giveUp = setTimeout(() => socket.destroy(), GIVE_UP_MS);
  socket.on("close", () => clearTimeout(giveUp));
}

/** A fake reactstep answering every request with an event stream whose body `body` writes. */
async function streamService(body: (res: ServerResponse) => void): Promise<Fake> {
  let closed!: () => void;
  const whenClosed = new Promise<void>((resolve) => {
    closed = resolve;
  });
  const server = createHttpServer((req, res) => {
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

async function collect(events: AsyncIterable<StreamEvent>): Promise<StreamEvent[]> {
  const all: StreamEvent[] = [];
  for await (const event of events) {
    all.push(event);
  }
  return all;
}

/** The timers this process holds (the client's included). */
const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;

describe("a stream's head", () => {
  for (const [name, answer] of [
    ["dribbled a byte at a time", "dribble"],
    ["never sent", "silence"],
  ] as const) {
    test(`${name} is cut at the bound, with a retryable transport_error`, { timeout: 60_000 }, async () => {
      const sent = { bytes: 0 };
      const fake = await rawService(answer === "dribble" ? dribbledHead(sent) : silence);
      try {
        const controller = new AbortController();
        const client = new ReactStepClient({ baseUrl: fake.url, streamIdleTimeoutMs: BOUND_MS });
        const before = timers();
        const error = await thrown(collect(client.stream(request, { signal: controller.signal })));
        assert.equal(error.type, "transport_error");
        assert.equal(error.retryable, true);
        assert.equal(error.status, 0);
        assert.match(error.message, /no response head arrived within 0\.3 s/);
        if (answer === "dribble") {
          // The bytes kept coming: each restarted undici's head timeout, none the bound.
          assert.ok(sent.bytes > 0);
        }
        await fake.closed;
        // The client's timer went with the stream, and it no longer listens to the caller's signal.
        assert.ok(timers() <= before, `timers before ${before}, after ${timers()}`);
        assert.equal(getEventListeners(controller.signal, "abort").length, 0);
      } finally {
        await fake.stop();
      }
    });
  }

  test("the caller's signal aborted while the head is awaited rejects with the abort, as it always did", { timeout: 60_000 }, async () => {
    const controller = new AbortController();
    const sent = { bytes: 0 };
    const fake = await rawService((socket) => {
      dribbledHead(sent)(socket);
      controller.abort();
    });
    try {
      // A bound far off: the caller's abort comes first.
      const client = new ReactStepClient({ baseUrl: fake.url, streamIdleTimeoutMs: 60_000 });
      await assert.rejects(collect(client.stream(request, { signal: controller.signal })), (error: unknown) => {
        assert.ok(error instanceof Error);
        assert.equal(error.name, "AbortError");
        return true;
      });
      await fake.closed;
      const reason = new Error("the caller's own reason");
      await assert.rejects(collect(client.stream(request, { signal: AbortSignal.abort(reason) })), (error: unknown) => error === reason);
    } finally {
      await fake.stop();
    }
  });
});

describe("a stream whose lines end with a bare \\r", () => {
  for (const left of ["left open", "closed"] as const) {
    test(`gives its last event, ended by \\r\\r, the connection ${left}`, { timeout: 60_000 }, async () => {
      const fake = await streamService((res) => {
        const wire = (thought + step).replaceAll("\n", "\r");
        assert.ok(wire.endsWith("}\r\r"));
        if (left === "closed") {
          res.end(wire);
        } else {
          res.write(wire);
        }
      });
      try {
        // The step is to come at once; a client that held its last \r back would wait for more
        // and end in an idle error (or, the connection closed, without its step).
        const client = new ReactStepClient({ baseUrl: fake.url, streamIdleTimeoutMs: 5_000 });
        const events = await collect(client.stream(request));
        assert.deepEqual(
          events.map((event) => event.type),
          ["thought", "step"],
        );
        await fake.closed;
      } finally {
        await fake.stop();
      }
    });
  }
});

describe("a long line", () => {
  test("past 16 MiB ends the stream as an unreadable_response, and the connection is closed", { timeout: 60_000 }, async () => {
    const piece = "a".repeat(64 * 1024);
    const fake = await streamService((res) => {
      res.write('event: thought\ndata: {"delta": "');
      let sent = 0;
      const next = () => {
        // 17 MiB in 64 KiB pieces, as fast as the client reads them; the line is never ended.
        while (sent < 17 * MIB && !res.destroyed) {
          sent += piece.length;
          if (!res.write(piece)) {
            res.once("drain", next);
            return;
          }
        }
      };
      next();
    });
    try {
      const client = new ReactStepClient({ baseUrl: fake.url });
      const error = await thrown(collect(client.stream(request)));
      assert.equal(error.type, "unreadable_response");
      assert.equal(error.retryable, false);
      assert.equal(error.status, 200);
      assert.match(error.message, /a line of the event stream is longer than 16 MiB/);
      await fake.closed;
    } finally {
      await fake.stop();
    }
  });

  test("of 2 MiB sent in 1 KiB pieces comes whole", { timeout: 60_000 }, async () => {
    const delta = "€".repeat((2 * MIB) / 3);
    const wire = Buffer.from(`event: thought\ndata: ${JSON.stringify({ delta })}\n\n${step}`);
    const fake = await streamService((res) => {
      let start = 0;
      const next = () => {
        while (start < wire.length) {
          const more = res.write(wire.subarray(start, start + 1024));
          start += 1024;
          if (!more) {
            res.once("drain", next);
            return;
          }
        }
        res.end();
      };
      next();
    });
    try {
      const client = new ReactStepClient({ baseUrl: fake.url });
      const events = await collect(client.stream(request));
      assert.deepEqual(
        events.map((event) => event.type),
        ["thought", "step"],
      );
      assert.ok(events[0]?.type === "thought" && events[0].delta === delta, "the thought differs");
    } finally {
      await fake.stop();
    }
  });
});
