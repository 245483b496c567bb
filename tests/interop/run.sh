#!/usr/bin/env bash
# Interop from outside the project, against a three-node cluster of the real rowcall-node
# binary on loopback, from a fresh virtual environment of PyPI packages:
#   - the official Python MCP SDK (`mcp`) against the MCP projection (nodes 1 and 2);
#   - the public gRPC API (rowcall.v1) through stubs that grpcio-tools generates from proto/,
#     with grpcio-reflection and grpcio-health-checking (all three nodes).
# Exits non-zero on any failure; every step is bounded in time (CI has 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/interop/common.sh

echo "== interop: python venv with mcp and grpcio"
python3 -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
timeout 300 "$WORK/venv/bin/pip" install --quiet --disable-pip-version-check \
    mcp grpcio grpcio-tools grpcio-reflection grpcio-health-checking grpcio-status
"$WORK/venv/bin/pip" show mcp grpcio grpcio-tools | sed -n 's/^Version: /  /p;s/^Name: /  /p' | paste - -

echo "== interop: python stubs for rowcall.v1, generated from proto/"
mkdir -p "$WORK/stubs"
"$PY" -m grpc_tools.protoc -I proto/proto --python_out="$WORK/stubs" --grpc_python_out="$WORK/stubs" \
    rowcall/v1/types.proto rowcall/v1/api.proto

node_binary interop

export ROWCALL_ADMIN_KEY=interop-admin-key-0123456789abcdef012
export ROWCALL_MCP_TOKENS=interop=interop-mcp-token-0123456789abcdef
H1=$(free_port) G1=$(free_port) H2=$(free_port) G2=$(free_port) H3=$(free_port) G3=$(free_port)
# Small pages, so that the SDK follows cursors through the demo catalogue.
printf '[mcp]\npage_size = 5\n' >"$WORK/rowcall.toml"

"$BIN" --id 1 --http "127.0.0.1:$H1" --grpc "127.0.0.1:$G1" --data "$WORK/node-1" --config "$WORK/rowcall.toml" >"$WORK/node-1.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H1" "$WORK/node-1.log"
# The others join with a join token node 1 mints, as an operator adds nodes to a cluster.
ROWCALL_JOIN_TOKEN=$(mint_join_token "http://127.0.0.1:$H1")
export ROWCALL_JOIN_TOKEN
"$BIN" --id 2 --http "127.0.0.1:$H2" --grpc "127.0.0.1:$G2" --data "$WORK/node-2" --join "127.0.0.1:$G1" \
    --config "$WORK/rowcall.toml" >"$WORK/node-2.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H2" "$WORK/node-2.log"
"$BIN" --id 3 --http "127.0.0.1:$H3" --grpc "127.0.0.1:$G3" --data "$WORK/node-3" --join "127.0.0.1:$G1" \
    --config "$WORK/rowcall.toml" >"$WORK/node-3.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H3" "$WORK/node-3.log"

echo "== interop: python MCP SDK against the cluster"
timeout 120 "$PY" tests/interop/mcp_interop.py \
    "http://127.0.0.1:$H1" "http://127.0.0.1:$H2" interop-mcp-token-0123456789abcdef "$ROWCALL_ADMIN_KEY"

echo "== interop: python gRPC client (generated stubs, reflection, health) against the cluster"
timeout 120 "$PY" tests/interop/grpc_interop.py "$WORK/stubs" "$ROWCALL_ADMIN_KEY" \
    "127.0.0.1:$G1" "127.0.0.1:$G2" "127.0.0.1:$G3"
