// reactstep in VS Code: "reactstep: Ask about this file" asks a question about the open file and
// runs the loop through the service, with the thought streaming into an output channel as the
// model writes it. The model can read files and search the workspace, through VS Code's API, and
// write files and run commands once the user approves each call in a modal dialog.
import { exec } from "node:child_process";
import * as vscode from "vscode";
import {
  ReactStepClient,
  ReactStepError,
  type ApprovalDecision,
  type ApprovalRequest,
  type LoopEvent,
  type LoopTool,
} from "@reactstep/client";

const KEY_SECRET = "reactstep.llmKey";

export function activate(context: vscode.ExtensionContext): void {
  const output = vscode.window.createOutputChannel("reactstep");
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand("reactstep.askAboutFile", () => askAboutFile(context, output)),
    vscode.commands.registerCommand("reactstep.setKey", async () => {
      const key = await vscode.window.showInputBox({ prompt: "Your LLM key (kept in VS Code's secret storage)", password: true });
      if (key) {
        await context.secrets.store(KEY_SECRET, key);
      }
    }),
  );
}

export function deactivate(): void {}

async function askAboutFile(context: vscode.ExtensionContext, output: vscode.OutputChannel): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor) {
    void vscode.window.showInformationMessage("Open a file to ask about it.");
    return;
  }
  const question = await vscode.window.showInputBox({ prompt: "Ask about this file", placeHolder: "Where is the session made?" });
  if (!question) {
    return;
  }
  const settings = vscode.workspace.getConfiguration("reactstep");
  const apiToken = settings.get<string>("apiToken") || undefined;
  const client = new ReactStepClient({
    baseUrl: settings.get<string>("serverUrl", "http://127.0.0.1:8080"),
    ...(apiToken ? { apiToken } : {}),
    retry: { attempts: 3, onRetry: ({ delayMs, error }) => output.appendLine(`(${error.type}: trying again in ${delayMs} ms)`) },
  });
  const key = await context.secrets.get(KEY_SECRET);
  const document = editor.document;
  output.show(true);
  output.appendLine(`\n❓ ${question}`);

  await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: "reactstep is thinking", cancellable: true },
    async (_progress, cancellation) => {
      const controller = new AbortController();
      cancellation.onCancellationRequested(() => controller.abort());
      const result = await client.runLoop({
        question,
        tools: { ...workspaceTools(), ...changingTools() },
        approve: approveInModal,
        llmConfig: {
          modelName: settings.get<string>("model", "gpt-4o"),
          tokenLimit: settings.get<number>("tokenLimit", 128000),
          reservedOutputTokens: 4000,
        },
        ...(key ? { key } : {}),
        maxIterations: 8,
        signal: controller.signal,
        request: {
          implicit_context: {
            last_focused_file_path: vscode.workspace.asRelativePath(document.uri),
            last_focused_file_content: document.getText(),
            cursor_line: editor.selection.active.line + 1,
          },
        },
        onEvent: (event) => show(output, event),
      });
      const error = result.errors.find((e) => e.error instanceof ReactStepError)?.error;
      if (result.success) {
        output.appendLine(`\n✅ ${result.answer}`);
      } else {
        output.appendLine(`\n⚠️ ended (${result.terminationReason}): ${result.answer}`);
        if (error?.type === "llm_auth") {
          void vscode.window.showErrorMessage("The LLM provider rejected the key: run “reactstep: Set the LLM key”.");
        }
      }
    },
  );
}

/** The loop's events in the output channel: the thought as it forms, each call and its result. */
function show(output: vscode.OutputChannel, event: LoopEvent): void {
  switch (event.type) {
    case "waiting":
      output.append(`\n💭 `);
      break;
    case "thought_delta":
      output.append(event.delta);
      break;
    case "retry":
      output.append(`\n(the model tries again: ${event.reason})\n💭 `);
      break;
    case "action":
      output.appendLine(`\n🔧 ${event.tool}(${JSON.stringify(event.args)})`);
      break;
    case "approval":
      output.appendLine(`🔒 ${event.decision}`);
      break;
    case "observation": {
      const lines = event.observation.split("\n");
      const shown = lines.length > 5 ? `${lines.slice(0, 5).join("\n")}\n… ${lines.length - 5} more lines` : event.observation;
      output.appendLine(`${event.isError ? "❌" : "📄"} ${shown}`);
      break;
    }
    default:
      break;
  }
}

/** read_file and search, confined to the workspace folders, through VS Code's file system API. */
function workspaceTools(): Record<string, LoopTool> {
  const decoder = new TextDecoder();
  return {
    read_file: {
      description: "Read a file of the workspace, by its path relative to the workspace folder.",
      parameters: {
        type: "object",
        properties: { path: { type: "string", description: "e.g. src/auth.ts" } },
        required: ["path"],
      },
      run: async (args) => {
        const uri = await inWorkspace(String(args["path"] ?? ""));
        const bytes = await vscode.workspace.fs.readFile(uri);
        return decoder.decode(bytes).slice(0, 100_000);
      },
    },
    search: {
      description: "Search the workspace's files for a text; answers path:line: text for each match.",
      parameters: {
        type: "object",
        properties: {
          query: { type: "string" },
          glob: { type: "string", description: "Which files, e.g. **/*.ts (all by default)" },
        },
        required: ["query"],
      },
      run: async (args, context) => {
        const query = String(args["query"] ?? "");
        if (query === "") {
          throw new Error("query is empty");
        }
        const files = await vscode.workspace.findFiles(String(args["glob"] ?? "**/*"), "**/node_modules/**", 2000);
        const matches: string[] = [];
        for (const file of files) {
          if (context.signal?.aborted || matches.length >= 50) {
            break;
          }
          const text = decoder.decode(await vscode.workspace.fs.readFile(file));
          text.split("\n").forEach((line, index) => {
            if (line.includes(query) && matches.length < 50) {
              matches.push(`${vscode.workspace.asRelativePath(file)}:${index + 1}: ${line.trim().slice(0, 200)}`);
            }
          });
        }
        return matches.length > 0 ? matches.join("\n") : `no match for ${JSON.stringify(query)}`;
      },
    },
  };
}

/** write_file and run_command: they change the workspace, so each call waits for the user's approval. */
function changingTools(): Record<string, LoopTool> {
  const encoder = new TextEncoder();
  return {
    write_file: {
      description: "Write a file of the workspace (made or replaced), by its path relative to the workspace folder.",
      needsApproval: true,
      parameters: {
        type: "object",
        properties: { path: { type: "string" }, content: { type: "string", description: "The whole new text" } },
        required: ["path", "content"],
      },
      run: async (args) => {
        const uri = await inWorkspace(String(args["path"] ?? ""));
        const content = String(args["content"] ?? "");
        await vscode.workspace.fs.writeFile(uri, encoder.encode(content));
        return `wrote ${content.length} characters to ${vscode.workspace.asRelativePath(uri)}`;
      },
    },
    run_command: {
      description: "Run a shell command in the workspace folder; answers its output (a non-zero exit is a failure).",
      needsApproval: true,
      parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
      run: (args, context) => runCommand(String(args["command"] ?? ""), context.signal),
    },
  };
}

/** `command` in a shell in the workspace folder, for two minutes at most; its output. */
function runCommand(command: string, signal: AbortSignal | undefined): Promise<string> {
  const cwd = workspaceFolder().uri.fsPath;
  return new Promise((resolve, reject) => {
    exec(command, { cwd, timeout: 120_000, maxBuffer: 1 << 20, ...(signal ? { signal } : {}) }, (error, stdout, stderr) => {
      const output = `${stdout}${stderr}`.slice(-20_000);
      if (error) {
        reject(new Error(`exit ${error.code ?? error.signal ?? "?"}\n${output}`));
      } else {
        resolve(output === "" ? "(no output)" : output);
      }
    });
  });
}

/**
 * Asks the user about a call that writes or runs something, in a modal dialog: approve it, edit
 * its arguments (as JSON), or deny it with a reason the model reads. Closing the dialog denies it.
 */
async function approveInModal(request: ApprovalRequest): Promise<ApprovalDecision> {
  const choice = await vscode.window.showWarningMessage(
    `reactstep wants to run ${request.tool}`,
    { modal: true, detail: JSON.stringify(request.arguments, null, 2) },
    "Approve",
    "Edit arguments",
    "Deny",
  );
  const token = cancellation(request.signal);
  switch (choice) {
    case "Approve":
      return { decision: "approve" };
    case "Edit arguments": {
      const edited = await vscode.window.showInputBox(
        {
          prompt: `The arguments of ${request.tool}, as a JSON object`,
          value: JSON.stringify(request.arguments),
          validateInput: (text) => (jsonObject(text) ? undefined : 'A JSON object, e.g. {"path": "src/a.ts"}'),
        },
        token,
      );
      const args = edited === undefined ? undefined : jsonObject(edited);
      return args ? { decision: "edit", arguments: args } : { decision: "deny", reason: "the user gave up editing the call" };
    }
    case "Deny": {
      const reason = await vscode.window.showInputBox({ prompt: `Why not ${request.tool}? The model reads this.` }, token);
      return { decision: "deny", reason: reason ?? "" };
    }
    default:
      return { decision: "deny", reason: "the user closed the dialog" };
  }
}

/** `text` when it is a JSON object. */
function jsonObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** A token cancelled when the loop's signal aborts: the input box closes with the loop. */
function cancellation(signal: AbortSignal | undefined): vscode.CancellationToken {
  const source = new vscode.CancellationTokenSource();
  if (signal?.aborted) {
    source.cancel();
  }
  signal?.addEventListener("abort", () => source.cancel(), { once: true });
  return source.token;
}

function workspaceFolder(): vscode.WorkspaceFolder {
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (!folder) {
    throw new Error("no workspace folder is open");
  }
  return folder;
}

/** The file at `path` in the first workspace folder; a path leading out of it is refused. */
async function inWorkspace(path: string): Promise<vscode.Uri> {
  const folder = workspaceFolder();
  const parts = path.split(/[\\/]+/).filter((part) => part !== "" && part !== ".");
  if (parts.includes("..") || path.startsWith("/")) {
    throw new Error(`${path} is outside the workspace`);
  }
  return vscode.Uri.joinPath(folder.uri, ...parts);
}
