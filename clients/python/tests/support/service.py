"""The real reactstep server as a child process on a loopback port, for the tests."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

START_TIMEOUT_S = 30


def server_binary() -> str:
    """``REACTSTEP_BIN``: the server the tests run against (tests/python_client.rs sets it)."""
    binary = os.environ.get("REACTSTEP_BIN", "")
    if not binary:
        raise RuntimeError(
            "REACTSTEP_BIN is not set: build the server (cargo build --release) and set "
            "REACTSTEP_BIN=target/release/reactstep, or run cargo test --test python_client"
        )
    if not os.access(binary, os.X_OK):
        raise RuntimeError(f"REACTSTEP_BIN={binary} is not an executable file")
    return binary


@dataclass
class Service:
    url: str
    process: subprocess.Popen[str]
    reader: threading.Thread
    log: deque[str] = field(default_factory=lambda: deque(maxlen=200))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.reader.join(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()


def start_service(env: Mapping[str, str] | None = None) -> Service:
    """Starts the server on a free loopback port (it binds port 0 and logs the port it got)."""
    process = subprocess.Popen(
        [server_binary()],
        env={**os.environ, **_SETTINGS, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: deque[str] = deque(maxlen=200)
    ports: queue.Queue[int | None] = queue.Queue()
    reader = threading.Thread(target=_read_log, args=(process, log, ports), daemon=True)
    reader.start()
    try:
        port = ports.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        port = None
    if port is None:
        process.kill()
        process.wait()
        reader.join(timeout=10)
        raise RuntimeError("the server did not listen:\n" + "\n".join(log))
    return Service(url=f"http://127.0.0.1:{port}", process=process, reader=reader, log=log)


_SETTINGS = {
    "REACTSTEP_BIND": "127.0.0.1:0",
    "REACTSTEP_LOG_FORMAT": "json",
    "RUST_LOG": "info",
    "REACTSTEP_WORKERS": "2",
    "REACTSTEP_SHUTDOWN_GRACE_SECS": "1",
}


def _read_log(process: subprocess.Popen[str], log: deque[str], ports: queue.Queue[int | None]) -> None:
    """Keeps the server's log (the pipe must not fill) and tells the port it listens on."""
    assert process.stderr is not None
    for line in process.stderr:
        log.append(line.rstrip("\n"))
        port = _port_of(line)
        if port is not None:
            ports.put(port)
    ports.put(None)


def _port_of(line: str) -> int | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if isinstance(entry, dict) and entry.get("message") == "reactstep listening":
        port = entry.get("port")
        return port if isinstance(port, int) else None
    return None
