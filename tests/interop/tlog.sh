#!/usr/bin/env bash
# Interop from outside the project: Go's own checksum-database libraries,
# golang.org/x/mod/sumdb/tlog and golang.org/x/mod/sumdb/note (Debian's golang-golang-x-mod-dev),
# verify the transparency log of a three-node cluster of the real rowcall-node binary on
# loopback: co-signed checkpoints (signed notes, a majority of voters), inclusion proofs of
# receipts, a consistency proof between two checkpoints, and tampered ones refused.
# tests/interop/tlog/main.go is the verifier; this script builds it offline, drives the
# cluster and hands it the nodes and the receipt ids.
# Installs Go and x/mod from Debian's packages when they are missing (CI runs as root and
# reaches no Go module proxy). Exits non-zero on any failure; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/interop/common.sh

GOSRC=/usr/share/gocode/src/golang.org/x/mod/sumdb
if ! command -v go >/dev/null || [ ! -d "$GOSRC/tlog" ] || [ ! -d "$GOSRC/note" ]; then
    echo "== tlog: installing Debian's golang-go and golang-golang-x-mod-dev"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        golang-go golang-golang-x-mod-dev >/dev/null
fi
go version
dpkg-query -W -f='  ${Package} ${Version}\n' golang-golang-x-mod-dev || true

echo "== tlog: building the Go verifier (tests/interop/tlog) against Debian's x/mod, offline"
# GOPATH mode over the tree Debian installs the Go libraries in: nothing is downloaded, no
# module proxy is asked (GOPROXY=off) and no newer toolchain is fetched (GOTOOLCHAIN=local);
# the build cache stays in the scratch folder.
export GO111MODULE=off GOPATH=/usr/share/gocode GOPROXY=off GOFLAGS= GOTOOLCHAIN=local GOCACHE="$WORK/gocache"
unformatted=$(gofmt -l tests/interop/tlog)
if [ -n "$unformatted" ]; then
    echo "tlog: gofmt would change $unformatted" >&2
    exit 1
fi
(cd tests/interop/tlog && timeout 300 go vet . && timeout 300 go build -o "$WORK/tlogcheck" .)

node_binary tlog

export ROWCALL_ADMIN_KEY=tlog-admin-key-0123456789abcdef0123456
H1=$(free_port) G1=$(free_port) H2=$(free_port) G2=$(free_port) H3=$(free_port) G3=$(free_port)
"$BIN" --id 1 --http "127.0.0.1:$H1" --grpc "127.0.0.1:$G1" --data "$WORK/node-1" >"$WORK/node-1.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H1" "$WORK/node-1.log"
# The others join with a join token node 1 mints, as an operator adds nodes to a cluster.
ROWCALL_JOIN_TOKEN=$(mint_join_token "http://127.0.0.1:$H1")
export ROWCALL_JOIN_TOKEN
"$BIN" --id 2 --http "127.0.0.1:$H2" --grpc "127.0.0.1:$G2" --data "$WORK/node-2" --join "127.0.0.1:$G1" \
    >"$WORK/node-2.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H2" "$WORK/node-2.log"
"$BIN" --id 3 --http "127.0.0.1:$H3" --grpc "127.0.0.1:$G3" --data "$WORK/node-3" --join "127.0.0.1:$G1" \
    >"$WORK/node-3.log" 2>&1 &
PIDS+=($!)
wait_ready "http://127.0.0.1:$H3" "$WORK/node-3.log"
NODES="http://127.0.0.1:$H1,http://127.0.0.1:$H2,http://127.0.0.1:$H3"

logs() {
    for n in 1 2 3; do echo "--- node $n log (tail)" >&2; tail -15 "$WORK/node-$n.log" >&2; done
}

# Runs a demo row through one node (POST /api/dispatch) and appends its receipt id to IDS.
# A row that fails still leaves a receipt (and so a leaf); only a committed one is wanted.
IDS=""
invoke() { # http-port key args-json
    local answer id
    answer=$(curl -sS --max-time 20 -X POST -H 'content-type: application/json' \
        -d "{\"key\":\"$2\",\"args\":$3}" "http://127.0.0.1:$1/api/dispatch") || { logs; return 1; }
    id=$(python3 -c 'import json, sys
proof = json.loads(sys.argv[1]).get("proof") or {}
if proof.get("status") != "committed" or not proof.get("invocation_id"):
    sys.exit("tlog: no committed receipt in " + sys.argv[1])
print(proof["invocation_id"])' "$answer")
    echo "  $2 through :$1 -> $id"
    IDS="$IDS${IDS:+,}$id"
}

# Asks a node for a checkpoint of the tree as it is now (POST, admin key): 200 once a majority
# co-signed it, 503 if that took over 10 s, so up to three tries on a 503 or no answer.
# Sets SIZE to its size.
checkpoint() { # http-port
    local answer code
    for _ in 1 2 3; do
        answer=$(curl -sS --max-time 30 -X POST -H "authorization: Bearer $ROWCALL_ADMIN_KEY" \
            -w '\n%{http_code}' "http://127.0.0.1:$1/api/receipts/checkpoint") || answer=$'\n000'
        code=${answer##*$'\n'}
        answer=${answer%$'\n'*}
        if [ "$code" = 200 ]; then
            SIZE=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["size"])' "$answer")
            echo "  co-signed through :$1 at size $SIZE"
            return 0
        fi
        echo "  POST /api/receipts/checkpoint on :$1 answered $code: $answer" >&2
        if [ "$code" != 503 ] && [ "$code" != 000 ]; then break; fi
        sleep 1
    done
    logs
    return 1
}

verify() { # tlogcheck arguments...
    if ! timeout 120 "$WORK/tlogcheck" -nodes "$NODES" -ids "$IDS" -min-size "$SIZE" "$@"; then
        logs
        exit 1
    fi
}

echo "== tlog: invocations through every node, then a co-signed checkpoint"
# Rows that need no network; BASE64_DECODE of non-base64 fails, so one leaf records an error.
invoke "$H1" TIME_NOW '{}'
invoke "$H2" ECHO '{"n":1,"text":"h\u00e9llo \"quoted\""}'
invoke "$H3" SHA256_HASH '{"text":"rowcall"}'
invoke "$H1" BASE64_DECODE '{"data":"%%%"}'
invoke "$H2" WORD_COUNT '{"text":"one two three"}'
checkpoint "$H1"

echo "== tlog: Go's note and tlog verify the checkpoint on every node and each receipt's inclusion"
verify -save "$WORK/checkpoint-1.json"

echo "== tlog: more invocations, a second checkpoint, and its consistency with the first"
invoke "$H3" UUID_NEW '{}'
invoke "$H1" ECHO '{"n":2}'
invoke "$H2" NOW '{}'
invoke "$H3" BASE64_ENCODE '{"text":"rowcall"}'
# Through a follower this time: it signs the tree it has applied and waits for a majority.
checkpoint "$H2"
# Every receipt again, in the larger tree, and the first checkpoint proven a prefix of it.
verify -since "$WORK/checkpoint-1.json"
