#!/usr/bin/env bash
# Founding happens once (issue 29, item 2). A three-node cluster started exactly as
# deploy/local-cluster.sh starts it takes a write; node 1, the founder, loses its whole data
# folder and is started again by the same script. It must not found a second cluster (which
# would acknowledge writes nodes 2 and 3 never see): it asks to rejoin, is refused with the
# advice to remove its old self, and joins as a new incarnation once an operator has done so.
#
#   tests/interop/founder.sh     (ROWCALL_BIN: the node binary, default target/debug)
set -euo pipefail
cd "$(dirname "$0")/../.."

export ROWCALL_BIN=${ROWCALL_BIN:-${CARGO_TARGET_DIR:-target}/debug/rowcall-node}
dir=$(mktemp -d)
export ROWCALL_CLUSTER_DIR=$dir
export ROWCALL_ADMIN_KEY=founder-check-admin-key-0123456789
export ROWCALL_NO_DEMO=1
export ROWCALL_WAIT_SECS=60
trap 'deploy/local-cluster.sh down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

fail() {
    echo "founder check FAILED: $*" >&2
    tail -n 30 "$dir"/node-1/node.log >&2 || true
    exit 1
}
url() { echo "http://127.0.0.1:$((8080 + $1))"; }
# A field of node $1's GET /api/cluster (empty when it does not answer); the admin key, as
# the cluster id is told to no one else.
cluster_field() {
    curl -s --max-time 2 -H "x-terminal-key: $ROWCALL_ADMIN_KEY" "$(url "$1")/api/cluster" |
        python3 -c "import json,sys; print(json.load(sys.stdin).get('$2') or '')" 2>/dev/null || true
}

deploy/local-cluster.sh up 3
cluster=$(cluster_field 2 cluster_id)
[[ -n $cluster ]] || fail "node 2 names no cluster"
curl -sf -o /dev/null -X POST "$(url 2)/api/directory" \
    -H "x-terminal-key: $ROWCALL_ADMIN_KEY" -H 'content-type: application/json' \
    -d '{"key":"BEFORE_THE_LOSS","type":"static","auth":"public","content":"# WHAT: founder check\n\n{}"}' ||
    fail "the write before the loss was not acknowledged"

echo "== node 1 loses its data folder and is started again with the same command"
kill -9 "$(cat "$dir/node-1/node.pid")"
sleep 0.5
rm -rf "$dir/node-1"
if deploy/local-cluster.sh up 3; then
    fail "node 1 became ready on an empty folder: it founded (or joined) without being re-admitted"
fi
grep -q "DELETE /api/cluster/members/1" "$dir/node-1/node.log" ||
    fail "node 1's refusal does not say how to re-admit it"
for id in 2 3; do
    [[ $(cluster_field "$id" cluster_id) == "$cluster" ]] || fail "node $id changed cluster"
done
[[ -z $(cluster_field 1 cluster_id) ]] || fail "node 1 still serves a cluster of its own"

echo "== the operator removes the old node 1; the same command then re-admits it"
curl -sf -o /dev/null -X DELETE "$(url 2)/api/cluster/members/1" -H "x-terminal-key: $ROWCALL_ADMIN_KEY" ||
    fail "removing the old node 1 failed"
deploy/local-cluster.sh up 3
[[ $(cluster_field 1 cluster_id) == "$cluster" ]] || fail "node 1 rejoined another cluster"
for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$(url 1)/api/directory/BEFORE_THE_LOSS")
    [[ $code == 200 ]] && break
    sleep 0.1
done
[[ $code == 200 ]] || fail "node 1 lacks the write acknowledged before the loss ($code)"
echo "founder check: passed"
