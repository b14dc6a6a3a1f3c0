// The one error type the client throws for an answer of the service that is not a step:
// a non-2xx response, an `error` event of a stream, or an answer that could not be read.
import type {
  ConversationTurn,
  ErrorBody,
  ErrorResponse,
  ErrorType,
  FieldError,
  LoopGuardReport,
  Usage,
} from "./types.js";

/**
 * The HTTP status of each error type, as openapi.yaml's table gives it. A stream reports its
 * error in an event of a 200 response; the error then carries the status the plain endpoint
 * would have answered. Typed over every `error.type` of the spec, so a new type in the contract
 * does not compile until it is placed here.
 */
const STATUS_OF: Record<ErrorType, number> = {
  invalid_request: 400,
  llm_model_not_found: 400,
  llm_request_rejected: 400,
  client_disconnected: 400,
  llm_auth: 401,
  unauthorized: 401,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  payload_too_large: 413,
  context_overflow: 422,
  loop_detected: 422,
  rate_limited: 429,
  llm_rate_limited: 429,
  headers_too_large: 431,
  internal_error: 500,
  llm_unavailable: 502,
  llm_bad_response: 502,
  invalid_model_output: 502,
  rate_limiter_unavailable: 503,
  at_capacity: 503,
  overloaded: 503,
  shutting_down: 503,
  llm_timeout: 504,
};

/**
 * The service's error types, `unreadable_response` for an answer that is not the service's
 * (a proxy's HTML page, a body cut short, a stream that ended without its terminal event, a
 * stream with a line or an event's data past 16 MiB), and `transport_error` for an answer that
 * stopped coming: a stream that went `streamIdleTimeoutMs` without its response head, or without
 * a whole event or heartbeat, and was closed (status 0, retryable), as the Python client's
 * `transport_error`.
 */
export type ReactStepErrorType = ErrorType | "unreadable_response" | "transport_error";

export class ReactStepError extends Error {
  override readonly name = "ReactStepError";
  /** The HTTP status (for an error event of a stream: the status its type has; 0 for a `transport_error`). */
  readonly status: number;
  readonly type: ReactStepErrorType;
  /** Whether sending the same request again can succeed. */
  readonly retryable: boolean;
  /** Seconds to wait before a retry (`Retry-After`, or `error.retry_after_seconds`). */
  readonly retryAfter: number | undefined;
  /** With `invalid_request`: each failing field and why. */
  readonly fields: FieldError[];
  /** With `invalid_model_output`: what the model wrote. */
  readonly rawOutput: string | undefined;
  /** With `loop_detected`: the loop the service's guard stopped. */
  readonly loopGuard: LoopGuardReport | undefined;
  /** The conversation as sent, echoed back so that nothing is lost. */
  readonly updatedConversationHistory: ConversationTurn[];
  /** Steps the loop may still take (`max_iterations_left` unchanged), when the body was read. */
  readonly iterationsRemaining: number | null;
  /** What the step's billed model calls spent before the failure. */
  readonly usage: Usage | null;
  readonly requestId: string | undefined;
  /** The whole error response, when the service sent one. */
  readonly response: ErrorResponse | undefined;

  constructor(init: {
    status: number;
    type: ReactStepErrorType;
    message: string;
    retryable: boolean;
    retryAfter?: number | undefined;
    response?: ErrorResponse | undefined;
  }) {
    super(init.message);
    this.status = init.status;
    this.type = init.type;
    this.retryable = init.retryable;
    this.retryAfter = init.retryAfter;
    this.response = init.response;
    const error: Partial<ErrorBody> = init.response?.error ?? {};
    this.fields = error.fields ?? [];
    this.rawOutput = error.raw_output;
    this.loopGuard = init.response?.loop_guard;
    this.updatedConversationHistory = init.response?.updated_conversation_history ?? [];
    this.iterationsRemaining = init.response?.iterations_remaining ?? null;
    this.usage = init.response?.usage ?? null;
    this.requestId = init.response?.request_id;
  }

  /** The error of an error response (a non-2xx body, or an `error` event's data). */
  static fromResponse(
    response: ErrorResponse,
    status: number | undefined,
    retryAfterHeader?: string | null,
  ): ReactStepError {
    const error = response.error;
    if (!error) {
      return ReactStepError.unreadable(status ?? 0, "an error response without its error object");
    }
    return new ReactStepError({
      status: status ?? STATUS_OF[error.type] ?? 500,
      type: error.type,
      message: error.message,
      retryable: error.retryable,
      retryAfter: parseRetryAfter(retryAfterHeader) ?? error.retry_after_seconds,
      response,
    });
  }

  /** An answer that is not the service's: retryable when the status says the server failed. */
  static unreadable(status: number, why: string): ReactStepError {
    return new ReactStepError({
      status,
      type: "unreadable_response",
      message: `the service's answer could not be read: ${why}`,
      retryable: status >= 500,
    });
  }
}

/** `Retry-After` as seconds: a number of seconds or an HTTP date. */
export function parseRetryAfter(value: string | null | undefined): number | undefined {
  if (value === null || value === undefined || value.trim() === "") {
    return undefined;
  }
  if (/^\d+$/.test(value.trim())) {
    return Number(value.trim());
  }
  const at = Date.parse(value);
  if (Number.isNaN(at)) {
    return undefined;
  }
  return Math.max(0, Math.ceil((at - Date.now()) / 1000));
}
