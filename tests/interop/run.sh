#!/usr/bin/env bash
# Interop: the official Python MCP SDK (pip's `mcp`, in a fresh virtual environment) against
# a two-node cluster of the real rowcall-node binary on loopback. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/interop/common.sh

echo "== interop: python venv with mcp"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check mcp
"$WORK/venv/bin/pip" show mcp | sed -n 's/^Version: /mcp /p'

echo "== interop: building rowcall-node"
cargo build --quiet -p rowcall-node
BIN="${CARGO_TARGET_DIR:-target}/debug/rowcall-node"

export ROWCALL_ADMIN_KEY=interop-admin-key-0123456789abcdef012
export ROWCALL_MCP_TOKENS=interop=interop-mcp-token-0123456789abcdef
H1=$(free_port) G1=$(free_port) H2=$(free_port) G2=$(free_port)
# Small pages, so that the SDK follows cursors through the demo catalogue.
printf '[mcp]\npage_size = 5\n' >"$WORK/rowcall.toml"

"$BIN" --id 1 --http "127.0.0.1:$H1" --grpc "127.0.0.1:$G1" --data "$WORK/node-1" --config "$WORK/rowcall.toml" >"$WORK/node-1.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H1" "$WORK/node-1.log"
"$BIN" --id 2 --http "127.0.0.1:$H2" --grpc "127.0.0.1:$G2" --data "$WORK/node-2" --join "127.0.0.1:$G1" \
    --config "$WORK/rowcall.toml" >"$WORK/node-2.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H2" "$WORK/node-2.log"

echo "== interop: python SDK against the cluster"
"$WORK/venv/bin/python" tests/interop/mcp_interop.py \
    "http://127.0.0.1:$H1" "http://127.0.0.1:$H2" interop-mcp-token-0123456789abcdef "$ROWCALL_ADMIN_KEY"
