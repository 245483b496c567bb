#!/usr/bin/env bash
# Runs every fuzz target for a bounded time each (default 30 s; FUZZ_SECONDS overrides) and
# prints libFuzzer's executions per second.
#
# On the default (stable) toolchain: cargo-fuzz with `--sanitizer none` needs no nightly
# feature (coverage instrumentation is stable `-C passes=sancov-module`); the sanitizers are
# what need nightly, and the project forbids unsafe code, so what the targets look for are
# panics, failed assertions and unbounded memory. cargo-fuzz comes from crates.io and
# libFuzzer's C++ part needs a C++ compiler (Debian's g++); both are installed when missing.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${FUZZ_SECONDS:-30}
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz from crates.io"
    cargo install --locked cargo-fuzz
fi
if ! command -v c++ >/dev/null; then
    echo "fuzz: installing g++ from Debian (libFuzzer is C++)"
    apt-get update -qq
    apt-get install -y -qq g++
fi
# The main lock, so that the fuzzed code builds with the versions the project ships.
cp ../Cargo.lock Cargo.lock
# Unoptimised (`--dev`) by default: it builds in less than half the time of a release build on
# a 2-core CI machine and still runs thousands of inputs a second; FUZZ_RELEASE=1 for long
# runs, where executions per second matter more than the build.
profile=(--dev)
if [ "${FUZZ_RELEASE:-0}" = 1 ]; then profile=(); fi
cargo fuzz build "${profile[@]}" --sanitizer none
for target in docstring ask row raft_entry; do
    mkdir -p "corpus/$target"
    echo "== fuzz $target (${seconds}s)"
    log=$(mktemp)
    # -max_len bounds inputs; -rss_limit_mb makes a memory blow-up a failure.
    if ! cargo fuzz run "${profile[@]}" --sanitizer none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 >"$log" 2>&1; then
        tail -60 "$log"
        echo "fuzz: $target FAILED (the input is under fuzz/artifacts/$target/)"
        exit 1
    fi
    # libFuzzer's last status line: "#N DONE cov: … exec/s: E …"
    grep -E 'DONE|exec/s' "$log" | tail -1
    rm -f "$log"
done
