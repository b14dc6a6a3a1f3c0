// The real reactstep server as a child process on a loopback port, and a mock LLM upstream that
// speaks OpenAI's Chat Completions, for the tests.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import path from "node:path";

/** clients/typescript, from dist/test/support/. */
export const packageDir = fileURLToPath(new URL("../../../", import.meta.url));
export const repoRoot = path.resolve(packageDir, "../..");

let built: string | undefined;

/** `REACTSTEP_BIN`, or the release binary `cargo build --release` makes (once per test file). */
export function serverBinary(): string {
  const given = process.env["REACTSTEP_BIN"];
  if (given) {
    return given;
  }
  built ??= buildRelease();
  return built;
}

function buildRelease(): string {
  // stdout is the test runner's report: cargo's own output goes to stderr only.
  const cargo = spawnSync("cargo", ["build", "--release", "--quiet"], { cwd: repoRoot, stdio: ["ignore", "ignore", "inherit"] });
  if (cargo.status !== 0) {
    throw new Error(`cargo build --release failed in ${repoRoot} (set REACTSTEP_BIN to a built server)`);
  }
  const target = process.env["CARGO_TARGET_DIR"] ?? path.join(repoRoot, "target");
  return path.join(path.resolve(repoRoot, target), "release", "reactstep");
}

export interface Service {
  url: string;
  /** The last lines the server logged, for a failing assertion's message. */
  log: string[];
  stop(): Promise<void>;
}

/** Starts the server on a free loopback port (it binds port 0 and logs the port it got). */
export async function startService(env: Record<string, string> = {}): Promise<Service> {
  const child: ChildProcess = spawn(serverBinary(), [], {
    env: {
      ...process.env,
      REACTSTEP_BIND: "127.0.0.1:0",
      REACTSTEP_LOG_FORMAT: "json",
      RUST_LOG: "info",
      REACTSTEP_WORKERS: "2",
      REACTSTEP_SHUTDOWN_GRACE_SECS: "1",
      ...env,
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const log: string[] = [];
  const lines = createInterface({ input: child.stderr! });
  const port = new Promise<number>((resolve, reject) => {
    lines.on("line", (line) => {
      log.push(line);
      if (log.length > 200) {
        log.shift();
      }
      try {
        const entry = JSON.parse(line) as { message?: string; port?: number };
        if (entry.message === "reactstep listening" && typeof entry.port === "number") {
          resolve(entry.port);
        }
      } catch {
        // not a JSON line: kept in the log all the same
      }
    });
    child.once("exit", (code) => reject(new Error(`the server exited (${code}) before listening:\n${log.join("\n")}`)));
    child.once("error", reject);
  });
  const listening = await port;
  return {
    url: `http://127.0.0.1:${listening}`,
    log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = once(child, "exit");
        child.kill("SIGTERM");
        await exited;
      }
    },
  };
}

/** What the mock upstream does with one request. */
export type Reply = (request: UpstreamRequest, res: ServerResponse) => void;

export interface UpstreamRequest {
  body: Record<string, unknown>;
  stream: boolean;
  raw: IncomingMessage;
}

export interface Upstream {
  /** The base URL to give the server as `REACTSTEP_OPENAI_BASE_URL`. */
  baseUrl: string;
  /** Requests answered so far. */
  requests: UpstreamRequest[];
  /** Replies for the next requests, in order; then `fallback`. */
  script: Reply[];
  fallback: Reply;
  close(): Promise<void>;
}

export async function startUpstream(): Promise<Upstream> {
  const upstream: Upstream = {
    baseUrl: "",
    requests: [],
    script: [],
    fallback: completion("Thought: The answer is known.\nFinal Answer: From the mock."),
    close: async () => undefined,
  };
  const server: Server = createServer((raw, res) => {
    const chunks: Buffer[] = [];
    raw.on("data", (chunk: Buffer) => chunks.push(chunk));
    raw.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
      const request: UpstreamRequest = { body, stream: body["stream"] === true, raw };
      upstream.requests.push(request);
      const reply = upstream.script.shift() ?? upstream.fallback;
      reply(request, res);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  upstream.baseUrl = `http://127.0.0.1:${port}/v1`;
  upstream.close = async () => {
    server.closeAllConnections();
    server.close();
    await once(server, "close");
  };
  return upstream;
}

function chunk(delta: Record<string, unknown>, finish: string | null): string {
  const body = {
    id: "chatcmpl-mock",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-4o",
    choices: [{ index: 0, delta, finish_reason: finish }],
  };
  return `data: ${JSON.stringify(body)}\n\n`;
}

/** A complete answer with `text`, as JSON or as a stream, whichever was asked for. */
export function completion(text: string): Reply {
  return (request, res) => {
    if (request.stream) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: text }, null));
      res.write(chunk({}, "stop"));
      res.end("data: [DONE]\n\n");
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        id: "chatcmpl-mock",
        object: "chat.completion",
        created: 1,
        model: "gpt-4o",
        choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }],
        usage: { prompt_tokens: 100, completion_tokens: 12, total_tokens: 112 },
      }),
    );
  };
}

/** An HTTP error of the provider's. */
export function failure(status: number, headers: Record<string, string> = {}): Reply {
  return (_request, res) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(JSON.stringify({ error: { message: `mock failure ${status}`, type: "server_error", code: null } }));
  };
}

/** A 200 whose body is not a chat completion: the service cannot read it. */
export function garbage(): Reply {
  return (_request, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ unexpected: "not a chat completion" }));
  };
}

/** A stream that sends `text` and then stops without finishing: cut short. */
export function cutShort(text: string): Reply {
  return (_request, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk({ role: "assistant", content: text }, null));
    res.end();
  };
}

/**
 * A stream that sends `text` and then holds the connection open: `closed` resolves when the
 * service closes the request (it stopped the step); `finish(rest)` sends the rest of the output
 * and ends the stream once `after` resolves.
 */
export function hang(text: string, after?: Promise<void>, rest = ""): { reply: Reply; closed: Promise<void> } {
  let closed!: () => void;
  const whenClosed = new Promise<void>((resolve) => {
    closed = resolve;
  });
  return {
    closed: whenClosed,
    reply: (_request, res) => {
      res.on("close", () => closed());
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: text }, null));
      void after?.then(() => {
        res.write(chunk({ content: rest }, null));
        res.write(chunk({}, "stop"));
        res.end("data: [DONE]\n\n");
      });
    },
  };
}

/** One call of a native answer: OpenAI's `tool_calls` entry. */
export interface NativeCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

/** An answer that calls tools natively (OpenAI's `tool_calls`), as JSON or as a stream. */
export function toolCalls(calls: NativeCall[], text = ""): Reply {
  const entries = calls.map((call, index) => ({
    index,
    id: call.id,
    type: "function",
    function: { name: call.name, arguments: JSON.stringify(call.arguments) },
  }));
  return (request, res) => {
    if (request.stream) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: text === "" ? null : text, tool_calls: entries }, null));
      res.write(chunk({}, "tool_calls"));
      res.end("data: [DONE]\n\n");
      return;
    }
    const message = { role: "assistant", content: text === "" ? null : text, tool_calls: entries.map(({ index: _i, ...entry }) => entry) };
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        id: "chatcmpl-mock",
        object: "chat.completion",
        created: 1,
        model: "gpt-4o",
        choices: [{ index: 0, message, finish_reason: "tool_calls" }],
        usage: { prompt_tokens: 100, completion_tokens: 12, total_tokens: 112 },
      }),
    );
  };
}
