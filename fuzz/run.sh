#!/usr/bin/env bash
# Runs every fuzz target for a bounded time each (default 30 s; FUZZ_SECONDS overrides) and
# prints libFuzzer's executions per second. Needs a nightly toolchain and cargo-fuzz; says so
# clearly and exits 0 without fuzzing when the toolchain is missing (a machine without one
# cannot fetch it), installs cargo-fuzz from crates.io when it is missing.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${FUZZ_SECONDS:-30}
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz: NOT RUN: no nightly toolchain on this machine (rustup toolchain list); cargo-fuzz needs one"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz from crates.io"
    cargo +nightly install --locked cargo-fuzz
fi
# Start from the main lock so the fuzzed code builds with the versions the project ships.
[ -f Cargo.lock ] || cp ../Cargo.lock Cargo.lock
for target in docstring ask row raft_entry; do
    mkdir -p "corpus/$target"
    echo "== fuzz $target (${seconds}s)"
    log=$(mktemp)
    # -max_len bounds inputs; -rss_limit_mb makes a memory blow-up a failure.
    # No sanitizer: the project forbids unsafe code, so what the targets look for are panics
    # and unbounded memory, and an uninstrumented build is much faster to build and run.
    if ! cargo +nightly fuzz run --sanitizer none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 >"$log" 2>&1; then
        tail -60 "$log"
        echo "fuzz: $target FAILED"
        exit 1
    fi
    # libFuzzer's last status line: "#N DONE cov: … exec/s: E …"
    grep -E 'DONE|exec/s' "$log" | tail -1
    rm -f "$log"
done
