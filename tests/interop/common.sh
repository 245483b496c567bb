# Sourced by the interop scripts: a scratch folder and the nodes they start, both cleaned up
# on exit, and helpers to start nodes on free loopback ports.
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_ready() { # url log
    for _ in $(seq 1 300); do
        if curl -fsS "$1/readyz" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "node at $1 never became ready; its log:" >&2
    cat "$2" >&2
    return 1
}

# Sets BIN to the node binary: ROWCALL_NODE_BIN when set (CI passes the one its test step
# built, sparing a second build with other features), else a debug build made here.
node_binary() { # name of the calling check, for the log
    if [ -n "${ROWCALL_NODE_BIN:-}" ]; then
        BIN="$ROWCALL_NODE_BIN"
    else
        echo "== $1: building rowcall-node"
        cargo build --quiet -p rowcall-node
        BIN="${CARGO_TARGET_DIR:-target}/debug/rowcall-node"
    fi
}

# A join token minted by the node at $1 with the admin key (ROWCALL_ADMIN_KEY): the
# documented way to add a node to a running cluster. Prints the token.
mint_join_token() {
    local answer token
    answer=$(curl -sf -X POST "$1/api/cluster/join-token" -H "x-terminal-key: $ROWCALL_ADMIN_KEY") ||
        { echo "minting a join token at $1 failed" >&2; return 1; }
    token=$(printf '%s' "$answer" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
    [[ -n $token ]] || { echo "no token in: $answer" >&2; return 1; }
    printf '%s' "$token"
}
