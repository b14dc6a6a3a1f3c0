// Approval before a tool runs: a call to a tool marked `needsApproval` runs only once the loop's
// `approve` says so. `approve` may run it as proposed, deny it with a reason the model reads, or
// run it with other arguments. Whatever else it answers is refused: the call is not run and the
// model is told why. The calls of one step are asked about one after another, in their order.
import type { ActionDetails } from "./types.js";

/** What `approve` is asked about: one call the model proposed. */
export interface ApprovalRequest {
  toolCallId: string | undefined;
  tool: string;
  /** A copy of the proposed arguments: changing it changes nothing (answer `edit` for that). */
  arguments: Record<string, unknown>;
  iteration: number;
  /** The loop's signal: when it aborts, the loop ends as `cancelled` without waiting for the answer. */
  signal: AbortSignal | undefined;
}

export type ApprovalDecision =
  | { decision: "approve" }
  /** The call is not run; the model reads "The user denied this call" and the reason. */
  | { decision: "deny"; reason: string }
  /** The call runs with these arguments instead, which must be a plain JSON object. */
  | { decision: "edit"; arguments: Record<string, unknown> };

export type Approver = (request: ApprovalRequest) => ApprovalDecision | Promise<ApprovalDecision>;

/** What became of a call that needed approval: `denied` whenever it did not run. */
export type ApprovalOutcome = "approved" | "denied" | "edited";

/** A call's fate: run with these arguments, or answered with an error observation unrun. */
export type Verdict =
  | { run: true; args: Record<string, unknown>; approval?: ApprovalOutcome }
  | { run: false; observation: string; approval: ApprovalOutcome };

/** Why the loop ends while asking: the caller aborted, or `approve` threw. */
export type ApprovalStop = { stop: "cancelled" } | { stop: "failure"; message: string };

export interface Approvals {
  approve: Approver | undefined;
  needsApproval: (tool: string) => boolean;
  signal: AbortSignal | undefined;
  /** Told each decision, as it is made. */
  decided: (call: ActionDetails, outcome: ApprovalOutcome) => void;
}

/** The verdict on each call, in the calls' order, asking about one call at a time. */
export async function approveCalls(
  calls: ActionDetails[],
  iteration: number,
  approvals: Approvals,
): Promise<Verdict[] | ApprovalStop> {
  const verdicts: Verdict[] = [];
  for (const call of calls) {
    if (!approvals.needsApproval(call.tool_name)) {
      verdicts.push({ run: true, args: call.tool_args });
      continue;
    }
    const verdict = await ask(call, iteration, approvals);
    if ("stop" in verdict) {
      return verdict;
    }
    approvals.decided(call, verdict.approval ?? "approved");
    verdicts.push(verdict);
  }
  return verdicts;
}

const NO_APPROVER =
  "This call needs the user's approval and no one could approve it (the loop has no approve function), so it did not run.";

async function ask(call: ActionDetails, iteration: number, approvals: Approvals): Promise<Verdict | ApprovalStop> {
  const { approve, signal } = approvals;
  if (approve === undefined) {
    return { run: false, approval: "denied", observation: NO_APPROVER };
  }
  if (signal?.aborted) {
    return { stop: "cancelled" };
  }
  const request: ApprovalRequest = {
    toolCallId: call.tool_call_id,
    tool: call.tool_name,
    arguments: structuredClone(call.tool_args),
    iteration,
    signal,
  };
  let answer: unknown;
  try {
    answer = await untilAborted(Promise.resolve().then(() => approve(request)), signal);
  } catch (error) {
    return signal?.aborted ? { stop: "cancelled" } : { stop: "failure", message: `approving ${call.tool_name} failed: ${messageOf(error)}` };
  }
  return answer === ABORTED ? { stop: "cancelled" } : verdict(answer, call.tool_args);
}

const ABORTED = Symbol("aborted");

/** `promise`'s outcome, or `ABORTED` as soon as `signal` aborts, whichever comes first. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T | typeof ABORTED> {
  if (signal === undefined) {
    return promise;
  }
  return new Promise((resolve, reject) => {
    const onAbort = (): void => resolve(ABORTED);
    if (signal.aborted) {
      onAbort();
    }
    signal.addEventListener("abort", onAbort, { once: true });
    void promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** What `approve`'s answer means for the call; an answer that cannot even be read is refused. */
function verdict(answer: unknown, proposed: Record<string, unknown>): Verdict {
  try {
    return read(answer, proposed);
  } catch (error) {
    return refused(`reading the decision threw: ${messageOf(error)}`);
  }
}

function read(answer: unknown, proposed: Record<string, unknown>): Verdict {
  const fields = typeof answer === "object" && answer !== null ? (answer as Record<string, unknown>) : {};
  const decision = fields["decision"];
  if (decision === "approve") {
    return { run: true, args: proposed, approval: "approved" };
  }
  if (decision === "deny" && typeof fields["reason"] === "string") {
    return { run: false, approval: "denied", observation: denial(fields["reason"]) };
  }
  if (decision === "edit") {
    const edited = fields["arguments"];
    const problem = notJsonObject(edited);
    return problem === undefined
      ? { run: true, args: structuredClone(edited as Record<string, unknown>), approval: "edited" }
      : { run: false, approval: "denied", observation: `The user's edit of this call was refused, so it did not run: ${problem}.` };
  }
  return refused(`${describe(answer)} is none of {decision: "approve"}, {decision: "deny", reason} or {decision: "edit", arguments}`);
}

function denial(reason: string): string {
  return reason.trim() === "" ? "The user denied this call (no reason given)." : `The user denied this call: ${reason}`;
}

function refused(why: string): Verdict {
  return { run: false, approval: "denied", observation: `The approval's answer was refused, so this call did not run: ${why}.` };
}

/** Why `value` is not a plain JSON object (the arguments of a call), or `undefined` when it is. */
export function notJsonObject(value: unknown): string | undefined {
  if (!isPlainObject(value)) {
    return `the arguments are ${kind(value)}, not a JSON object`;
  }
  return jsonProblem(value, "arguments", new Set());
}

function jsonProblem(value: unknown, where: string, within: Set<object>): string | undefined {
  if (value === null || typeof value === "string" || typeof value === "boolean") {
    return undefined;
  }
  if (typeof value === "number") {
    return Number.isFinite(value) ? undefined : `${where} is ${value}, not a JSON number`;
  }
  if (typeof value !== "object" || (!Array.isArray(value) && !isPlainObject(value))) {
    return `${where} is ${kind(value)}, not JSON`;
  }
  if (within.has(value)) {
    return `${where} contains itself`;
  }
  within.add(value);
  const items: [string, unknown][] = Array.isArray(value)
    ? Array.from(value, (item, index) => [`${where}[${index}]`, item])
    : Object.entries(value).map(([key, item]) => [`${where}.${key}`, item]);
  for (const [path, item] of items) {
    const problem = jsonProblem(item, path, within);
    if (problem !== undefined) {
      return problem;
    }
  }
  within.delete(value);
  return undefined;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return false;
  }
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function kind(value: unknown): string {
  if (value === null) {
    return "null";
  }
  if (Array.isArray(value)) {
    return "an array";
  }
  if (typeof value === "object") {
    const name: unknown = Object.getPrototypeOf(value)?.constructor?.name;
    return typeof name === "string" && name !== "" ? `a ${name}` : "an object that is not plain";
  }
  return value === undefined ? "undefined" : `a ${typeof value}`;
}

/** The answer as the refusal shows it: its JSON when it has one, cut short. */
function describe(answer: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(answer);
  } catch {
    text = undefined;
  }
  text ??= kind(answer);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

function messageOf(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return "a value that cannot be shown";
  }
}
