#!/usr/bin/env bash
# Issue 35's wall-clock figures on a lent many-core machine, in one call that fits its minutes:
# the core sweep (the service and the bare pass-through on 1, 2, 4 and 8 cores, warm and cold),
# start-up, and the token cache's warm lookups from 1 to 16 threads at once.
#
#   scripts/device_check.sh prepare [DIR]   here: builds the release service, the load example
#                                           and the context bench, strips them and packs the
#                                           three into DIR/all.tar.xz (.perf, about 39 MB, under
#                                           the 64 MiB a device call carries)
#   scripts/device_check.sh run [DIR] [S]   there (no cargo, no registry): the sweep, S seconds
#                                           a point (3), then start-up, then the token cache
#   scripts/device_check.sh sweeps [DIR] [S] [N]
#                                           there: the sweep alone N times (2) in a row, to see
#                                           how much one machine's runs differ (SWEEP_BODIES=warm
#                                           halves each, SWEEP_CORES=1,8 halves it again: the two
#                                           points the scaling target compares)
#   scripts/device_check.sh allocators [DIR] [S]
#                                           there: the whole sweep with glibc's allocator, then
#                                           the warm body with mimalloc and with jemalloc
#                                           preloaded into the service alone (Debian's builds,
#                                           which prepare unpacks into DIR/alloc), then the warm
#                                           body with glibc's again (how far two runs differ)
#
# One device call: carry [".perf"] with `scripts/device_check.sh run`.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}" dir="${2:-.perf}"

case "$mode" in
prepare)
    cargo build --release --locked --bin reactstep --example load
    bench=$(cargo bench --locked --bench context --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("executable") and m.get("target", {}).get("name") == "context":
        print(m["executable"])')
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    strip -o "$stage/reactstep" target/release/reactstep
    strip -o "$stage/load" target/release/examples/load
    strip -o "$stage/context" "$bench"
    mkdir -p "$dir"
    # One stream with a dictionary wider than any of the three: the code and tables they share
    # are stored once (39 MB against 79 MB packed one by one).
    tar -C "$stage" -cf - reactstep load context |
        xz -T1 --lzma2=preset=9e,dict=192MiB >"$dir/all.tar.xz"
    du -b "$dir/all.tar.xz"
    # Two allocators to try against glibc's, as Debian builds them (preloaded: no second build).
    mkdir -p "$dir/alloc"
    (cd "$stage" && apt-get download libmimalloc2.0 libjemalloc2 >/dev/null &&
        for deb in ./*.deb; do dpkg -x "$deb" unpacked; done)
    cp -L "$stage"/unpacked/usr/lib/x86_64-linux-gnu/lib{mimalloc,jemalloc}.so.2 "$dir/alloc/"
    ls -l "$dir/alloc"
    ;;
run | sweeps | allocators)
    seconds="${3:-3}"
    bin=$(mktemp -d)
    trap 'rm -rf "$bin"' EXIT
    tar -C "$bin" -xJf "$dir/all.tar.xz"
    chmod +x "$bin"/*
    echo "cores: $(nproc)"
    export REACTSTEP_BIN="$bin/reactstep" LOAD_BIN="$bin/load"
    if [ "$mode" = allocators ]; then
        scripts/load.sh sweep "$seconds"
        for lib in mimalloc jemalloc; do
            SWEEP_BODIES=warm SWEEP_SERVICE_PRELOAD="$(realpath "$dir/alloc/lib$lib.so.2")" \
                scripts/load.sh sweep "$seconds"
        done
        SWEEP_BODIES=warm scripts/load.sh sweep "$seconds"
        exit
    fi
    if [ "$mode" = sweeps ]; then
        for _ in $(seq "${4:-2}"); do
            scripts/load.sh sweep "$seconds"
        done
        exit
    fi
    scripts/load.sh sweep "$seconds"
    scripts/load.sh startup 10
    "$bin/context" --bench "token cache" --warm-up-time 1 --measurement-time 3 2>&1 |
        grep -E "^token cache|time:"
    ;;
*)
    echo "usage: $0 prepare|run|sweeps|allocators [DIR] [SECONDS] [RUNS]" >&2
    exit 2
    ;;
esac
