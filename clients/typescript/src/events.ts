// What a call takes and what a streamed step yields: shared by the client (client.ts) and the
// loop (loop.ts), which drives any sender of steps, so neither imports the other.
import type { ReactStepError } from "./errors.js";
import type { ReactStepRequest, StepResponse } from "./types.js";

export interface CallOptions {
  /** Aborting it stops the request, and the service stops the step and its model call. */
  signal?: AbortSignal;
}

/** One server-sent event of a streamed step. Heartbeats and unknown events are skipped. */
export type StreamEvent =
  /** A piece of the thought as the model writes it. */
  | { type: "thought"; delta: string }
  /** A piece of a final answer as the model writes it. */
  | { type: "answer"; delta: string }
  /** The output so far was not a valid step: drop the deltas received; the next try's follow. */
  | { type: "retry"; reason: string }
  /** The complete step, as `step()` returns it. The last event. */
  | { type: "step"; step: StepResponse }
  /** The step failed after the stream began. The last event. */
  | { type: "error"; error: ReactStepError };

/** What the loop needs of a client: one step, plain or streamed. `ReactStepClient` is one. */
export interface StepSender {
  step(request: ReactStepRequest, options?: CallOptions): Promise<StepResponse>;
  stream(request: ReactStepRequest, options?: CallOptions): AsyncIterable<StreamEvent>;
}
