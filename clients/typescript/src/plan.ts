// What `runLoop` does around a plan and an evaluation: asking `approvePlan` about the plan, the
// name the plan goes by in each step's context, how many times a run it is adjusted, and the
// question that sends the model on when an evaluation asks for a retry.
import type { ExecutionPlan, QualityEvaluation } from "./types.js";

/** What `approvePlan` is asked about: the plan, before any step runs. */
export interface PlanApprovalRequest {
  /** A copy of the plan: changing it changes nothing. */
  plan: ExecutionPlan;
  /** The loop's signal: when it aborts, the loop ends as `cancelled` without waiting for the answer. */
  signal: AbortSignal | undefined;
}

export type PlanDecision =
  | { decision: "approve" }
  /** No step runs; the loop ends as `plan_rejected`, its answer naming the reason. */
  | { decision: "reject"; reason?: string };

export type PlanApprover = (request: PlanApprovalRequest) => PlanDecision | Promise<PlanDecision>;

/** What became of the plan: approved (no `stop`), rejected, or the loop's end while asking. */
export type PlanVerdict =
  | { stop: undefined; reason: undefined }
  | { stop: "rejected"; reason: string | undefined }
  | { stop: "cancelled" }
  | { stop: "failure"; message: string };

const ABORTED = Symbol("aborted");

/** Asks `approve` about `plan`; a throw or an answer that is no decision is a failure. */
export async function decidePlan(
  approve: PlanApprover,
  plan: ExecutionPlan,
  signal: AbortSignal | undefined,
): Promise<PlanVerdict> {
  if (signal?.aborted) {
    return { stop: "cancelled" };
  }
  let answer: unknown;
  try {
    const asked = Promise.resolve().then(() => approve({ plan: structuredClone(plan), signal }));
    answer = await untilAborted(asked, signal);
  } catch (error) {
    return signal?.aborted ? { stop: "cancelled" } : { stop: "failure", message: `approving the plan failed: ${messageOf(error)}` };
  }
  if (answer === ABORTED) {
    return { stop: "cancelled" };
  }
  const fields = typeof answer === "object" && answer !== null ? (answer as Record<string, unknown>) : {};
  if (fields["decision"] === "approve") {
    return { stop: undefined, reason: undefined };
  }
  const reason = fields["reason"];
  if (fields["decision"] === "reject" && (reason === undefined || typeof reason === "string")) {
    return { stop: "rejected", reason: reason === undefined || reason.trim() === "" ? undefined : reason };
  }
  return {
    stop: "failure",
    message: `approving the plan failed: ${describe(answer)} is neither {decision: "approve"} nor {decision: "reject", reason}`,
  };
}

/** `promise`'s outcome, or `ABORTED` as soon as `signal` aborts, whichever comes first. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T | typeof ABORTED> {
  if (signal === undefined) {
    return promise;
  }
  return new Promise((resolve, reject) => {
    const onAbort = (): void => resolve(ABORTED);
    signal.addEventListener("abort", onAbort, { once: true });
    void promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function describe(answer: unknown): string {
  try {
    return JSON.stringify(answer) ?? String(answer);
  } catch {
    return String(answer);
  }
}

/** The name the plan is sent under with each step, as a file of its context (as the Rust driver's). */
export const PLAN_FILE = "execution-plan.json";

/**
 * Tries at adjusting the plan after a failed call in one run, at most (the driver's
 * `MAX_ADJUSTMENTS`): each is a model call, and a model that keeps failing should not be
 * replanned without end. A plan request that failed counts too, so a service that cannot plan
 * (its provider down) costs a run three calls, not one per failed call.
 */
export const MAX_PLAN_ADJUSTMENTS = 3;

/** The user's turn after an evaluation asked for a retry: what is missing, and what to do. */
export function retryQuery(evaluation: QualityEvaluation): string {
  const lines = [
    `Your answer is not complete yet (completeness ${evaluation.completeness_score}/10, quality ${evaluation.quality_score}/10). Go on, then answer again, whole.`,
  ];
  if (evaluation.missing_info.length > 0) {
    lines.push("What is missing:", ...evaluation.missing_info.map((item) => `- ${item}`));
  }
  if (evaluation.suggestions.length > 0) {
    lines.push("Suggestions:", ...evaluation.suggestions.map((item) => `- ${item}`));
  }
  return lines.join("\n");
}
