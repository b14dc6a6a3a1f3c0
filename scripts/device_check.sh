#!/usr/bin/env bash
# Issue 35's wall-clock figures on a lent many-core machine, in one run that fits its minutes:
# the core sweep (the service and the bare pass-through on 1, 2, 4 and 8 cores, warm and cold),
# start-up, and the token cache's warm lookups from 1 to 16 threads at once.
#
#   scripts/device_check.sh prepare [DIR]   here: builds the release service, the load example
#                                           and the context bench, strips them and packs each
#                                           with xz: the first two into DIR (.perf, 46 MB), the
#                                           bench into DIR-bench (34 MB), each under the 64 MiB
#                                           a device call carries
#   scripts/device_check.sh run [DIR] [S]   there (no cargo, no registry): the sweep, S seconds
#                                           a point (3), then start-up
#   scripts/device_check.sh bench [DIR]     there: the token cache's lookups from 1 to 16
#                                           threads (DIR: .perf-bench)
#
# Two device calls on the same warm machine: carry [".perf"] with `scripts/device_check.sh run`,
# then carry [".perf-bench"] with `scripts/device_check.sh bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}" dir="${2:-.perf}"
# Unpacks each named binary from folder $1 into folder $2.
unpack() {
    local from="$1" to="$2"
    shift 2
    for name in "$@"; do
        xz -dc "$from/$name.xz" >"$to/$name"
        chmod +x "$to/$name"
    done
}

case "$mode" in
prepare)
    cargo build --release --locked --bin reactstep --example load
    bench=$(cargo bench --locked --bench context --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("executable") and m.get("target", {}).get("name") == "context":
        print(m["executable"])')
    mkdir -p "$dir" "$dir-bench"
    for pair in "$dir/reactstep:target/release/reactstep" \
        "$dir/load:target/release/examples/load" "$dir-bench/context:$bench"; do
        strip -o "${pair%%:*}" "${pair#*:}"
        xz -T0 -6 -f "${pair%%:*}"
    done
    du -cb "$dir"/*.xz "$dir-bench"/*.xz
    ;;
run)
    seconds="${3:-3}"
    bin=$(mktemp -d)
    trap 'rm -rf "$bin"' EXIT
    unpack "$dir" "$bin" reactstep load
    echo "cores: $(nproc)"
    export REACTSTEP_BIN="$bin/reactstep" LOAD_BIN="$bin/load"
    scripts/load.sh sweep "$seconds"
    scripts/load.sh startup 10
    ;;
bench)
    [ $# -ge 2 ] || dir=.perf-bench
    bin=$(mktemp -d)
    trap 'rm -rf "$bin"' EXIT
    unpack "$dir" "$bin" context
    echo "cores: $(nproc)"
    "$bin/context" --bench "token cache" --warm-up-time 1 --measurement-time 3 2>&1 |
        grep -E "^token cache|time:"
    ;;
*)
    echo "usage: $0 prepare|run|bench [DIR] [SECONDS]" >&2
    exit 2
    ;;
esac
