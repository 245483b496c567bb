#!/usr/bin/env bash
# CI for the book (docs/): installs mdbook when it is missing (docs/install-mdbook.sh:
# crates.io, once per machine; .ci/run has it under way in the background by now), checks
# the two generated references against the debug binaries (docs/gen.py --check: the CLI's
# --help, and the OpenAPI document a node serves), runs the shown sessions of the README and
# the getting-started chapter on a demo node (docs/run_examples.py), builds the book and
# checks its links, anchors, alert runbooks and commands (docs/check.py). Offline apart from
# the one install.
#   bash docs/ci.sh [BIN_DIR]     # BIN_DIR holds rowcall and rowcall-node (default target/debug)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-${CARGO_TARGET_DIR:-target}/debug}
# The test step builds rowcall-node but not the client's binary (its crate has no
# integration tests): build only what is missing, one package at a time, so no package is
# rebuilt with other features unified.
[ -x "$bin/rowcall-node" ] || cargo build -p rowcall-node
[ -x "$bin/rowcall" ] || cargo build -p rowcall-client

mdbook=$(bash docs/install-mdbook.sh)
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

echo "== docs: the README's and the book's shown sessions, run on a demo node"
python3 docs/run_examples.py "$bin/rowcall-node"

echo "== docs: mdbook build docs, then docs/check.py"
"$mdbook" build docs
python3 docs/check.py
