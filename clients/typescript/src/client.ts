// The thin client: one step (`step`), one step as events (`stream`), a plan (`plan`,
// `streamPlan`) and an evaluation (`evaluate`, `streamEvaluate`), and retries of the errors the
// service marks retryable. `runLoop` (loop.ts) drives a whole loop through it.
import { ReactStepError } from "./errors.js";
import type { CallOptions, StreamEvent } from "./events.js";
import { runLoop, type LoopOptions, type LoopResult } from "./loop.js";
import { Blocks, MAX_SIZE, TooLong, type ServerSentEvent } from "./sse.js";
import type {
  ErrorResponse,
  EvaluateRequest,
  EvaluateResponse,
  PlanRequest,
  PlanResponse,
  ReactStepRequest,
  StepResponse,
  StreamDelta,
  StreamRetry,
} from "./types.js";

const STEP_PATH = "/api/agent/react_step";
const STREAM_PATH = "/api/agent/react_step/stream";
const PLAN_PATH = "/api/agent/plan";
const PLAN_STREAM_PATH = "/api/agent/plan/stream";
const EVALUATE_PATH = "/api/agent/evaluate";
const EVALUATE_STREAM_PATH = "/api/agent/evaluate/stream";

/** A stream's quiet spell at most, by default: four of the heartbeats the service sends every 15 s. */
const DEFAULT_STREAM_IDLE_TIMEOUT_MS = 60_000;

/** The longest delay `setTimeout` keeps (a longer one fires at once); a longer wait is several. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Retries of an error the service marks `retryable`. Off unless given. */
export interface RetryOptions {
  /** Tries in all, the first included (1 to 10; default 3). */
  attempts?: number;
  /** Base of the exponential backoff (full jitter) when the answer names no wait (default 500 ms). */
  baseDelayMs?: number;
  /**
   * The longest wait between tries (default 30 s). A `Retry-After` longer than this is not cut
   * short: the error is thrown instead, since an earlier try would be refused again.
   */
  maxDelayMs?: number;
  /** Called before each wait, with the error that caused it. */
  onRetry?: (retry: { attempt: number; delayMs: number; error: ReactStepError }) => void;
}

export interface ClientOptions {
  /** Where the service is, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** One of the operator's tokens (`REACTSTEP_API_TOKENS`), sent as `Authorization: Bearer`. */
  apiToken?: string;
  /** A `fetch` of your own (a proxy agent, a test double); the global one by default. */
  fetch?: typeof fetch;
  /** `true` for the defaults; off by default. */
  retry?: RetryOptions | boolean;
  /**
   * The longest a stream may wait for its response head (from the moment the request is sent),
   * and then go without a whole block (an event, or a comment such as the heartbeat the service
   * sends every 15 s, ended by its blank line), in milliseconds; 60 000 when not given. Past it
   * the connection is closed and the stream throws a retryable `ReactStepError` of type
   * `transport_error`. The time the caller holds an event before asking for the next is not
   * counted. A positive, finite number: anything else throws a `RangeError` here.
   */
  streamIdleTimeoutMs?: number;
}

export type { CallOptions, StreamEvent } from "./events.js";

interface Retry {
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  onRetry: RetryOptions["onRetry"];
}

export class ReactStepClient {
  readonly baseUrl: string;
  private readonly apiToken: string | undefined;
  private readonly fetchImpl: typeof fetch;
  private readonly retry: Retry | undefined;
  private readonly streamIdleTimeoutMs: number;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.streamIdleTimeoutMs = streamIdleTimeout(options.streamIdleTimeoutMs);
    this.apiToken = options.apiToken;
    const given = options.fetch;
    this.fetchImpl = given ? (input, init) => given(input, init) : (input, init) => fetch(input, init);
    this.retry = retrySettings(options.retry);
  }

  /** One step. A non-2xx answer throws a `ReactStepError`. */
  step(request: ReactStepRequest, options: CallOptions = {}): Promise<StepResponse> {
    return this.call<StepResponse>(STEP_PATH, request, options, "the step");
  }

  /**
   * One step as server-sent events: thought and answer deltas while the model writes, then the
   * step or its error. An answer that is not a stream (a bad request, a rejected key, a rate
   * limit) throws a `ReactStepError` before the first event. Leaving the loop early, or
   * aborting the signal, closes the connection, and the service stops the step.
   */
  stream(request: ReactStepRequest, options: CallOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    return this.events<StepResponse>(STREAM_PATH, request, options);
  }

  /**
   * A plan of the task (`POST /api/agent/plan`): with `previous_plan` and `latest_observation`,
   * the earlier plan adjusted to what was observed. The answer's `plan` is there whenever its
   * `status` is `direct_response_provided` (a `dry_run` answers the prompt instead). A plan the
   * model could not make valid, even after the repair round, throws a `ReactStepError` of type
   * `invalid_model_output` (502, its `rawOutput` what the model wrote). Its
   * `updated_conversation_history` is the planning exchange: do not carry it into a loop's history.
   */
  plan(request: PlanRequest, options: CallOptions = {}): Promise<PlanResponse> {
    return this.call<PlanResponse>(PLAN_PATH, request, options, "the plan");
  }

  /** `plan` as server-sent events, as `stream` sends a step's (the answer deltas are the plan's JSON). */
  streamPlan(request: PlanRequest, options: CallOptions = {}): AsyncGenerator<StreamEvent<PlanResponse>, void, undefined> {
    return this.events<PlanResponse>(PLAN_STREAM_PATH, request, options);
  }

  /**
   * An evaluation of `candidate_answer` (`POST /api/agent/evaluate`), given the question
   * (`user_query`), the steps taken (`conversation_history`) and the `plan` followed. Its
   * `needs_retry` is the service's rule, not the model's word: completeness under 7 is a retry,
   * 8 or more is done, and never a retry once the history holds more than the plan's
   * `estimated_iterations` + 2 assistant turns (each overruling is in `warnings`).
   */
  evaluate(request: EvaluateRequest, options: CallOptions = {}): Promise<EvaluateResponse> {
    return this.call<EvaluateResponse>(EVALUATE_PATH, request, options, "the evaluation");
  }

  /** `evaluate` as server-sent events, as `stream` sends a step's (the answer deltas are the evaluation's JSON). */
  streamEvaluate(
    request: EvaluateRequest,
    options: CallOptions = {},
  ): AsyncGenerator<StreamEvent<EvaluateResponse>, void, undefined> {
    return this.events<EvaluateResponse>(EVALUATE_STREAM_PATH, request, options);
  }

  /** Drives a whole loop through this client: see `runLoop`. */
  runLoop(options: LoopOptions): Promise<LoopResult> {
    return runLoop(this, options);
  }

  /** A plain call: its 2xx answer as JSON. */
  private async call<T>(path: string, request: object, options: CallOptions, what: string): Promise<T> {
    const response = await this.send(path, request, "application/json", options.signal);
    let read: string | ReactStepError;
    try {
      read = await bodyText(response);
    } catch (cause) {
      if (options.signal?.aborted) {
        throw cause;
      }
      // Cut short.
      throw ReactStepError.unreadable(response.status, `${what} is not JSON`);
    }
    if (read instanceof ReactStepError) {
      throw read;
    }
    let body: unknown;
    try {
      body = JSON.parse(read);
    } catch {
      // Not JSON, or nested past what the engine's parser follows (a RangeError).
      throw ReactStepError.unreadable(response.status, `${what} is not JSON`);
    }
    if (!isObject(body)) {
      throw ReactStepError.unreadable(response.status, `${what} is not JSON`);
    }
    return body as T;
  }

  /**
   * A streamed call: its events, up to the terminal one, whose `step` is a `T`. The response
   * head is due `streamIdleTimeoutMs` after the request is sent; then each read waits until the
   * stream's next whole block is due (`streamIdleTimeoutMs` after the head or the last block, or
   * after the caller asked for the next event). Past either the connection is closed.
   */
  private async *events<T>(
    path: string,
    request: object,
    options: CallOptions,
  ): AsyncGenerator<StreamEvent<T>, void, undefined> {
    const idleMs = this.streamIdleTimeoutMs;
    // The request's signal: the caller's (its abort, with its reason, passed on), and the bound
    // on the head.
    const link = follow(options.signal);
    try {
      const response = await this.send(path, request, "text/event-stream", link.signal, { ms: idleMs, cut: link.abort });
      const contentType = response.headers.get("content-type") ?? "";
      if (!contentType.startsWith("text/event-stream") || response.body === null) {
        await response.body?.cancel().catch(() => undefined);
        throw ReactStepError.unreadable(response.status, `not an event stream (${contentType || "no content type"})`);
      }
      const blocks = new Blocks();
      let deadline = performance.now() + idleMs;
      const reader = response.body.getReader();
      try {
        for (;;) {
          const { done, value } = await beforeDeadline(reader.read(), deadline, () => streamIdle(idleMs));
          if (done) {
            break;
          }
          let ended: (ServerSentEvent | null)[];
          try {
            ended = blocks.feed(value);
          } catch (error) {
            if (error instanceof TooLong) {
              throw ReactStepError.unreadable(response.status, error.message);
            }
            throw error;
          }
          for (const block of ended) {
            deadline = performance.now() + idleMs;
            const event = block === null ? undefined : typed<T>(block, response.status);
            if (event === undefined) {
              continue;
            }
            yield event;
            if (event.type === "step" || event.type === "error") {
              return;
            }
            // The caller's time with the event is not the service's.
            deadline = performance.now() + idleMs;
          }
        }
        throw ReactStepError.unreadable(response.status, "the event stream ended without its step");
      } finally {
        // Closes the connection when the caller left early or the signal aborted the read.
        await reader.cancel().catch(() => undefined);
      }
    } finally {
      link.stop();
    }
  }

  /**
   * Sends the request; a 2xx response, after the retries the settings allow. With `head` (a
   * stream's), each try's response head is due within `head.ms`: past it `head.cut` aborts the
   * request and a `transport_error` is thrown.
   */
  private async send(
    path: string,
    request: object,
    accept: string,
    signal: AbortSignal | undefined,
    head?: HeadBound,
  ): Promise<Response> {
    const headers: Record<string, string> = { "content-type": "application/json", accept };
    if (this.apiToken !== undefined) {
      headers["authorization"] = `Bearer ${this.apiToken}`;
    }
    const body = JSON.stringify(request);
    for (let attempt = 1; ; attempt += 1) {
      const init: RequestInit = { method: "POST", headers, body };
      if (signal !== undefined) {
        init.signal = signal;
      }
      const url = `${this.baseUrl}${path}`;
      const response = head === undefined ? await this.fetchImpl(url, init) : await this.fetchHead(url, init, head);
      if (response.ok) {
        return response;
      }
      const error = await errorOf(response);
      const delayMs = this.delayBefore(attempt + 1, error);
      if (delayMs === undefined) {
        throw error;
      }
      this.retry?.onRetry?.({ attempt, delayMs, error });
      await sleep(delayMs, signal);
    }
  }

  /**
   * `fetch`, its response head due within `head.ms`. The timer aborts the request (which closes
   * its connection), and the abort it caused is the `transport_error`, not the fetch's own error.
   */
  private async fetchHead(url: string, init: RequestInit, head: HeadBound): Promise<Response> {
    let late = false;
    const stop = at(performance.now() + head.ms, () => {
      late = true;
      head.cut(streamIdle(head.ms, "head"));
    });
    let response: Response;
    try {
      response = await this.fetchImpl(url, init);
    } catch (error) {
      throw late ? streamIdle(head.ms, "head") : error;
    } finally {
      stop();
    }
    if (late) {
      // A fetch that answered anyway, or the timer fired as the head came: too late all the same.
      await response.body?.cancel().catch(() => undefined);
      throw streamIdle(head.ms, "head");
    }
    return response;
  }

  /** The wait before try `next`, or `undefined` when there is to be none. */
  private delayBefore(next: number, error: ReactStepError): number | undefined {
    const retry = this.retry;
    if (retry === undefined || !error.retryable || next > retry.attempts) {
      return undefined;
    }
    if (error.retryAfter !== undefined) {
      const asked = error.retryAfter * 1000;
      return asked <= retry.maxDelayMs ? asked : undefined;
    }
    const ceiling = Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** (next - 2));
    return Math.round(Math.random() * ceiling);
  }
}

/** `streamIdleTimeoutMs`, checked: the default when not given. */
function streamIdleTimeout(option: number | undefined): number {
  if (option === undefined) {
    return DEFAULT_STREAM_IDLE_TIMEOUT_MS;
  }
  if (typeof option !== "number" || !Number.isFinite(option) || option <= 0) {
    throw new RangeError(`streamIdleTimeoutMs must be a positive number of milliseconds, not ${String(option)}`);
  }
  return option;
}

/** The error of a stream that went `idleMs` without a whole block, or without its response head. */
function streamIdle(idleMs: number, what: "block" | "head" = "block"): ReactStepError {
  const missing = what === "head" ? "no response head" : "no whole event";
  return new ReactStepError({
    status: 0,
    type: "transport_error",
    message: `the event stream went quiet: ${missing} arrived within ${idleMs / 1000} s`,
    retryable: true,
  });
}

/** The bound on a stream's response head, and how to abort its request. */
interface HeadBound {
  ms: number;
  cut: (reason: Error) => void;
}

/**
 * A signal of the stream's own that follows the caller's `signal` (aborting with its reason, so
 * that an abort of the caller's throws what it always threw) and can also be aborted by the
 * client. `stop` forgets the caller's signal.
 */
function follow(signal: AbortSignal | undefined): {
  signal: AbortSignal;
  abort: (reason: Error) => void;
  stop: () => void;
} {
  const own = new AbortController();
  const passOn = () => own.abort(signal?.reason);
  if (signal?.aborted) {
    passOn();
  } else {
    signal?.addEventListener("abort", passOn, { once: true });
  }
  return {
    signal: own.signal,
    abort: (reason) => own.abort(reason),
    stop: () => signal?.removeEventListener("abort", passOn),
  };
}

/**
 * `read`, or a rejection with `late()` once `deadline` (on `performance.now()`'s clock) passes
 * first. The timer goes when either settles; the read left waiting is the caller's to cancel.
 */
function beforeDeadline<T>(read: Promise<T>, deadline: number, late: () => Error): Promise<T> {
  let stop = () => {};
  const expired = new Promise<never>((_resolve, reject) => {
    stop = at(deadline, () => reject(late()));
  });
  return Promise.race([read, expired]).finally(() => stop());
}

/**
 * Calls `fire` once `deadline` (on `performance.now()`'s clock) passes, however far it is (a
 * wait past what one `setTimeout` keeps is several); the function returned cancels it.
 */
function at(deadline: number, fire: () => void): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const check = () => {
    const left = deadline - performance.now();
    if (left <= 0) {
      fire();
      return;
    }
    timer = setTimeout(check, Math.min(Math.ceil(left), MAX_TIMER_MS));
  };
  check();
  return () => clearTimeout(timer);
}

function retrySettings(option: ClientOptions["retry"]): Retry | undefined {
  if (option === undefined || option === false) {
    return undefined;
  }
  const given = option === true ? {} : option;
  return {
    attempts: Math.min(10, Math.max(1, Math.floor(given.attempts ?? 3))),
    baseDelayMs: Math.max(0, given.baseDelayMs ?? 500),
    maxDelayMs: Math.max(0, given.maxDelayMs ?? 30_000),
    onRetry: given.onRetry,
  };
}

/**
 * A plain answer's body as text; the error when it is longer than `MAX_SIZE` (16 MiB, the bound
 * of a streamed event, so of a streamed step), said by its length or counted as it comes: a
 * broken service or a proxy cannot make the client hold more, and the rest is not read. Throws
 * when the body is cut short, or the caller's signal aborts the read.
 */
async function bodyText(response: Response): Promise<string | ReactStepError> {
  const status = response.status;
  const tooLong = ReactStepError.unreadable(status, `HTTP ${status} with a body longer than 16 MiB`);
  const declared = Number(response.headers.get("content-length") ?? "");
  if (declared > MAX_SIZE || response.body === null) {
    await response.body?.cancel().catch(() => undefined);
    return declared > MAX_SIZE ? tooLong : "";
  }
  const reader = response.body.getReader();
  const pieces: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) {
      break;
    }
    size += value.byteLength;
    if (size > MAX_SIZE) {
      await reader.cancel().catch(() => undefined);
      return tooLong;
    }
    pieces.push(value);
  }
  const whole = new Uint8Array(size);
  let at = 0;
  for (const piece of pieces) {
    whole.set(piece, at);
    at += piece.byteLength;
  }
  return new TextDecoder().decode(whole);
}

/** The error a non-2xx response stands for. */
async function errorOf(response: Response): Promise<ReactStepError> {
  let text: string;
  try {
    const read = await bodyText(response);
    if (read instanceof ReactStepError) {
      return read;
    }
    text = read;
  } catch {
    return ReactStepError.unreadable(response.status, `HTTP ${response.status} with a body cut short`);
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return ReactStepError.unreadable(response.status, `HTTP ${response.status} whose body is not JSON`);
  }
  if (typeof body !== "object" || body === null || !("error" in body)) {
    return ReactStepError.unreadable(response.status, `HTTP ${response.status} without an error object`);
  }
  return ReactStepError.fromResponse(body as ErrorResponse, response.status, response.headers.get("retry-after"));
}

/** A parsed server-sent event as a typed one; `undefined` for an event this client does not know. */
function typed<T>(message: ServerSentEvent, status: number): StreamEvent<T> | undefined {
  const known = ["thought", "answer", "retry", "step", "error"];
  if (!known.includes(message.event)) {
    return undefined;
  }
  let data: unknown;
  try {
    data = JSON.parse(message.data);
  } catch {
    throw ReactStepError.unreadable(status, `the data of a ${message.event} event is not JSON`);
  }
  // What each event's data must hold for the caller to read it, or the stream is no stream of
  // the service's: a `null` or a wrong type there is an unreadable answer, not a TypeError.
  const field = (name: string): unknown => (isObject(data) ? data[name] : undefined);
  const unreadable = () => ReactStepError.unreadable(status, `the data of a ${message.event} event is not what the contract says`);
  switch (message.event) {
    case "thought":
    case "answer": {
      const delta = field("delta");
      if (typeof delta !== "string") throw unreadable();
      return { type: message.event, delta: (data as StreamDelta).delta };
    }
    case "retry": {
      const reason = field("reason");
      if (typeof reason !== "string") throw unreadable();
      return { type: "retry", reason: (data as StreamRetry).reason };
    }
    case "step":
      if (!isObject(data)) throw unreadable();
      return { type: "step", step: data as T };
    default: {
      const error = field("error");
      if (!isObject(error) || typeof error.type !== "string" || typeof error.message !== "string") {
        throw unreadable();
      }
      return { type: "error", error: ReactStepError.fromResponse(data as ErrorResponse, undefined) };
    }
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
