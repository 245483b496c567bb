#!/usr/bin/env bash
# Schemathesis (PyPI, in a fresh virtual environment) against /api/openapi.json of a running
# one-node rowcall-node: generated requests for every documented operation, a bounded number
# of examples each (ST_EXAMPLES, default 25). What must hold: no answer is a 5xx, and every
# answer matches what the document says of it (schema and content type). Exits non-zero on a
# failure and prints how many test cases ran.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/interop/common.sh

echo "== schemathesis: python venv"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis>=4,<5"
"$WORK/venv/bin/pip" show schemathesis | sed -n 's/^Version: /schemathesis /p'

node_binary schemathesis

PORT=$(free_port) GRPC=$(free_port)
KEY=schemathesis-admin-key-0123456789abcdef
URL="http://127.0.0.1:$PORT"
ROWCALL_ADMIN_KEY=$KEY "$BIN" --id 1 --http "127.0.0.1:$PORT" --grpc "127.0.0.1:$GRPC" \
    --data "$WORK/node" >"$WORK/node.log" 2>&1 &
PIDS+=($!)
wait_ready "$URL" "$WORK/node.log"

echo "== schemathesis: $URL/api/openapi.json"
# With the admin key, so that every operation is reached past its credential check (the
# admin key is not rate limited). Membership changes are left out: removing the only member
# is a test of the harness, not of the API.
# ST_SEED reproduces a run (schemathesis prints its seed at the end).
seed=()
if [ -n "${ST_SEED:-}" ]; then seed=(--seed "$ST_SEED"); fi
status=0
"$WORK/venv/bin/st" run "$URL/api/openapi.json" \
    --url "$URL" \
    --header "Authorization: Bearer $KEY" \
    --checks not_a_server_error,response_schema_conformance,content_type_conformance \
    --max-examples "${ST_EXAMPLES:-25}" \
    --exclude-path-regex '^/api/cluster/members' \
    --suppress-health-check all \
    "${seed[@]}" \
    --no-color >"$WORK/st.log" 2>&1 || status=$?
cat "$WORK/st.log"
if [ "$status" -ne 0 ]; then
    echo "schemathesis: FAILED (exit $status); the node's log ends:"
    tail -20 "$WORK/node.log"
    exit "$status"
fi
curl -fsS "$URL/healthz" >/dev/null
echo "schemathesis: passed; the node still answers"
