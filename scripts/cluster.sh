#!/usr/bin/env bash
# A reactstep fleet on one machine, on loopback: Redis holding the shared rate limits, three
# release replicas, and HAProxy in front (deploy/haproxy/haproxy.cfg, health checks on /readyz).
# Drives load through HAProxy with oha and prints throughput, latency and what each replica
# served. Everything stops when the script ends.
#
#   scripts/cluster.sh [SECONDS] [CONCURRENCY]     (10 s, 32 at once)
#
# Steps carry `mock_response`, so no model is called and no key is needed: what is measured is
# the service and the balancer. REACTSTEP_RATE_LIMIT_PER_SESSION (0: off) applies to every
# replica and is shared through Redis; with a limit, the run's one session meets it and the
# 429s show in the counts. Ports: CLUSTER_PORT (18080) for HAProxy, the next ones for its
# statistics, Redis and the replicas.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
concurrency="${2:-32}"
base="${CLUSTER_PORT:-18080}"
front=$base stats=$((base + 1)) redis_port=$((base + 2))
replica_ports=($((base + 3)) $((base + 4)) $((base + 5)))
target_dir="${CARGO_TARGET_DIR:-target}"

# The parts come from the system's packages; oha is built once into the target folder.
need() {
    command -v "$1" >/dev/null && return
    echo "installing $2 ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -q -y --no-install-recommends "$2" >/dev/null ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -q -y --no-install-recommends "$2" >/dev/null; }
}
need redis-server redis-server
need haproxy haproxy
need curl curl
OHA="${OHA:-$(command -v oha || echo "$target_dir/tools/bin/oha")}"
[ -x "$OHA" ] || cargo install oha --locked --root "$target_dir/tools"
cargo build --release --bin reactstep

work="$(mktemp -d)"
pids=()
stop() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT

# Waits (at most 30 s) until a command succeeds.
until_ok() {
    for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return; sleep 0.1; done
    echo "gave up waiting for: $*" >&2
    exit 1
}

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" &
pids+=($!)
until_ok redis-cli -p "$redis_port" ping

for i in 0 1 2; do
    REACTSTEP_BIND="127.0.0.1:${replica_ports[$i]}" \
    REACTSTEP_REDIS_URL="redis://127.0.0.1:$redis_port" \
    REACTSTEP_RATE_LIMIT_PER_SESSION="${REACTSTEP_RATE_LIMIT_PER_SESSION:-0}" \
    REACTSTEP_WORKERS=1 RUST_LOG=warn \
        "$target_dir/release/reactstep" 2>"$work/replica$((i + 1)).log" &
    pids+=($!)
done
for port in "${replica_ports[@]}"; do until_ok curl -fs "http://127.0.0.1:$port/readyz"; done

FRONT="127.0.0.1:$front" STATS="127.0.0.1:$stats" \
REPLICA1="127.0.0.1:${replica_ports[0]}" REPLICA2="127.0.0.1:${replica_ports[1]}" \
REPLICA3="127.0.0.1:${replica_ports[2]}" \
    haproxy -f deploy/haproxy/haproxy.cfg -db >"$work/haproxy.log" 2>&1 &
pids+=($!)
all_up() { [ "$(curl -fs "http://127.0.0.1:$stats/;csv" | grep -c '^replicas,replica[0-9],.*,UP,')" = 3 ]; }
until_ok all_up

cat >"$work/step.json" <<'JSON'
{"session_id": "cluster-run", "user_query": "Where is the retry policy configured?",
 "conversation_history": [], "available_tools_prompt_segment": "You have access to: read_file(path)",
 "llm_config": {"modelName": "gpt-4o", "tokenLimit": 16384, "reservedOutputTokens": 1000},
 "user_api_keys": {"llmKey": "sk-cluster-demo-key-0000000000"}, "max_iterations_left": 5,
 "mock_response": "Thought: The policy is in src/config.rs.\nFinal Answer: In src/config.rs."}
JSON

echo "== ${seconds}s at concurrency $concurrency through HAProxy on 127.0.0.1:$front"
"$OHA" --no-tui -z "${seconds}s" -c "$concurrency" -m POST -H 'content-type: application/json' \
    -D "$work/step.json" "http://127.0.0.1:$front/api/agent/react_step"

echo "== what each replica served (from HAProxy's statistics)"
curl -fs "http://127.0.0.1:$stats/;csv" | awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $1 == "replicas" && $2 ~ /^replica/ {
        printf "%-9s %-5s requests %8d   2xx %8d   4xx %6d   5xx %6d\n", $2, $(col["status"]),
            $(col["stot"]), $(col["hrsp_2xx"]), $(col["hrsp_4xx"]), $(col["hrsp_5xx"])
    }'
