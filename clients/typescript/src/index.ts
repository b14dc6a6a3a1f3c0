// @reactstep/client: a typed client for reactstep, whose types come from openapi.yaml.
export { ReactStepClient } from "./client.js";
export type { CallOptions, ClientOptions, RetryOptions, StreamEvent } from "./client.js";
export { ReactStepError, parseRetryAfter } from "./errors.js";
export type { ReactStepErrorType } from "./errors.js";
export { runLoop } from "./loop.js";
export type { ApprovalDecision, ApprovalOutcome, ApprovalRequest, Approver } from "./approval.js";
export type { PlanApprovalRequest, PlanApprover, PlanDecision } from "./plan.js";
export type {
  LoopEvaluation,
  LoopEvent,
  LoopOptions,
  LoopPlanAdjustment,
  LoopResult,
  LoopStep,
  LoopTool,
  TerminationReason,
  ToolContext,
} from "./loop.js";
export type * from "./types.js";
export type { components, operations, paths } from "./generated/openapi.js";
