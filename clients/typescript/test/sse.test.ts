// The client's own reading of an event stream (src/sse.ts): the same events whatever the line
// ends and however the bytes are cut, a block ended by a bare `\r\r` at once (nothing held back
// for a `\n`), a long line in many small pieces read whole, and the 16 MiB bound on a line and on
// an event's data.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Blocks, MAX_SIZE, TooLong, type ServerSentEvent } from "../src/sse.js";

const MIB = 1024 * 1024;

/** Every block `pieces` end, fed in order to one reader. */
function read(pieces: Uint8Array[]): (ServerSentEvent | null)[] {
  const blocks = new Blocks();
  return pieces.flatMap((piece) => blocks.feed(piece));
}

/** `bytes` cut into pieces of `size` (the last one shorter). */
function cut(bytes: Uint8Array, size: number): Uint8Array[] {
  const pieces: Uint8Array[] = [];
  for (let start = 0; start < bytes.length; start += size) {
    pieces.push(bytes.subarray(start, start + size));
  }
  return pieces;
}

const encode = (text: string) => new TextEncoder().encode(text);

describe("an event stream, read block by block", () => {
  // Comments, stray blank lines, several data lines, an id, a retry, a field of no known name,
  // a field without a colon, a data-less block, characters of two, three and four bytes, and a
  // last event ended by a blank line with nothing after it.
  const text =
    ": heartbeat\n\n" +
    'event: thought\ndata: {"delta": "é€😀"}\n\n' +
    "\n\n" +
    ": one\n: two\n\n" +
    'event: answer\ndata: {"delta": "b"}\ndata: {"more": 1}\nid: 7\n\n' +
    "retry: 10\nevent: step\n\n" +
    "data\nunknown: x\n\n" +
    'data:{"delta": "c"}\n\n' +
    'event: step\ndata: {"last": true}\n\n';
  const expected: (ServerSentEvent | null)[] = [
    null,
    { event: "thought", data: '{"delta": "é€😀"}', id: "", retry: undefined },
    null,
    { event: "answer", data: '{"delta": "b"}\n{"more": 1}', id: "7", retry: undefined },
    null,
    { event: "message", data: "", id: "7", retry: 10 },
    { event: "message", data: '{"delta": "c"}', id: "7", retry: 10 },
    { event: "step", data: '{"last": true}', id: "7", retry: 10 },
  ];

  for (const [name, end] of [
    ["\\n", "\n"],
    ["\\r\\n", "\r\n"],
    ["\\r", "\r"],
  ] as const) {
    test(`lines ended by ${name}, cut into pieces of every size from 1 to 5 bytes, give the same events`, () => {
      const wire = encode(text.replaceAll("\n", end));
      for (let size = 1; size <= 5; size += 1) {
        assert.deepEqual(read(cut(wire, size)), expected, `pieces of ${size}`);
      }
      assert.deepEqual(read([wire]), expected, "one piece");
    });
  }

  test("an empty piece between a \\r and its \\n changes nothing", () => {
    const wire = text.replaceAll("\n", "\r\n");
    const pieces = wire.split("\r").flatMap((part) => [encode(part), encode("\r"), new Uint8Array(0)]);
    assert.deepEqual(read(pieces), expected);
  });

  test("a last event ended by \\r\\r is delivered with its last byte, not held back for a \\n", () => {
    const blocks = new Blocks();
    assert.deepEqual(blocks.feed(encode('event: step\rdata: {"last": true}\r')), []);
    assert.deepEqual(blocks.feed(encode("\r")), [{ event: "step", data: '{"last": true}', id: "", retry: undefined }]);
    // A \n after it is the end of the \r\n the last \r began: no line.
    assert.deepEqual(blocks.feed(encode("\n")), []);
  });

  test("a byte order mark that begins the stream is dropped, one later is not", () => {
    const wire = encode("\uFEFFevent: thought\ndata: 1\n\n\uFEFFevent: answer\ndata: 2\n\n");
    assert.deepEqual(
      read(cut(wire, 1)).map((event) => event && [event.event, event.data]),
      [
        ["thought", "1"],
        ["message", "2"],
      ],
    );
  });

  test("a line of 2 MiB in pieces of 1 KiB is read whole", () => {
    const delta = "€".repeat((2 * MIB) / 3);
    const wire = encode(`event: thought\ndata: {"delta": "${delta}"}\n\n`);
    const events = read(cut(wire, 1024));
    assert.equal(events.length, 1);
    assert.equal(events[0]?.event, "thought");
    assert.ok(events[0]?.data === `{"delta": "${delta}"}`, "the data differs");
  });

  test("a line of 16 MiB is read; one byte more is too long", () => {
    const start = encode("data: ");
    const rest = new Uint8Array(MAX_SIZE - start.length).fill(0x61);
    const blocks = new Blocks();
    const events = [start, rest, encode("\n\n")].flatMap((piece) => blocks.feed(piece));
    assert.deepEqual(
      events.map((event) => event?.data.length),
      [MAX_SIZE - start.length],
    );
    const over = new Blocks();
    over.feed(start);
    assert.throws(
      () => over.feed(new Uint8Array(MAX_SIZE - start.length + 1).fill(0x61)),
      (error: unknown) => error instanceof TooLong && error.message === "a line of the event stream is longer than 16 MiB",
    );
  });

  test("an event whose data lines add up past 16 MiB is too long", () => {
    const line = encode(`data: ${"a".repeat(MIB - 1)}\n`);
    const blocks = new Blocks();
    // Sixteen such lines are 16 MiB of data less one byte (the line ends between them counted).
    for (let n = 0; n < 16; n += 1) {
      assert.deepEqual(blocks.feed(line), []);
    }
    assert.throws(
      () => blocks.feed(line),
      (error: unknown) => error instanceof TooLong && error.message === "an event's data is longer than 16 MiB",
    );
    const under = new Blocks();
    const events = [...Array.from({ length: 16 }, () => line), encode("\n")].flatMap((piece) => under.feed(piece));
    assert.deepEqual(
      events.map((event) => event?.data.length),
      [16 * MIB - 1],
    );
  });
});
