#!/usr/bin/env bash
# Instructions per request of the whole release service under callgrind (docs/benchmarks-history.md,
# "A fairer floor…"): the mock upstream of `scripts/load.sh compare` runs outside valgrind; the
# service answers WARM requests (not counted), its counters are zeroed, then it answers N more
# at concurrency C, and the instructions of all its threads are divided by N.
#   scripts/callgrind_service.sh [BODY] [N] [C] [WARM]
#     BODY: typical (default), typical-mock-response, loop-step-1 … loop-step-10, or cold: the
#           sweep's cold bodies (examples/load/sweep.rs), a new one for every request, warm-up
#           included, so each step's 15.8 KB of files and observations is text the token cache
#           has not seen
#     N 1000, C 4, WARM 100
# REACTSTEP_BIN runs another build of the service (a copy kept for a before/after comparison).
# TARGET=pass-through counts the bare actix-web + reqwest pass-through of `scripts/load.sh
# compare` instead of the service, on the same bodies: the yardstick of issue 35's warm target
# in instructions (a CPU-bound step at 0.9x the pass-through's throughput may run about 1.11x
# its instructions).
# The callgrind output is left in $CARGO_TARGET_DIR/callgrind/ for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
body="${1:-typical}" n="${2:-1000}" c="${3:-4}" warm="${4:-100}"
target_dir="${CARGO_TARGET_DIR:-target}"
# LOAD_BIN: a prebuilt load example (then nothing is built).
if [ -z "${LOAD_BIN:-}" ]; then
    cargo build --release --bin reactstep --example load
fi
load="${LOAD_BIN:-$target_dir/release/examples/load}"
bodies="$("$load" bodies)"
if [ "$body" = cold ]; then
    "$load" cold-bodies "$((n + warm))" >/dev/null
fi
service_bin="${REACTSTEP_BIN:-$target_dir/release/reactstep}"
out="$target_dir/callgrind"
mkdir -p "$out"
rm -f "$out"/callgrind.out.*

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
coproc MOCK { exec "$load" mock-upstream; }
pids+=("$MOCK_PID")
read -r mock_port <&"${MOCK[0]}"
if [ "${TARGET:-service}" = pass-through ]; then
    coproc PASS {
        exec valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out.%p" \
            "$load" pass-through "http://127.0.0.1:$mock_port" 2>"$out/valgrind.log"
    }
    service=$PASS_PID
    read -r port <&"${PASS[0]}"
else
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    REACTSTEP_BIND="127.0.0.1:$port" REACTSTEP_OPENAI_BASE_URL="http://127.0.0.1:$mock_port/v1" \
        valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out.%p" \
        "$service_bin" >/dev/null 2>"$out/valgrind.log" &
    service=$!
fi
pids+=("$service")
# The pass-through has no /readyz: its port is printed once bound, and the warm-up waits on it.
if [ "${TARGET:-service}" != pass-through ]; then
    until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 1; done
fi

drive() {
    python3 - "http://127.0.0.1:$port/api/agent/react_step" "$bodies" "$body" "$1" "$c" "$2" <<'PY'
import http.client, sys, threading, urllib.parse
url, folder, name = sys.argv[1], sys.argv[2], sys.argv[3]
total, conc, first = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
if name == "cold":
    # Read before the counted part starts: request i sends cold body first + i.
    bodies = [open(f"{folder}/cold-{first + i}.json", "rb").read() for i in range(total)]
else:
    bodies = [open(f"{folder}/{name}.json", "rb").read()] * total
u = urllib.parse.urlsplit(url)
left = [total]
lock = threading.Lock()
def worker():
    conn = http.client.HTTPConnection(u.hostname, u.port)
    while True:
        with lock:
            if left[0] == 0:
                return
            left[0] -= 1
            body = bodies[left[0]]
        conn.request("POST", u.path, body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        assert reply.status == 200, reply.status
threads = [threading.Thread(target=worker) for _ in range(conc)]
[t.start() for t in threads]
[t.join() for t in threads]
PY
}

drive "$warm" 0
callgrind_control -z "$service" >/dev/null
drive "$n" "$warm"
callgrind_control -d "$service" >/dev/null
total=$(grep -h '^summary:' "$out"/callgrind.out.*.* 2>/dev/null | awk '{s += $2} END {print s}')
echo "$body: $total instructions over $n requests: $((total / n)) per request"
