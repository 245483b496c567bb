#!/usr/bin/env bash
# CI for the book (docs/): installs mdbook when it is missing (crates.io, no default
# features: about 70 s on 2 cores, once per machine), checks the two generated references
# against the debug binaries (docs/gen.py --check: the CLI's --help, and the OpenAPI document
# a node serves), builds the book and checks its links, anchors, alert runbooks and commands
# (docs/check.py). Offline apart from the one install.
#   bash docs/ci.sh [BIN_DIR]     # BIN_DIR holds rowcall and rowcall-node (default target/debug)
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.5.4
bin=${1:-${CARGO_TARGET_DIR:-target}/debug}
# The test step builds rowcall-node but not the client's binary (its crate has no
# integration tests): build only what is missing, one package at a time, so no package is
# rebuilt with other features unified.
[ -x "$bin/rowcall-node" ] || cargo build -p rowcall-node
[ -x "$bin/rowcall" ] || cargo build -p rowcall-client

mdbook=$(command -v mdbook || true)
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
if [ -z "$mdbook" ] && [ -x "$cargo_bin/mdbook" ]; then
    mdbook=$cargo_bin/mdbook
fi
if [ -z "$mdbook" ] || ! "$mdbook" --version | grep -q "v$MDBOOK_VERSION"; then
    echo "== docs: installing mdbook $MDBOOK_VERSION (no default features)"
    start=$(date +%s)
    cargo install mdbook --locked --no-default-features --version "$MDBOOK_VERSION" --quiet
    mdbook=$cargo_bin/mdbook
    echo "installed in $(($(date +%s) - start)) s"
fi
"$mdbook" --version

work=$(mktemp -d)
node_pid=
cleanup() {
    if [ -n "$node_pid" ]; then
        kill "$node_pid" 2>/dev/null || true
        wait "$node_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "== docs: the CLI reference against the commands' --help"
python3 docs/gen.py cli "$bin/rowcall" "$bin/rowcall-node" --check

echo "== docs: the HTTP reference against a node's /api/openapi.json"
ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
read -r http grpc <<<"$ports"
ROWCALL_ADMIN_KEY=docs-ci-admin-key-0123456789abcdef0123 "$bin/rowcall-node" \
    --http "127.0.0.1:$http" --grpc "127.0.0.1:$grpc" --data "$work/node" --no-demo \
    >"$work/node.log" 2>&1 &
node_pid=$!
for _ in $(seq 1 150); do
    curl -sf "http://127.0.0.1:$http/api/openapi.json" -o "$work/openapi.json" && break
    sleep 0.2
done
if [ ! -s "$work/openapi.json" ]; then
    echo "docs: the node served no /api/openapi.json; its log:" >&2
    cat "$work/node.log" >&2
    exit 1
fi
python3 docs/gen.py http "$work/openapi.json" --check

echo "== docs: mdbook build docs, then docs/check.py"
"$mdbook" build docs
python3 docs/check.py
