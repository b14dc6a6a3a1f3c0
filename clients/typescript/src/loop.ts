// The loop an editor plugin runs: send the step, run the proposed calls (several at once when the
// model proposed several), answer each call's id with a `tool_observation`, and go on until the
// model answers, the loop stalls, fails, runs out of steps, or the caller cancels. The
// termination reasons are those of the Rust driver (`reactstep run`, src/driver/run.rs), and
// `plan_rejected`. With `plan` it asks for a plan first (and the caller's approval of it), sends
// it with each step and has it adjusted after a failed call; with `reflect` it has each final
// answer evaluated before accepting it, as `reactstep run --plan --reflect` does
// (src/driver/reflection.rs; plan.ts here).
import { approveCalls, type ApprovalOutcome, type Approver, type Verdict } from "./approval.js";
import type { CallOptions, StepSender } from "./events.js";
import { ReactStepError } from "./errors.js";
import { decidePlan, MAX_PLAN_ADJUSTMENTS, PLAN_FILE, retryQuery, type PlanApprover } from "./plan.js";
import type {
  ActionDetails,
  ConversationTurn,
  EvaluateRequest,
  ExecutionPlan,
  JsonSchema,
  LlmConfig,
  PlanRequest,
  QualityEvaluation,
  ReactStepRequest,
  StepResponse,
  ToolDeclaration,
} from "./types.js";

/** A tool the model may call: its JSON Schema, and what runs it. */
export interface LoopTool {
  description?: string;
  /** JSON Schema of the arguments object; the service checks every call against it. */
  parameters?: JsonSchema;
  /** Runs the call; what it returns is the observation. A throw is a failed call, told to the model. */
  run: (args: Record<string, unknown>, context: ToolContext) => Promise<string>;
  /** Each call asks the loop's `approve` first (tools that write or run something). */
  needsApproval?: boolean;
}

export interface ToolContext {
  /** The loop's signal: a long tool should stop when it aborts. */
  signal: AbortSignal | undefined;
  toolCallId: string | undefined;
  iteration: number;
}

/** `plan_rejected`: `approvePlan` rejected the plan, and no step ran. */
export type TerminationReason = "success" | "max_iterations" | "stalled" | "cancelled" | "failure" | "plan_rejected";

export interface LoopOptions {
  question: string;
  /** The tools by name. */
  tools: Record<string, LoopTool>;
  llmConfig: LlmConfig;
  /** The user's own LLM key (`user_api_keys.llmKey`), for the first model of `llmConfig`. */
  key?: string;
  /**
   * The keys of `llmConfig.fallbacks`, by provider (`user_api_keys.providerKeys`): each is sent
   * to its provider only, never `key`.
   */
  providerKeys?: Record<string, string>;
  /** Steps at most (default 10); the last one asks the model to answer. */
  maxIterations?: number;
  /**
   * A turn's calls (`parallel_actions`) run at most this many at once (default 8); the rest
   * wait their turn. Below 1 is 1.
   */
  maxParallelTools?: number;
  /**
   * The same call (tool and arguments) this many times in a row ends the loop as `stalled`
   * (default 6). The service's loop guard (`request.react.loop_guard`) acts first: it warns the
   * model at the third such call and refuses the sixth, ending the loop as `stalled` with its
   * `loop_detected` error in `errors`; this count is the backstop for a guard set off or higher.
   */
  stallThreshold?: number;
  /** An answer holding one of these (case aside) ends the loop as `failure`. */
  failurePhrases?: string[];
  /**
   * Asked about each call to a tool marked `needsApproval`, before it runs: approve it, deny it
   * (the model reads the reason), or edit its arguments. Without it such calls are denied. A
   * throw ends the loop as `failure`; aborting `signal` meanwhile ends it as `cancelled`.
   */
  approve?: Approver;
  /** Everything the loop does, as it happens. */
  onEvent?: (event: LoopEvent) => void;
  /** Aborting it stops the step or tools in progress; the loop ends as `cancelled`. */
  signal?: AbortSignal;
  /** Steps through the streaming endpoint, so thought deltas arrive as they form (default true). */
  stream?: boolean;
  /**
   * A scripted model: one output per request the loop sends, in order, as its `mock_response`
   * (offline runs, tests): with `plan` the plan's output first and each adjustment's right after
   * the step whose call failed, with `reflect` each evaluation's output right after the answer it
   * evaluates.
   */
  mockResponses?: string[];
  /**
   * Plan first: before the first step, `plan()` with the question, the tools and `request`'s
   * context. The plan goes to `onEvent` (`plan`), to `approvePlan` when given, into the result,
   * with every step as a file of its context (`execution-plan.json` in `explicit_context`, as
   * `reactstep run --plan` sends it), and with `reflect` into each evaluation (its
   * `estimated_iterations` bounds the retries). A plan the service could not make ends the loop
   * as `failure` (`no plan was made: …`) before any step.
   *
   * After each failed call (its observation an error: the tool threw, there is no such tool, or
   * the call was denied) the plan is adjusted: `plan()` again with the plan in force as
   * `previous_plan` and the call's observation as `latest_observation`, at most 3 tries a run
   * (a plan request that failed counts: each is a model call). The adjusted plan replaces the
   * one sent with the steps after it and the one each evaluation gets; it goes to `onEvent`
   * (`adjusting_plan`, then `plan_adjustment`) and into `planAdjustments`. A plan request that
   * fails leaves the plan as it was and the loop going on, the failure in `errors` (`the plan
   * adjustment failed: …`), as `reactstep run --plan` does.
   */
  plan?: boolean;
  /**
   * Asked about the plan before any step runs (implies `plan`): `{ decision: "approve" }`, or
   * `{ decision: "reject", reason }`, which ends the loop as `plan_rejected` with no step run
   * (`the plan was not approved, so nothing ran: <reason>`). A
   * throw, or an answer that is neither, ends it as `failure`; aborting `signal` meanwhile ends
   * it as `cancelled`.
   */
  approvePlan?: PlanApprover;
  /**
   * Reflect before accepting a final answer: `evaluate()` with the question, the loop's history,
   * the answer and the plan. When the service's `needs_retry` says so (completeness under 7),
   * the loop goes on with a user turn telling the model what is missing and what to do; otherwise
   * the answer stands. Bounded by `maxIterations`, and with `plan` by the service's rule (never a
   * retry past the plan's `estimated_iterations` + 2 steps). When no evaluation can be had (the
   * service's error, the scripted responses run out) the answer stands, the failure in `errors`,
   * as `reactstep run --reflect` does. Answers that end the loop anyway (a failure phrase, the
   * last step's) are not evaluated.
   */
  reflect?: boolean;
  /**
   * A JSON Schema the final answer must match (`react.final_answer_schema`): the answer comes
   * back parsed in `answerJson`.
   */
  finalAnswerSchema?: Record<string, unknown> | boolean;
  /** More fields for every step's request: code context, `react` settings, `session_id` … */
  request?: Partial<Omit<ReactStepRequest, "user_query" | "conversation_history" | "llm_config" | "tools" | "max_iterations_left">>;
}

export type LoopEvent =
  | { type: "waiting"; iteration: number }
  | { type: "thought_delta"; iteration: number; delta: string }
  | { type: "answer_delta"; iteration: number; delta: string }
  /** The deltas of this step so far are void; the model is asked again. */
  | { type: "retry"; iteration: number; reason: string }
  | { type: "thought"; iteration: number; thought: string }
  | { type: "action"; iteration: number; tool: string; args: Record<string, unknown>; toolCallId: string | undefined }
  /** What became of a call to a tool marked `needsApproval`, before it runs (or does not). */
  | { type: "approval"; iteration: number; tool: string; toolCallId: string | undefined; decision: ApprovalOutcome }
  | {
      type: "observation";
      iteration: number;
      tool: string;
      toolCallId: string | undefined;
      observation: string;
      isError: boolean;
    }
  | { type: "answer"; iteration: number; answer: string }
  /** With `plan`: the plan is being asked for, before the first step (iteration 0). */
  | { type: "planning"; iteration: 0 }
  /** The plan the loop follows (before `approvePlan` is asked about it). */
  | { type: "plan"; iteration: 0; plan: ExecutionPlan }
  /** What `approvePlan` decided; `reason` with a rejection. */
  | { type: "plan_approval"; iteration: 0; approved: boolean; reason: string | undefined }
  /** With `reflect`: the answer of this iteration is being evaluated. */
  | { type: "evaluating"; iteration: number; answer: string }
  /** Its evaluation; with `needs_retry` the loop goes on (unless out of steps). */
  | { type: "evaluation"; iteration: number; answer: string; evaluation: QualityEvaluation }
  /** With a plan: this failed call's observation is being sent to have the plan adjusted. */
  | { type: "adjusting_plan"; iteration: number; tool: string; toolCallId: string | undefined; observation: string }
  /** The adjusted plan, which the steps from now on follow. */
  | ({ type: "plan_adjustment" } & LoopPlanAdjustment);

/** A final answer the loop had evaluated (`reflect`), and what the service made of it. */
export interface LoopEvaluation {
  iteration: number;
  answer: string;
  evaluation: QualityEvaluation;
}

/** The plan adjusted after a failed call (`plan`), and the call it was adjusted to. */
export interface LoopPlanAdjustment {
  /** The step that proposed the call. */
  iteration: number;
  tool: string;
  toolCallId: string | undefined;
  /** The call's observation, sent as `latest_observation`. */
  observation: string;
  /** The whole plan as the service adjusted it. */
  plan: ExecutionPlan;
}

/** One call the model proposed, and what the loop answered it with. */
export interface LoopStep {
  iteration: number;
  thought: string;
  tool: string;
  /** The arguments it ran with: the user's edit, when `approval` is `edited`. */
  args: Record<string, unknown>;
  toolCallId: string | undefined;
  observation: string;
  isError: boolean;
  /** For a tool marked `needsApproval`: `denied` whenever the call did not run. */
  approval?: ApprovalOutcome;
}

export interface LoopResult {
  /** The model's answer, or why the loop ended without one. */
  answer: string;
  /** With `finalAnswerSchema`: the answer as the JSON value that matched it. */
  answerJson?: unknown;
  success: boolean;
  terminationReason: TerminationReason;
  /** Steps the service answered. */
  iterations: number;
  steps: LoopStep[];
  /** Calls per tool. */
  toolUsage: Record<string, number>;
  /** The service's error that ended the loop, or the tools' failures, in order. */
  errors: { source: string; message: string; error?: ReactStepError }[];
  /** Tokens the service reported, summed over the steps (the plans and the evaluations included). */
  usage: { promptTokens: number; completionTokens: number };
  /** With `plan`: the plan made before the first step (as it was approved, with `approvePlan`). */
  plan?: ExecutionPlan;
  /** With `plan`: each adjustment after a failed call, in order; the last one's plan is the one in force. */
  planAdjustments: LoopPlanAdjustment[];
  /** With `reflect`: each final answer evaluated, in order (the last one the loop's answer, unless it ended otherwise). */
  evaluations: LoopEvaluation[];
  /** The conversation at the end: send it with the next question to go on. */
  history: ConversationTurn[];
  sessionId: string | undefined;
}

const DEFAULT_FAILURE_PHRASES = ["i cannot complete", "i can't complete", "unable to complete the task"];

/** Runs the loop on `options.question` to its end, through `client`. */
export async function runLoop(client: StepSender, options: LoopOptions): Promise<LoopResult> {
  const loop = new Loop(client, options);
  return loop.run();
}

class Loop {
  private readonly result: LoopResult = {
    answer: "",
    success: false,
    terminationReason: "failure",
    iterations: 0,
    steps: [],
    toolUsage: {},
    errors: [],
    usage: { promptTokens: 0, completionTokens: 0 },
    planAdjustments: [],
    evaluations: [],
    history: [],
    sessionId: undefined,
  };
  private readonly declarations: ToolDeclaration[];
  private lastCall: { key: string; count: number } | undefined;
  /** Plan adjustments asked for, made or not (`MAX_PLAN_ADJUSTMENTS` bounds them). */
  private planAdjustmentTries = 0;
  /** Scripted outputs used so far (`mockResponses`). */
  private scripted = 0;

  constructor(
    private readonly client: StepSender,
    private readonly options: LoopOptions,
  ) {
    this.declarations = Object.entries(options.tools).map(([name, tool]) => ({
      name,
      description: tool.description ?? null,
      parameters: tool.parameters ?? { type: "object", properties: {} },
    }));
    this.result.sessionId = options.request?.session_id ?? undefined;
  }

  async run(): Promise<LoopResult> {
    let query = this.options.question;
    let iterationsLeft = Math.max(1, Math.floor(this.options.maxIterations ?? 10));
    if (this.options.plan === true || this.options.approvePlan !== undefined) {
      const ended = await this.planFirst(iterationsLeft);
      if (ended !== undefined) {
        return ended;
      }
    }
    for (let iteration = 1; ; iteration += 1) {
      if (this.options.signal?.aborted) {
        return this.end("cancelled", "the loop was cancelled");
      }
      const request = this.scriptedOrNot(this.withPlan(this.request(query, iterationsLeft)));
      if (request === undefined) {
        return this.ranOut();
      }
      let step: StepResponse;
      try {
        step = readable(await this.send(request, iteration));
      } catch (error) {
        return this.failed(error);
      }
      this.result.iterations = iteration;
      this.took(step);
      this.result.history = step.updated_conversation_history;
      if (step.thought) {
        this.emit({ type: "thought", iteration, thought: step.thought });
      }
      if (step.status === "direct_response_provided") {
        const answered = await this.answered(step, iteration);
        if (typeof answered !== "string") {
          return answered;
        }
        // The evaluation asked for more: the model reads what is missing and goes on.
        query = answered;
        iterationsLeft = leftAfter(step, iterationsLeft);
        if (iterationsLeft <= 0) {
          return this.end("max_iterations", step.direct_response ?? "");
        }
        continue;
      }
      if (step.status !== "action_proposed" || !step.action_details) {
        return this.end("failure", `the service answered a step of status ${step.status}`);
      }
      const ended = await this.act(step, iteration, request.conversation_history ?? []);
      if (ended !== undefined) {
        return ended;
      }
      query = "";
      iterationsLeft = leftAfter(step, iterationsLeft);
      if (iterationsLeft <= 0) {
        return this.end("max_iterations", "the loop reached its step limit before an answer");
      }
    }
  }

  /** The request of a step (of a plan or an evaluation without `max_iterations_left`). */
  private request(query: string, iterationsLeft: number | undefined): ReactStepRequest {
    const request: ReactStepRequest = {
      ...this.options.request,
      user_query: query,
      conversation_history: this.result.history,
      llm_config: this.options.llmConfig,
      tools: this.declarations,
    };
    if (iterationsLeft !== undefined) {
      request.max_iterations_left = iterationsLeft;
    }
    if (this.result.sessionId !== undefined) {
      request.session_id = this.result.sessionId;
    }
    if (this.options.finalAnswerSchema !== undefined) {
      request.react = { ...(request.react ?? {}), final_answer_schema: this.options.finalAnswerSchema };
    }
    const keys = { ...(this.options.request?.user_api_keys ?? {}) };
    if (this.options.key !== undefined) {
      keys.llmKey = this.options.key;
    }
    if (this.options.providerKeys !== undefined) {
      keys.providerKeys = this.options.providerKeys;
    }
    if (Object.keys(keys).length > 0) {
      request.user_api_keys = keys;
    }
    return request;
  }

  /** The plan in force: the last adjustment's, else the one made first. */
  private currentPlan(): ExecutionPlan | undefined {
    return this.result.planAdjustments.at(-1)?.plan ?? this.result.plan;
  }

  /** A step's request with the plan, as a file of its context (as `reactstep run --plan` sends it). */
  private withPlan(request: ReactStepRequest): ReactStepRequest {
    const plan = this.currentPlan();
    if (plan === undefined) {
      return request;
    }
    const file = { path: PLAN_FILE, content: JSON.stringify(plan) };
    return { ...request, explicit_context: [...(request.explicit_context ?? []), file] };
  }

  /** The request with the scripted model's next output; `undefined` when it has none left. */
  private scriptedOrNot<T extends ReactStepRequest>(request: T): T | undefined {
    const script = this.options.mockResponses;
    if (script === undefined) {
      return request;
    }
    const output = script[this.scripted];
    if (output === undefined) {
      return undefined;
    }
    this.scripted += 1;
    return { ...request, mock_response: output };
  }

  private ranOut(): LoopResult {
    return this.end("failure", `the scripted responses ran out after ${this.scripted} steps`);
  }

  /** A step's session and tokens, into the result (a plan's and an evaluation's too). */
  private took(step: { session_id?: string | null; usage?: StepResponse["usage"] }): void {
    this.result.sessionId = step.session_id ?? this.result.sessionId;
    this.result.usage.promptTokens += step.usage?.prompt_tokens ?? 0;
    this.result.usage.completionTokens += step.usage?.completion_tokens ?? 0;
  }

  /** The request of a plan or an evaluation: the loop's, without a final answer schema (refused there). */
  private sideRequest(query: string): ReactStepRequest {
    const request = this.request(query, undefined);
    if (request.react?.final_answer_schema !== undefined) {
      const { final_answer_schema: _schema, ...react } = request.react;
      request.react = react;
    }
    return request;
  }

  private call(): CallOptions {
    return this.options.signal ? { signal: this.options.signal } : {};
  }

  /** Asks for the plan and for its approval; the loop's end when it ends there. */
  private async planFirst(maxIterations: number): Promise<LoopResult | undefined> {
    if (this.client.plan === undefined) {
      return this.end("failure", "the loop was asked to plan, and its client has no plan()");
    }
    const request = this.scriptedOrNot<PlanRequest>(this.sideRequest(this.options.question));
    if (request === undefined) {
      return this.ranOut();
    }
    this.emit({ type: "planning", iteration: 0 });
    let plan: ExecutionPlan;
    try {
      const response = await this.client.plan({ ...request, max_iterations_left: maxIterations }, this.call());
      this.took(response);
      if (response.status !== "direct_response_provided") {
        return this.end("failure", `no plan was made: the service answered a plan of status ${response.status}`);
      }
      plan = response.plan;
    } catch (error) {
      return this.failed(error, "no plan was made: ");
    }
    this.result.plan = plan;
    this.emit({ type: "plan", iteration: 0, plan });
    if (this.options.approvePlan !== undefined) {
      const decision = await decidePlan(this.options.approvePlan, plan, this.options.signal);
      if (decision.stop === "cancelled") {
        return this.end("cancelled", "the loop was cancelled");
      }
      if (decision.stop === "failure") {
        this.result.errors.push({ source: "approval", message: decision.message });
        return this.end("failure", decision.message);
      }
      this.emit({ type: "plan_approval", iteration: 0, approved: decision.stop === undefined, reason: decision.reason });
      if (decision.stop === "rejected") {
        const why = decision.reason === undefined ? "" : `: ${decision.reason}`;
        return this.end("plan_rejected", `the plan was not approved, so nothing ran${why}`);
      }
    }
    return undefined;
  }

  /** One step, streamed (deltas to `onEvent`) unless the caller asked otherwise. */
  private async send(request: ReactStepRequest, iteration: number): Promise<StepResponse> {
    this.emit({ type: "waiting", iteration });
    const call = this.call();
    if (this.options.stream === false) {
      return this.client.step(request, call);
    }
    for await (const event of this.client.stream(request, call)) {
      switch (event.type) {
        case "thought":
          this.emit({ type: "thought_delta", iteration, delta: event.delta });
          break;
        case "answer":
          this.emit({ type: "answer_delta", iteration, delta: event.delta });
          break;
        case "retry":
          this.emit({ type: "retry", iteration, reason: event.reason });
          break;
        case "step":
          return event.step;
        case "error":
          throw event.error;
      }
    }
    throw ReactStepError.unreadable(200, "the event stream ended without its step");
  }

  /** The loop's end on a final answer, or (`reflect`) the question that sends the model on. */
  private async answered(step: StepResponse, iteration: number): Promise<LoopResult | string> {
    const answer = step.direct_response ?? "";
    if (step.direct_response_json !== undefined) {
      this.result.answerJson = step.direct_response_json;
    } else {
      delete this.result.answerJson;
    }
    this.emit({ type: "answer", iteration, answer });
    const lower = answer.toLowerCase();
    const phrases = this.options.failurePhrases ?? DEFAULT_FAILURE_PHRASES;
    if (phrases.some((phrase) => lower.includes(phrase.toLowerCase()))) {
      return this.end("failure", answer);
    }
    // An answer the last step asked for (`forced_final`) may be a guess made to obey: not a success.
    const limited = step.termination_reason === "max_iterations" || step.forced_final === true;
    if (limited) {
      return this.end("max_iterations", answer);
    }
    if (this.options.reflect !== true) {
      return this.end("success", answer);
    }
    const evaluated = await this.evaluate(answer, iteration);
    if ("ended" in evaluated) {
      return evaluated.ended;
    }
    const { evaluation } = evaluated;
    return evaluation?.needs_retry === true ? retryQuery(evaluation) : this.end("success", answer);
  }

  /**
   * The service's evaluation of `answer`; none when it could not be had (the answer then
   * stands, the failure in `errors`, as `reactstep run --reflect` does); or the loop's end.
   */
  private async evaluate(
    answer: string,
    iteration: number,
  ): Promise<{ evaluation: QualityEvaluation | undefined } | { ended: LoopResult }> {
    if (this.client.evaluate === undefined) {
      return { ended: this.end("failure", "the loop was asked to reflect, and its client has no evaluate()") };
    }
    if (this.options.signal?.aborted) {
      return { ended: this.end("cancelled", "the loop was cancelled") };
    }
    const unevaluated = (why: string) => {
      this.result.errors.push({ source: "service", message: `the evaluation failed: ${why}` });
      return { evaluation: undefined };
    };
    const request = this.scriptedOrNot<EvaluateRequest>({
      ...this.sideRequest(this.options.question),
      candidate_answer: answer,
      plan: this.currentPlan() ?? null,
    });
    if (request === undefined) {
      return unevaluated(`the scripted responses ran out after ${this.scripted} steps`);
    }
    this.emit({ type: "evaluating", iteration, answer });
    let evaluation: QualityEvaluation;
    try {
      const response = await this.client.evaluate(request, this.call());
      this.took(response);
      if (response.status !== "direct_response_provided") {
        return unevaluated(`the service answered an evaluation of status ${response.status}`);
      }
      evaluation = response.evaluation;
    } catch (error) {
      if (this.options.signal?.aborted) {
        return { ended: this.end("cancelled", "the loop was cancelled") };
      }
      this.result.errors.push(serviceError("the evaluation failed: ", error));
      return { evaluation: undefined };
    }
    this.result.evaluations.push({ iteration, answer, evaluation });
    this.emit({ type: "evaluation", iteration, answer, evaluation });
    return { evaluation };
  }

  /**
   * Asks about the calls that need approval (one at a time), runs every call that may run at
   * once, and puts their observations in the history, in the calls' order, each naming its
   * call's id; then has the plan adjusted to the calls that failed. `sent` is the history the
   * step was sent with. The loop's end when it ends here.
   */
  private async act(step: StepResponse, iteration: number, sent: ConversationTurn[]): Promise<LoopResult | undefined> {
    const calls: ActionDetails[] =
      step.parallel_actions && step.parallel_actions.length > 0
        ? step.parallel_actions
        : step.action_details
          ? [step.action_details]
          : [];
    for (const call of calls) {
      this.emit({ type: "action", iteration, tool: call.tool_name, args: call.tool_args, toolCallId: call.tool_call_id });
      const stalled = this.stalled(call);
      if (stalled !== undefined) {
        return this.end("stalled", stalled);
      }
      // Defined, not assigned: a call named `__proto__` or `constructor` is counted as any other.
      Object.defineProperty(this.result.toolUsage, call.tool_name, {
        value: (own(this.result.toolUsage, call.tool_name) ?? 0) + 1,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    const verdicts = await this.approvals(calls, iteration);
    if (!Array.isArray(verdicts)) {
      return verdicts;
    }
    const thought = step.thought ?? "";
    const limit = Math.max(1, Math.floor(this.options.maxParallelTools ?? 8));
    const done = await mapAtMost(limit, calls, (call, index) => this.runTool(call, verdicts[index]!, iteration, thought));
    if (this.options.signal?.aborted) {
      return this.end("cancelled", "the loop was cancelled");
    }
    const history = [...step.updated_conversation_history];
    for (const record of done) {
      this.result.steps.push(record);
      history.push({
        role: "tool_observation",
        content: record.observation,
        tool_call_id: record.toolCallId ?? null,
        is_error: record.isError,
        toolResult: { success: !record.isError },
      });
    }
    this.result.history = history;
    return this.adjustPlan(done, sent);
  }

  /**
   * With a plan, after each failed call of a step in turn (while fewer than
   * `MAX_PLAN_ADJUSTMENTS` were tried): the plan adjusted to what it showed. A failed call is one
   * whose observation is an error (`is_error` to the model, the driver's `failed`): the tool
   * threw, there is no such tool, or the call was not approved.
   */
  private async adjustPlan(done: LoopStep[], sent: ConversationTurn[]): Promise<LoopResult | undefined> {
    for (const record of done) {
      const room = this.planAdjustmentTries < MAX_PLAN_ADJUSTMENTS;
      if (record.isError && room && this.result.plan !== undefined) {
        const ended = await this.adjustedPlan(record, sent);
        if (ended !== undefined) {
          return ended;
        }
      }
    }
    return undefined;
  }

  /**
   * Asks for the plan in force adjusted to `record`'s observation; keeps it when the service
   * answers one. A plan it cannot make leaves the plan as it was, the failure in `errors` (the
   * loop goes on, as the driver's does); the caller's abort ends the loop.
   */
  private async adjustedPlan(record: LoopStep, sent: ConversationTurn[]): Promise<LoopResult | undefined> {
    const unadjusted = (why: string): undefined => {
      this.result.errors.push({ source: "service", message: `the plan adjustment failed: ${why}` });
      return undefined;
    };
    if (this.client.plan === undefined) {
      return unadjusted("its client has no plan()");
    }
    // The history as the step was sent it, as the driver sends it: the failure is the observation.
    const request = this.scriptedOrNot<PlanRequest>({
      ...this.sideRequest(this.options.question),
      conversation_history: sent,
      previous_plan: this.currentPlan() ?? null,
      latest_observation: record.observation,
    });
    if (request === undefined) {
      return unadjusted(`the scripted responses ran out after ${this.scripted} steps`);
    }
    this.planAdjustmentTries += 1;
    const { iteration, tool, toolCallId, observation } = record;
    this.emit({ type: "adjusting_plan", iteration, tool, toolCallId, observation });
    let plan: ExecutionPlan;
    try {
      const response = await this.client.plan(request, this.call());
      this.took(response);
      if (response.status !== "direct_response_provided") {
        return unadjusted(`the service answered a plan of status ${response.status}`);
      }
      plan = response.plan;
    } catch (error) {
      if (this.options.signal?.aborted) {
        return this.end("cancelled", "the loop was cancelled");
      }
      this.result.errors.push(serviceError("the plan adjustment failed: ", error));
      return undefined;
    }
    const adjustment: LoopPlanAdjustment = { iteration, tool, toolCallId, observation, plan };
    this.result.planAdjustments.push(adjustment);
    this.emit({ type: "plan_adjustment", ...adjustment });
    return undefined;
  }

  /** Asks `approve` about the calls that need it, one at a time; the loop's end when it ends there. */
  private async approvals(calls: ActionDetails[], iteration: number): Promise<Verdict[] | LoopResult> {
    const verdicts = await approveCalls(calls, iteration, {
      approve: this.options.approve,
      needsApproval: (name) => own(this.options.tools, name)?.needsApproval === true,
      signal: this.options.signal,
      decided: (call, decision) =>
        this.emit({ type: "approval", iteration, tool: call.tool_name, toolCallId: call.tool_call_id, decision }),
    });
    if (Array.isArray(verdicts)) {
      return verdicts;
    }
    if (verdicts.stop === "cancelled") {
      return this.end("cancelled", "the loop was cancelled");
    }
    this.result.errors.push({ source: "approval", message: verdicts.message });
    return this.end("failure", verdicts.message);
  }

  /** Runs one call, or answers it unrun when it was not approved; its record. */
  private async runTool(call: ActionDetails, verdict: Verdict, iteration: number, thought: string): Promise<LoopStep> {
    const args = verdict.run ? verdict.args : call.tool_args;
    const observed = verdict.run
      ? await this.observe(call, args, iteration)
      : { observation: verdict.observation, isError: true };
    const { isError } = observed;
    // The model still holds its own arguments: it is told what ran instead.
    const observation = verdict.approval === "edited"
      ? `(The user edited the arguments to ${JSON.stringify(args)}.)\n${observed.observation}`
      : observed.observation;
    if (isError) {
      this.result.errors.push({ source: call.tool_name, message: observation });
    }
    this.emit({ type: "observation", iteration, tool: call.tool_name, toolCallId: call.tool_call_id, observation, isError });
    const record: LoopStep = { iteration, thought, tool: call.tool_name, args, toolCallId: call.tool_call_id, observation, isError };
    if (verdict.approval !== undefined) {
      record.approval = verdict.approval;
    }
    return record;
  }

  /** What the tool answers to `args`; a throw (or no such tool) is an error observation. */
  private async observe(
    call: ActionDetails,
    args: Record<string, unknown>,
    iteration: number,
  ): Promise<{ observation: string; isError: boolean }> {
    const tool = own(this.options.tools, call.tool_name);
    if (tool === undefined) {
      return { observation: `there is no tool named ${call.tool_name}`, isError: true };
    }
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      return { observation: `the arguments of ${call.tool_name} are not a JSON object`, isError: true };
    }
    try {
      const observation = await tool.run(args, { signal: this.options.signal, toolCallId: call.tool_call_id, iteration });
      return { observation, isError: false };
    } catch (error) {
      return { observation: error instanceof Error ? error.message : String(error), isError: true };
    }
  }

  /** Why the loop is stalled, when this call is the same as the `stallThreshold - 1` before it. */
  private stalled(call: ActionDetails): string | undefined {
    const key = `${call.tool_name}\u0000${JSON.stringify(call.tool_args)}`;
    const count = this.lastCall?.key === key ? this.lastCall.count + 1 : 1;
    this.lastCall = { key, count };
    const threshold = Math.max(1, this.options.stallThreshold ?? 6);
    return count >= threshold
      ? `the model called ${call.tool_name} with the same arguments ${count} times in a row`
      : undefined;
  }

  /**
   * The loop's end on a thrown error: the caller's abort, or the service's failure (`what`, in
   * front of the message, says which call failed when it was not a step).
   */
  private failed(error: unknown, what = ""): LoopResult {
    if (this.options.signal?.aborted) {
      return this.end("cancelled", "the loop was cancelled");
    }
    const entry = serviceError(what, error);
    this.result.errors.push(entry);
    // The service's loop guard refused a call that went on repeating itself.
    const reason = entry.error?.type === "loop_detected" ? "stalled" : "failure";
    return this.end(reason, entry.message);
  }

  private end(reason: TerminationReason, answer: string): LoopResult {
    this.result.terminationReason = reason;
    this.result.success = reason === "success";
    this.result.answer = answer;
    return this.result;
  }

  private emit(event: LoopEvent): void {
    this.options.onEvent?.(event);
  }
}

/**
 * The `errors` entry of a request to the service that threw: the service's error (its type and
 * message), or why it did not answer; `what`, in front, says which request it was.
 */
function serviceError(what: string, error: unknown): LoopResult["errors"][number] {
  if (error instanceof ReactStepError) {
    return { source: "service", message: `${what}${error.type}: ${error.message}`, error };
  }
  const message = `${what}the service did not answer: ${error instanceof Error ? error.message : String(error)}`;
  return { source: "service", message };
}

/**
 * The steps left after `step`, sent with `sentLeft` left: the service's count, never more than
 * the loop's own less one, so no service can run the loop past `maxIterations`.
 */
function leftAfter(step: StepResponse, sentLeft: number): number {
  const told = typeof step.iterations_remaining === "number" ? step.iterations_remaining : 0;
  return Math.min(told, sentLeft - 1);
}

/** `record`'s own entry `name`: never one of `Object.prototype` (`constructor`, `toString`). */
function own<T>(record: Record<string, T>, name: string): T | undefined {
  return Object.prototype.hasOwnProperty.call(record, name) ? record[name] : undefined;
}

/**
 * `step` when it has what the loop reads of a step (a status, the history, a call's name and
 * arguments), or an `unreadable_response` error: a service that answers otherwise must end the
 * loop as a failure, not with a `TypeError` after a tool has run.
 */
function readable(step: StepResponse): StepResponse {
  const object = (value: unknown) => typeof value === "object" && value !== null && !Array.isArray(value);
  const wrong = (why: string) => ReactStepError.unreadable(200, `the step ${why}`);
  if (!object(step)) {
    throw wrong("is not a JSON object");
  }
  if (typeof step.status !== "string" || !Array.isArray(step.updated_conversation_history)) {
    throw wrong("has no status or no updated_conversation_history");
  }
  const parallel: unknown = step.parallel_actions;
  if (parallel !== undefined && parallel !== null && !Array.isArray(parallel)) {
    throw wrong("has parallel_actions that are not a list");
  }
  const calls = [step.action_details, ...(step.parallel_actions ?? [])];
  for (const call of calls) {
    if (call !== null && call !== undefined && (!object(call) || typeof call.tool_name !== "string")) {
      throw wrong("proposes a call that has no tool_name");
    }
  }
  return step;
}

/** `run` over `items`, at most `limit` at once; the results in the items' order. */
async function mapAtMost<T, R>(limit: number, items: readonly T[], run: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      results[index] = await run(items[index]!, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

