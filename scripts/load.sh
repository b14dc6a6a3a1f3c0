#!/usr/bin/env bash
# Load against the release binary on loopback (see examples/load.rs):
#   scripts/load.sh burst [N] [http|https|https:S]
#                                          N steps at once, upstream answering after 2 s (5,000),
#                                          over plain HTTP/1.1 (default) or TLS with HTTP/2
#                                          (https:S: S streams allowed per connection)
#   scripts/load.sh soak [SECONDS] [RATE]  steady load with 10 % upstream faults (600 s, 100/s)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step holds a client connection and an upstream connection.
ulimit -n "$(ulimit -Hn)"
cargo build --release --bin reactstep --example load
exec target/release/examples/load "$@"
