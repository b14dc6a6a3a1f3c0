#!/usr/bin/env bash
# Load against the release binary on loopback (see examples/load.rs):
#   scripts/load.sh burst [N] [http|https|https:S|stream]
#                                          N steps at once, upstream answering after 2 s (5,000),
#                                          over plain HTTP/1.1 (default) or TLS with HTTP/2
#                                          (https:S: S streams allowed per connection; stream:
#                                          https, every step streamed end to end)
#   scripts/load.sh soak [SECONDS] [RATE]  steady load with 10 % upstream faults (600 s, 100/s)
#   scripts/load.sh compare [SECONDS] [CONCURRENCY]
#                                          oha on a mock upstream, a bare actix-web + reqwest
#                                          pass-through and the service, typical body and a
#                                          10-step loop (6 s per target, concurrency 16)
#   scripts/load.sh mixed [SECONDS] [RATE] [BIG]
#                                          oha sends the typical body at RATE/s, alone and while
#                                          BIG 128k-token requests are in flight (10 s, 500/s, 2)
#   scripts/load.sh sweep [SECONDS]        the service and the pass-through on 1, 2, 4 and 8
#                                          cores, pinned with taskset, warm and cold bodies, at
#                                          concurrency 1, 16 and 64: one table (3 s a point,
#                                          about 3 minutes; no oha, the example drives the load;
#                                          SWEEP_BODIES=warm or cold: that body alone;
#                                          SWEEP_CORES=1,8: those core counts alone;
#                                          SWEEP_SERVICE_PRELOAD=lib.so: the service alone
#                                          started with that library preloaded)
#   scripts/load.sh startup [RUNS]         start to /readyz, the first step of each encoder and the
#                                          RSS of a fresh service, medians over RUNS (10)
#
# Prebuilt binaries (a machine without cargo): REACTSTEP_BIN=path/to/reactstep and
# LOAD_BIN=path/to/examples/load, both from `cargo build --release --bin reactstep --example
# load`; nothing is built then. OHA=path/to/oha for compare and mixed.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step holds a client connection and an upstream connection.
ulimit -n "$(ulimit -Hn)"
target_dir="${CARGO_TARGET_DIR:-target}"
if { [ "${1:-}" = compare ] || [ "${1:-}" = mixed ]; } && [ -z "${OHA:-}" ]; then
    # The load generator: oha on PATH, else built once into the target folder.
    if command -v oha >/dev/null; then
        OHA=oha
    else
        OHA="$target_dir/tools/bin/oha"
        if [ ! -x "$OHA" ]; then
            cargo install oha --locked --root "$target_dir/tools"
        fi
    fi
    export OHA
fi
if [ -n "${REACTSTEP_BIN:-}" ] && [ -n "${LOAD_BIN:-}" ]; then
    export REACTSTEP_BIN
    exec "$LOAD_BIN" "$@"
fi
cargo build --release --bin reactstep --example load
exec "$target_dir/release/examples/load" "$@"
