// The contract's types under short names. Everything here comes from the generated
// `generated/openapi.ts` (openapi-typescript over ../../openapi.yaml); nothing is written by hand
// but the joins of generated types below, so a change to the spec reaches the client's signatures.
import type { components } from "./generated/openapi.js";

type Schemas = components["schemas"];

export type ReactStepRequest = Schemas["ReactStepRequest"];
export type LlmConfig = Schemas["LlmConfig"];
/** A model of `llm_config.fallbacks`; its key goes in `user_api_keys.providerKeys`. */
export type LlmFallback = Schemas["LlmFallback"];
/** The model that answered a step (`model_used`). */
export type ModelUsed = Schemas["ModelUsed"];
/** A model of the fallback chain that failed (`fallback_attempts`). */
export type FallbackAttempt = Schemas["FallbackAttempt"];
export type ConversationTurn = Schemas["ConversationTurn"];
export type ToolDeclaration = Schemas["Tool"];
export type ToolCall = Schemas["ToolCall"];
export type ActionDetails = Schemas["ActionDetails"];
export type Usage = Schemas["Usage"];
export type ContextReport = Schemas["ContextReport"];
/** What the service's loop guard found (`loop_guard` of a step or of a `loop_detected` error). */
export type LoopGuardReport = Schemas["LoopGuardReport"];
/** A 2xx answer of `react_step`, and the data of the stream's `step` event. */
export type StepResponse = Schemas["StepSuccess"];
export type ActionProposed = Schemas["ActionProposed"];
export type DirectResponseProvided = Schemas["DirectResponseProvided"];
export type DryRun = Schemas["DryRun"];
/** A non-2xx answer, and the data of the stream's `error` event. */
export type ErrorResponse = Schemas["ErrorResponse"];
export type ErrorBody = Schemas["ErrorBody"];
/** Every `error.type` the service answers. */
export type ErrorType = ErrorBody["type"];
export type FieldError = NonNullable<ErrorBody["fields"]>[number];
export type StreamDelta = Schemas["StreamDelta"];
export type StreamRetry = Schemas["StreamRetry"];

/** A request of `POST /api/agent/plan`: a step's request, with `previous_plan` and `latest_observation` to adjust a plan. */
export type PlanRequest = Schemas["PlanRequest"];
/** A request of `POST /api/agent/evaluate`: a step's request, with `candidate_answer` and the `plan` followed. */
export type EvaluateRequest = Schemas["EvaluateRequest"];
/** What `plan` answers: the task's complexity, its steps, and the iterations it should take. */
export type ExecutionPlan = Schemas["ExecutionPlan"];
/** One step of an `ExecutionPlan`. */
export type PlanStep = Schemas["PlanStep"];
/** What `evaluate` answers; `needs_retry` as the service's rules decide it. */
export type QualityEvaluation = Schemas["QualityEvaluation"];
// The spec's `PlanSuccess` and `EvaluateSuccess` add `required: [plan]` (`[evaluation]`) to
// `DirectResponseProvided`, which openapi-typescript renders as `& unknown`: the two answers are
// put together here from the generated parts, with the field made non-optional.
/** A plan made: a final answer whose `plan` is always there. */
export type PlanMade = DirectResponseProvided & { plan: ExecutionPlan };
/** A 2xx answer of `plan`, and the data of its stream's `step` event: the plan, or a dry run. */
export type PlanResponse = PlanMade | DryRun;
/** An evaluation made: a final answer whose `evaluation` is always there. */
export type EvaluationMade = DirectResponseProvided & { evaluation: QualityEvaluation };
/** A 2xx answer of `evaluate`, and the data of its stream's `step` event: the evaluation, or a dry run. */
export type EvaluateResponse = EvaluationMade | DryRun;

/** A JSON Schema, as a tool's `parameters`. */
export type JsonSchema = NonNullable<ToolDeclaration["parameters"]>;
