#!/usr/bin/env bash
# Installs mdbook (the pinned version, no default features) from crates.io when the one on
# this machine is missing or another version, and prints its path. About 70 s of compiling
# on 2 cores, once per machine: .ci/run starts it in the background while the interop
# checks run, and docs/ci.sh waits for it.
#   bash docs/install-mdbook.sh     # prints the mdbook to use
set -euo pipefail

MDBOOK_VERSION=0.5.4
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
for candidate in "$(command -v mdbook || true)" "$cargo_bin/mdbook"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] \
        && "$candidate" --version | grep -q "v$MDBOOK_VERSION"; then
        echo "$candidate"
        exit 0
    fi
done
echo "== docs: installing mdbook $MDBOOK_VERSION (no default features)" >&2
start=$(date +%s)
# Its own target folder, removed afterwards: the workspace's build is not touched.
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
CARGO_TARGET_DIR=$target cargo install mdbook --locked --no-default-features \
    --version "$MDBOOK_VERSION" --quiet
echo "installed mdbook in $(($(date +%s) - start)) s" >&2
echo "$cargo_bin/mdbook"
