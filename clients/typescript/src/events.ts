// What a call takes and what a streamed step yields: shared by the client (client.ts) and the
// loop (loop.ts), which drives any sender of steps, so neither imports the other.
import type { ReactStepError } from "./errors.js";
import type {
  EvaluateRequest,
  EvaluateResponse,
  PlanRequest,
  PlanResponse,
  ReactStepRequest,
  StepResponse,
} from "./types.js";

export interface CallOptions {
  /** Aborting it stops the request, and the service stops the step and its model call. */
  signal?: AbortSignal;
}

/**
 * One server-sent event of a streamed step (`S`: what its `step` event carries, a `StepResponse`
 * for `stream`, a `PlanResponse` for `streamPlan`, an `EvaluateResponse` for `streamEvaluate`).
 * Heartbeats and unknown events are skipped.
 */
export type StreamEvent<S = StepResponse> =
  /** A piece of the thought as the model writes it. */
  | { type: "thought"; delta: string }
  /** A piece of a final answer as the model writes it (for a plan or an evaluation: its JSON). */
  | { type: "answer"; delta: string }
  /** The output so far was not a valid step: drop the deltas received; the next try's follow. */
  | { type: "retry"; reason: string }
  /** The complete step, as the plain call returns it. The last event. */
  | { type: "step"; step: S }
  /** The step failed after the stream began. The last event. */
  | { type: "error"; error: ReactStepError };

/**
 * What the loop needs of a client: one step, plain or streamed; and for `runLoop`'s `plan` and
 * `reflect`, a plan and an evaluation. `ReactStepClient` is one.
 */
export interface StepSender {
  step(request: ReactStepRequest, options?: CallOptions): Promise<StepResponse>;
  stream(request: ReactStepRequest, options?: CallOptions): AsyncIterable<StreamEvent>;
  plan?(request: PlanRequest, options?: CallOptions): Promise<PlanResponse>;
  evaluate?(request: EvaluateRequest, options?: CallOptions): Promise<EvaluateResponse>;
}
