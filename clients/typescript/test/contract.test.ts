// The contract and the client cannot drift apart: the committed types are what openapi-typescript
// makes of openapi.yaml now, and openapi.yaml passes Redocly's recommended rules.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";

import { packageDir, repoRoot } from "./support/server.js";

function bin(name: string): string {
  return path.join(packageDir, "node_modules", ".bin", name);
}

test("the committed types are what openapi-typescript generates from openapi.yaml", () => {
  // The very command of `npm run generate`, with the output sent to a temporary file.
  const scripts = (JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8")) as { scripts: Record<string, string> })
    .scripts;
  const [command, ...args] = (scripts["generate"] ?? "").split(/\s+/);
  assert.equal(command, "openapi-typescript");
  const output = args.indexOf("--output");
  assert.ok(output >= 0 && args[output + 1] === "src/generated/openapi.ts", scripts["generate"]);
  const dir = mkdtempSync(path.join(tmpdir(), "reactstep-types-"));
  try {
    const fresh = path.join(dir, "openapi.ts");
    args[output + 1] = fresh;
    const run = spawnSync(bin("openapi-typescript"), args, { cwd: packageDir, encoding: "utf8" });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    const committed = readFileSync(path.join(packageDir, "src/generated/openapi.ts"), "utf8");
    assert.ok(
      readFileSync(fresh, "utf8") === committed,
      "src/generated/openapi.ts differs from openapi.yaml: run `npm run generate` in clients/typescript and commit it",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("Redocly's recommended rules find no error and no warning but the ones listed as deliberate", () => {
  const run = spawnSync(
    bin("redocly"),
    ["lint", "openapi.yaml", "--config", "redocly.yaml", "--format", "json"],
    { cwd: repoRoot, encoding: "utf8", env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" } },
  );
  const report = JSON.parse(run.stdout) as {
    totals: { errors: number; warnings: number; ignored: number };
    problems: { ruleId: string; message: string }[];
  };
  const problems = report.problems.map((p) => `${p.ruleId}: ${p.message}`).join("\n");
  assert.equal(report.totals.errors, 0, problems);
  assert.equal(report.totals.warnings, 0, problems);
  assert.equal(run.status, 0, run.stderr);
  // Every listed exception still stands for a warning: none is stale.
  const listed = readFileSync(path.join(repoRoot, ".redocly.lint-ignore.yaml"), "utf8")
    .split("\n")
    .filter((line) => /^\s+- '#\//.test(line)).length;
  assert.ok(listed > 0);
  assert.equal(report.totals.ignored, listed);
});
