#!/usr/bin/env bash
# Runs an N-node rowcall cluster on loopback, for development and demos (DESIGN §7.1).
#
#   deploy/local-cluster.sh up N     start nodes 1..N (those not already running)
#   deploy/local-cluster.sh status   pid, /readyz and the Raft view of every node
#   deploy/local-cluster.sh down     SIGTERM every node, SIGKILL after a bounded wait
#
# Node i has id i, HTTP 127.0.0.1:(8080+i), gRPC 127.0.0.1:(9080+i), and keeps its data,
# log (node.log) and pid file (node.pid) in $ROWCALL_CLUSTER_DIR/node-i. Every new node starts
# the same way, `--bootstrap --join <every other node 1..N>`: the lowest id founds the cluster
# once every peer answers and none belongs to one; any other node joins the cluster its peers
# belong to. So this command never founds a second cluster: a node that lost its folder asks
# to rejoin, and is refused until its old self is removed. A restart passes the same flags;
# a node whose data folder holds Raft state ignores them.
#
# Environment:
#   ROWCALL_BIN          the binary (default target/release/rowcall-node, then target/debug)
#   ROWCALL_CLUSTER_DIR  where node folders live (default ./rowcall-cluster)
#   ROWCALL_ADMIN_KEY    shared admin key (default: generated once into the cluster dir)
# Every node is started with the cluster secret in $ROWCALL_CLUSTER_DIR/cluster.secret
# (generated once, mode 600; --cluster-secret-file): it gives the nodes their common CA, so
# they found one cluster together and authenticate each other with certificates naming
# their ids, and a node that lost its folder rejoins with its original command.
#   ROWCALL_NO_DEMO=1    start node 1 with --no-demo (an empty catalogue)
#   ROWCALL_WAIT_SECS    how long to wait for each node's /readyz (default 30)
#   ROWCALL_STOP_SECS    how long `down` waits after SIGTERM before SIGKILL (default 15)
# Every other ROWCALL_* variable (ROWCALL_INVOKE_KEYS, ROWCALL_LOG, …) reaches the nodes as is.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER_DIR=${ROWCALL_CLUSTER_DIR:-./rowcall-cluster}
WAIT_SECS=${ROWCALL_WAIT_SECS:-30}
STOP_SECS=${ROWCALL_STOP_SECS:-15}
HTTP_BASE=8080
GRPC_BASE=9080
MAX_NODES=50

die() {
    echo "local-cluster: $*" >&2
    exit 1
}

usage() {
    sed -n '4,6p' "${BASH_SOURCE[0]}" | sed 's/^#  *//'
    exit 2
}

http_addr() { echo "127.0.0.1:$((HTTP_BASE + $1))"; }
grpc_addr() { echo "127.0.0.1:$((GRPC_BASE + $1))"; }
node_dir() { echo "$CLUSTER_DIR/node-$1"; }

# The binary to run: ROWCALL_BIN, else a release build, else a debug build.
find_binary() {
    if [[ -n ${ROWCALL_BIN:-} ]]; then
        [[ -x $ROWCALL_BIN ]] || die "ROWCALL_BIN=$ROWCALL_BIN is not an executable file"
        echo "$ROWCALL_BIN"
        return
    fi
    local target=${CARGO_TARGET_DIR:-$ROOT/target}
    local candidate
    for candidate in "$target/release/rowcall-node" "$target/debug/rowcall-node"; do
        if [[ -x $candidate ]]; then
            echo "$candidate"
            return
        fi
    done
    die "no rowcall-node binary in $target/release or $target/debug.
  Build one first:  cargo build --release -p rowcall-node
  or point ROWCALL_BIN at a binary."
}

# The pid recorded for node $1 if that process is still a rowcall node on that data folder
# (a stale pid file, or a pid reused by an unrelated process, counts as not running).
running_pid() {
    local dir pid args
    dir=$(node_dir "$1")
    [[ -f $dir/node.pid ]] || return 1
    pid=$(<"$dir/node.pid")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    args=$(ps -p "$pid" -o args= 2>/dev/null) || return 1
    [[ " $args " == *" --data $dir "* ]] || return 1
    echo "$pid"
}

# Node ids that have a folder in the cluster dir, in numeric order.
known_nodes() {
    local d
    [[ -d $CLUSTER_DIR ]] || return 0
    for d in "$CLUSTER_DIR"/node-*; do
        [[ -d $d ]] || continue
        d=${d##*/node-}
        if [[ $d =~ ^[0-9]+$ ]]; then
            echo "$d"
        fi
    done | sort -n
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The HTTP status of GET $1 (000 when nothing answers).
http_code() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" || true
}

# Waits (bounded) until node $1 answers 200 on /readyz; fails early if its process dies.
wait_ready() {
    local id=$1 pid=$2 url deadline
    url="http://$(http_addr "$id")/readyz"
    deadline=$((SECONDS + WAIT_SECS))
    while ((SECONDS < deadline)); do
        if [[ $(http_code "$url") == 200 ]]; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "local-cluster: node $id (pid $pid) exited; last lines of its log:" >&2
            tail -n 20 "$(node_dir "$id")/node.log" >&2 || true
            exit 1
        fi
        sleep 0.2
    done
    echo "local-cluster: node $id not ready after ${WAIT_SECS}s ($url); last lines of its log:" >&2
    tail -n 20 "$(node_dir "$id")/node.log" >&2 || true
    echo "local-cluster: node $id (pid $pid) is left running; '$0 down' stops it" >&2
    exit 1
}

# The shared admin key: ROWCALL_ADMIN_KEY, else the one stored in the cluster dir, else a
# new one stored there (mode 600).
admin_key() {
    local file=$CLUSTER_DIR/admin.key
    if [[ -n ${ROWCALL_ADMIN_KEY:-} ]]; then
        echo "$ROWCALL_ADMIN_KEY"
    elif [[ -s $file ]]; then
        cat "$file"
    else
        (
            umask 077
            od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$file"
        )
        cat "$file"
    fi
}

# The file holding the cluster secret every node is started with, made once (mode 600).
cluster_secret_file() {
    local file=$CLUSTER_DIR/cluster.secret
    if [[ ! -s $file ]]; then
        (
            umask 077
            od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$file"
        )
    fi
    echo "$file"
}

# True if folder $1 holds anything besides our own log and pid file (the node's state).
has_state() {
    local entry
    for entry in "$1"/* "$1"/.[!.]*; do
        [[ -e $entry ]] || continue
        case ${entry##*/} in
        node.log | node.pid) ;;
        *) return 0 ;;
        esac
    done
    return 1
}

# The gRPC addresses of nodes 1..$2 but $1, comma-separated: a node's peers.
peers_of() {
    local id=$1 n=$2 other peers=()
    for ((other = 1; other <= n; other++)); do
        ((other == id)) || peers+=("$(grpc_addr "$other")")
    done
    local IFS=,
    echo "${peers[*]}"
}

# Launches node $1 of $3 with binary $2 (without waiting); sets LAUNCHED_PID.
launch_node() {
    local id=$1 bin=$2 n=$3 dir fresh=1
    dir=$(node_dir "$id")
    has_state "$dir" && fresh=0
    # The same flags on every start, as a service unit keeps them: a node with Raft state
    # ignores --bootstrap and --join.
    local args=(--id "$id" --http "$(http_addr "$id")" --grpc "$(grpc_addr "$id")" --data "$dir"
        --cluster-secret-file "$(cluster_secret_file)")
    if ((n > 1)); then
        args+=(--bootstrap --join "$(peers_of "$id" "$n")")
    else
        args+=(--bootstrap)
    fi
    if [[ ${ROWCALL_NO_DEMO:-} == 1 ]]; then
        args+=(--no-demo)
    fi
    local port
    for port in "$((HTTP_BASE + id))" "$((GRPC_BASE + id))"; do
        if port_busy "$port"; then
            die "port $port (node $id) is in use by another process"
        fi
    done
    mkdir -p "$dir"
    echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) local-cluster: $bin ${args[*]}" >>"$dir/node.log"
    # In its own session (setsid, where there is one) the node outlives this shell and is
    # deaf to the terminal's Ctrl-C and hangup. setsid execs in place, so $! is the node.
    if command -v setsid >/dev/null; then
        setsid nohup "$bin" "${args[@]}" >>"$dir/node.log" 2>&1 </dev/null &
    else
        nohup "$bin" "${args[@]}" >>"$dir/node.log" 2>&1 </dev/null &
    fi
    LAUNCHED_PID=$!
    echo "$LAUNCHED_PID" >"$dir/node.pid"
    if ! ((fresh)); then
        echo "node $id: restarting (pid $LAUNCHED_PID) on its data folder"
    elif ((n > 1)); then
        echo "node $id: starting (pid $LAUNCHED_PID): founds with its peers, or joins their cluster"
    else
        echo "node $id: starting (pid $LAUNCHED_PID), initialising a one-node cluster"
    fi
}

# Launches nodes $3.. of $2 with binary $1 all at once, then waits until each is ready.
launch_all() {
    local bin=$1 n=$2 id i
    shift 2
    local ids=("$@") pids=()
    for id in ${ids[@]+"${ids[@]}"}; do
        launch_node "$id" "$bin" "$n"
        pids+=("$LAUNCHED_PID")
    done
    for i in ${ids[@]+"${!ids[@]}"}; do
        wait_ready "${ids[$i]}" "${pids[$i]}"
        echo "node ${ids[$i]}: ready on http://$(http_addr "${ids[$i]}")  (gRPC $(grpc_addr "${ids[$i]}"))"
    done
}

cmd_up() {
    local n=${1:-}
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > MAX_NODES)); then
        die "usage: up N  (1 ≤ N ≤ $MAX_NODES)"
    fi
    command -v curl >/dev/null || die "curl is required"
    mkdir -p "$CLUSTER_DIR"
    CLUSTER_DIR=$(cd "$CLUSTER_DIR" && pwd)

    local id missing=()
    for ((id = 1; id <= n; id++)); do
        running_pid "$id" >/dev/null || missing+=("$id")
    done
    if ((${#missing[@]} == 0)); then
        echo "local-cluster: already up: nodes 1..$n are running in $CLUSTER_DIR"
        return 0
    fi

    local bin key
    bin=$(find_binary)
    [[ -n ${ROWCALL_ADMIN_KEY:-} ]] && ROWCALL_ADMIN_KEY_FROM_ENV=1
    key=$(admin_key)
    export ROWCALL_ADMIN_KEY=$key
    # Plain log files, without ANSI colour codes.
    export NO_COLOR=${NO_COLOR:-1}
    echo "binary:    $bin"
    echo "data:      $CLUSTER_DIR"
    # Nodes with state first, all at once: after a full stop none of them can elect a
    # leader (and so become ready) until a majority is back. Then the new nodes, also all at
    # once: the lowest id founds only when every peer answers, and the others join.
    local restarted=() fresh=()
    for id in "${missing[@]}"; do
        if has_state "$(node_dir "$id")"; then
            restarted+=("$id")
        else
            fresh+=("$id")
        fi
    done
    launch_all "$bin" "$n" ${restarted[@]+"${restarted[@]}"}
    launch_all "$bin" "$n" ${fresh[@]+"${fresh[@]}"}
    if [[ -n ${ROWCALL_ADMIN_KEY_FROM_ENV:-} ]]; then
        echo "admin key: from ROWCALL_ADMIN_KEY"
    else
        echo "admin key: in $CLUSTER_DIR/admin.key (export ROWCALL_ADMIN_KEY=\$(cat $CLUSTER_DIR/admin.key))"
    fi
    echo "try:       curl -s 'http://$(http_addr 1)/api/dispatch?ask=what+time+is+it'"
}

cmd_down() {
    [[ -d $CLUSTER_DIR ]] || {
        echo "local-cluster: nothing to stop ($CLUSTER_DIR does not exist)"
        return 0
    }
    CLUSTER_DIR=$(cd "$CLUSTER_DIR" && pwd)
    local id pid pids=() ids=()
    for id in $(known_nodes); do
        if pid=$(running_pid "$id"); then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            ids+=("$id")
            echo "node $id: SIGTERM (pid $pid)"
        fi
    done
    if ((${#pids[@]} == 0)); then
        echo "local-cluster: no node is running"
        return 0
    fi
    local deadline=$((SECONDS + STOP_SECS)) i alive
    while ((SECONDS < deadline)); do
        alive=0
        for pid in "${pids[@]}"; do
            if kill -0 "$pid" 2>/dev/null; then alive=1; fi
        done
        ((alive)) || break
        sleep 0.2
    done
    for i in "${!pids[@]}"; do
        pid=${pids[$i]}
        if kill -0 "$pid" 2>/dev/null; then
            echo "node ${ids[$i]}: still running after ${STOP_SECS}s, SIGKILL (pid $pid)"
            kill -KILL "$pid" 2>/dev/null || true
        else
            echo "node ${ids[$i]}: stopped"
        fi
        rm -f "$(node_dir "${ids[$i]}")/node.pid"
    done
}

# Prints "role leader term applied" from an /api/cluster answer on stdin.
cluster_fields() {
    if command -v python3 >/dev/null; then
        python3 -c '
import json, sys
try:
    c = json.load(sys.stdin)
    print(c.get("role", "?"), c.get("leader") or "none", c.get("term", "?"), c.get("last_applied", "?"))
except Exception:
    print("? ? ? ?")'
    else
        local body field out=()
        body=$(cat)
        # Top-level fields only: the member objects repeat "leader".
        body=${body%%\"members\"*}
        for field in role leader term last_applied; do
            out+=("$(sed -n "s/.*\"$field\":\"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$body" | head -n 1)")
        done
        [[ ${out[1]:-} == null ]] && out[1]=none
        echo "${out[0]:-?} ${out[1]:-?} ${out[2]:-?} ${out[3]:-?}"
    fi
}

cmd_status() {
    local ids
    ids=$(known_nodes)
    if [[ -z $ids ]]; then
        echo "local-cluster: no nodes in $CLUSTER_DIR"
        return 0
    fi
    CLUSTER_DIR=$(cd "$CLUSTER_DIR" && pwd)
    printf '%-5s %-8s %-8s %-16s %-10s %-10s %-7s %-5s %s\n' \
        NODE PID PROCESS HTTP READYZ ROLE LEADER TERM APPLIED
    local id pid alive ready body role leader term applied
    for id in $ids; do
        if pid=$(running_pid "$id"); then
            alive=up
        else
            pid=-
            alive=down
        fi
        ready=$(http_code "http://$(http_addr "$id")/readyz")
        case $ready in
        200) ready="200 ready" ;;
        000) ready="-" ;;
        esac
        body=$(curl -s --max-time 2 "http://$(http_addr "$id")/api/cluster" || true)
        if [[ -n $body ]]; then
            read -r role leader term applied < <(cluster_fields <<<"$body")
        else
            role=- leader=- term=- applied=-
        fi
        printf '%-5s %-8s %-8s %-16s %-10s %-10s %-7s %-5s %s\n' \
            "$id" "$pid" "$alive" "$(http_addr "$id")" "$ready" "$role" "$leader" "$term" "$applied"
    done
}

case ${1:-} in
up) cmd_up "${2:-}" ;;
down) cmd_down ;;
status) cmd_status ;;
*) usage ;;
esac
