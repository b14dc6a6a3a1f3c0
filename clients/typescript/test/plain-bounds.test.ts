// A plain answer's body is bounded as a stream's events are: past 16 MiB (said by its
// `content-length`, or counted as it comes without one) a step, a plan or an evaluation, or the
// error answer of any call, is an `unreadable_response`, and the client closes the connection
// without reading the rest: a broken service or a proxy cannot make it hold gigabytes.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";

import { ReactStepClient } from "../src/index.js";
import { MAX_SIZE } from "../src/sse.js";
import { thrown } from "./support/thrown.js";

const request = {
  user_query: "q",
  llm_config: { modelName: "gpt-4o", tokenLimit: 8192, reservedOutputTokens: 512 },
  mock_response: "Final Answer: a",
};

interface Fake {
  url: string;
  /** Resolves once the client has closed the connection; with the bytes of body sent by then. */
  closed: Promise<number>;
  stop(): Promise<void>;
}

/** A fake answering with `status` and a JSON body that `body` writes, counting what it wrote. */
async function service(status: number, body: (res: ServerResponse, sent: { bytes: number }) => void): Promise<Fake> {
  let closed!: (bytes: number) => void;
  const whenClosed = new Promise<number>((resolve) => {
    closed = resolve;
  });
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const sent = { bytes: 0 };
      res.on("close", () => closed(sent.bytes));
      res.statusCode = status;
      res.setHeader("content-type", "application/json");
      body(res, sent);
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

/** Spaces, with no length (chunked), until the client goes or 64 MiB went. */
function endless(res: ServerResponse, sent: { bytes: number }): void {
  const piece = Buffer.alloc(256 * 1024, " ");
  const more = (): void => {
    while (sent.bytes < 4 * MAX_SIZE && !res.destroyed) {
      sent.bytes += piece.length;
      if (!res.write(piece)) {
        res.once("drain", more);
        return;
      }
    }
    res.end();
  };
  more();
}

describe("a plain answer's body", () => {
  for (const status of [200, 500]) {
    for (const call of ["step", "plan", "evaluate"] as const) {
      test(`past 16 MiB without a length is refused as it comes (${call}, HTTP ${status})`, async () => {
        const fake = await service(status, endless);
        try {
          const client = new ReactStepClient({ baseUrl: fake.url });
          const error = await thrown(client[call]({ ...request, candidate_answer: "a" }));
          assert.equal(error.status, status);
          assert.equal(error.type, "unreadable_response");
          assert.match(error.message, /longer than 16 MiB/);
          const sent = await fake.closed;
          assert.ok(sent < 2 * MAX_SIZE, `the client read on: ${sent} bytes sent`);
        } finally {
          await fake.stop();
        }
      });
    }
  }

  test("that says it is past 16 MiB is not read", async () => {
    const fake = await service(200, (res) => {
      res.setHeader("content-length", String(MAX_SIZE + 1));
      res.flushHeaders();
    });
    try {
      const error = await thrown(new ReactStepClient({ baseUrl: fake.url }).step(request));
      assert.equal(error.type, "unreadable_response");
      assert.match(error.message, /longer than 16 MiB/);
      await fake.closed;
    } finally {
      await fake.stop();
    }
  });

  test("of 16 MiB is read", async () => {
    const error = '{"error": {"type": "invalid_request", "message": "m", "retryable": false}}';
    const fake = await service(400, (res) => {
      res.end(error + " ".repeat(MAX_SIZE - error.length));
    });
    try {
      const raised = await thrown(new ReactStepClient({ baseUrl: fake.url }).step(request));
      assert.deepEqual([raised.status, raised.type, raised.message], [400, "invalid_request", "m"]);
    } finally {
      await fake.stop();
    }
  });
});
