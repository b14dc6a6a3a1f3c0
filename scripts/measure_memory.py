#!/usr/bin/env python3
"""Peak memory of one dry-run step as the request grows.

Starts a fresh release server per size (so the high-water mark belongs to that request alone),
sends one dry run whose explicit context and history add up to the given size, and reads VmHWM
from /proc (reset once the server is ready, so start-up's own peak is not counted). Prints a
markdown table for docs/benchmarks.md.

    cargo build --release && python3 scripts/measure_memory.py
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

BINARY = os.path.join(os.path.dirname(__file__), "..", "target", "release", "reactstep")
SIZES_MB = [0, 1, 2, 4, 7]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def code(n_bytes, seed):
    out, i = [], seed
    size = 0
    while size < n_bytes:
        line = f"export function handler{i}(req, res) {{ return res.json(await db.find({i})); }}\n"
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out)


def body(mb):
    per_file = 60_000
    files = int(mb * 1_000_000 * 0.8) // per_file
    turns = 40 if mb else 0
    turn_bytes = int(mb * 1_000_000 * 0.2) // max(turns, 1)
    return {
        "project_id": "memory",
        "session_id": "memory",
        "user_query": "Where is the handler that loads users?",
        "conversation_history": [
            {"role": ["user", "assistant"][i % 2], "content": code(turn_bytes, i)}
            for i in range(turns)
        ],
        "explicit_context": [
            {"path": f"src/file{n}.js", "content": code(per_file, n * 1000)} for n in range(files)
        ],
        "available_tools_prompt_segment": "code_search(query), read_file(path)",
        "llm_config": {"modelName": "gpt-4o", "tokenLimit": 128000, "reservedOutputTokens": 4000},
        "user_api_keys": {"llmKey": "sk-memory"},
        "dry_run": True,
    }


def wait_ready(port):
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def reset_peak(pid):
    """Start-up (building the encoders) peaks above idle: measure the request's peak alone."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def measure(mb):
    payload = json.dumps(body(mb)).encode()
    port = free_port()
    env = dict(os.environ, REACTSTEP_BIND=f"127.0.0.1:{port}", REACTSTEP_WORKERS="2", RUST_LOG="warn")
    server = subprocess.Popen([BINARY], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port)
        idle = kib(server.pid, "VmRSS")
        reset_peak(server.pid)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/agent/react_step",
            data=payload,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            status = reply.status
            answer = json.loads(reply.read())
        peak = kib(server.pid, "VmHWM")
        return len(payload), idle, peak, status, answer["context_report"]["used"]
    finally:
        server.terminate()
        server.wait()


def main():
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    print("| request body | idle RSS | peak RSS | peak − idle | (peak − idle) / body | tokens used |")
    print("|---|---|---|---|---|---|")
    for mb in SIZES_MB:
        size, idle, peak, status, used = measure(mb)
        assert status == 200, status
        extra = peak - idle
        ratio = f"{extra * 1024 / size:.1f}×" if size > 100_000 else "—"
        print(f"| {size / 1e6:.2f} MB | {idle / 1024:.1f} MiB | {peak / 1024:.1f} MiB "
              f"| {extra / 1024:.1f} MiB | {ratio} | {used} |")


if __name__ == "__main__":
    main()
