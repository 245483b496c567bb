#!/usr/bin/env bash
# Interop: the official MCP conformance suite (npm @modelcontextprotocol/conformance, pinned in
# tests/interop/conformance/package-lock.json) against both MCP endpoints of a rowcall node.
#
#   tests/interop/conformance.sh                      # starts its own node (the demo catalogue)
#   tests/interop/conformance.sh --url URL --token T  # a running server, e.g. a deployment
#
# server-sse-polling calls the suite's test tool test_reconnection, which a node serves only
# with ROWCALL_MCP_TEST_TOOLS=1 (the node this script starts has it; a deployment should not).
#
# Runs every server scenario of the suite except those in EXCLUDED below, each of which says
# why it does not apply; the two lists together must be the suite's whole list, so a scenario
# a new suite version adds is never skipped silently. A failure or a warning fails the run
# unless the scenario is in conformance/expected-failures.yml, which says why; an entry
# there that passes fails the run too. The suite has no auth option: conformance/bearer.cjs,
# preloaded into it, adds the bearer token to its requests (no proxy in between).
set -euo pipefail
cd "$(dirname "$0")/../.."

URLS=()
TOKEN=""
while [ $# -gt 0 ]; do
    case "$1" in
        --url) URLS+=("$2"); shift 2 ;;
        --token) TOKEN="$2"; shift 2 ;;
        *) echo "usage: $0 [--url MCP_URL]... [--token BEARER_TOKEN]" >&2; exit 2 ;;
    esac
done

# Scenarios run against each endpoint.
RUN=(
    server-initialize
    ping
    tools-list
    server-sse-polling
    server-sse-multiple-streams
    dns-rebinding-protection
)
# Scenario, then why it does not apply to rowcall.
NO_TEST_TOOL="calls one of the suite's own test tools (lower-case names such as test_simple_text); \
a catalogue key is ^[A-Z_][A-Z0-9_]*\$, so no row can be that tool, and the node's test tools \
(ROWCALL_MCP_TEST_TOOLS=1) are only test_reconnection, for server-sse-polling. Tool calls are \
covered by tests/tests/mcp.rs and by tests/interop/run.sh (the Python SDK)"
NO_RESOURCES="rowcall declares no resources capability: its catalogue is tools"
NO_PROMPTS="rowcall declares no prompts capability: its catalogue is tools"
declare -A EXCLUDED=(
    [logging-set-level]="rowcall declares no logging capability, so logging/setLevel is -32601 as the spec says"
    [completion-complete]="rowcall declares no completions capability: it has no prompts or resource templates to complete"
    [tools-call-simple-text]="$NO_TEST_TOOL"
    [tools-call-image]="$NO_TEST_TOOL"
    [tools-call-audio]="$NO_TEST_TOOL"
    [tools-call-embedded-resource]="$NO_TEST_TOOL"
    [tools-call-mixed-content]="$NO_TEST_TOOL"
    [tools-call-with-logging]="$NO_TEST_TOOL"
    [tools-call-error]="$NO_TEST_TOOL"
    [tools-call-with-progress]="$NO_TEST_TOOL"
    [tools-call-sampling]="$NO_TEST_TOOL"
    [tools-call-elicitation]="$NO_TEST_TOOL"
    [json-schema-2020-12]="$NO_TEST_TOOL (json_schema_2020_12_tool; that \$schema, \$defs and additionalProperties survive the projection is checked in node/src/api/mcp/tools.rs)"
    [elicitation-sep1034-defaults]="$NO_TEST_TOOL"
    [elicitation-sep1330-enums]="$NO_TEST_TOOL"
    [resources-list]="$NO_RESOURCES"
    [resources-read-text]="$NO_RESOURCES"
    [resources-read-binary]="$NO_RESOURCES"
    [resources-templates-read]="$NO_RESOURCES"
    [resources-subscribe]="$NO_RESOURCES"
    [resources-unsubscribe]="$NO_RESOURCES"
    [prompts-list]="$NO_PROMPTS"
    [prompts-get-simple]="$NO_PROMPTS"
    [prompts-get-with-args]="$NO_PROMPTS"
    [prompts-get-embedded-resource]="$NO_PROMPTS"
    [prompts-get-with-image]="$NO_PROMPTS"
)
# Bound on one scenario run; the suite's own waits are 10 s at most.
SCENARIO_TIMEOUT=120

TARGET="${CARGO_TARGET_DIR:-target}"
SUITE="$TARGET/mcp-conformance"
source tests/interop/common.sh

if ! command -v npm >/dev/null; then
    echo "== conformance: installing Node.js and npm (Debian)"
    apt-get update -qq
    apt-get install -y -qq nodejs npm
fi

echo "== conformance: the suite from npm into $SUITE"
mkdir -p "$SUITE"
cp tests/interop/conformance/package.json tests/interop/conformance/package-lock.json \
    tests/interop/conformance/bearer.cjs "$SUITE/"
if ! cmp -s tests/interop/conformance/package-lock.json "$SUITE/node_modules/.package-lock.json.installed" 2>/dev/null; then
    timeout 600 npm ci --prefix "$SUITE" --no-audit --no-fund --loglevel=error
    cp tests/interop/conformance/package-lock.json "$SUITE/node_modules/.package-lock.json.installed"
fi
CONFORMANCE="$SUITE/node_modules/.bin/conformance"
echo "node $(node --version), conformance $("$CONFORMANCE" --version)"

# The suite's list and ours must be the same set.
mapfile -t LISTED < <("$CONFORMANCE" list --server | sed -n 's/^ *- //p' | sort)
mapfile -t OURS < <(printf '%s\n' "${RUN[@]}" "${!EXCLUDED[@]}" | sort)
if [ "${LISTED[*]}" != "${OURS[*]}" ]; then
    echo "the suite's server scenarios are not RUN + EXCLUDED of $0:" >&2
    diff <(printf '%s\n' "${LISTED[@]}") <(printf '%s\n' "${OURS[@]}") >&2 || true
    exit 1
fi
echo "not run (do not apply):"
for scenario in $(printf '%s\n' "${!EXCLUDED[@]}" | sort); do
    echo "  - $scenario: ${EXCLUDED[$scenario]}"
done

if [ ${#URLS[@]} -eq 0 ]; then
    node_binary conformance
    TOKEN=conformance-mcp-token-0123456789abcdef
    HTTP=$(free_port) GRPC=$(free_port)
    # The test tools: server-sse-polling calls test_reconnection.
    ROWCALL_ADMIN_KEY=conformance-admin-key-0123456789abcdef ROWCALL_MCP_TOKENS="conformance=$TOKEN" \
        ROWCALL_MCP_TEST_TOOLS=1 "$BIN" --id 1 --http "127.0.0.1:$HTTP" --grpc "127.0.0.1:$GRPC" \
        --data "$WORK/node" >"$WORK/node.log" 2>&1 &
    PIDS+=($!)
    wait_ready "http://127.0.0.1:$HTTP" "$WORK/node.log"
    URLS=("http://127.0.0.1:$HTTP/api/mcp" "http://127.0.0.1:$HTTP/api/mcp/compact")
fi

failed=0
for url in "${URLS[@]}"; do
    for scenario in "${RUN[@]}"; do
        echo "== conformance: $scenario against $url"
        if ! CONFORMANCE_SERVER_URL="$url" CONFORMANCE_BEARER_TOKEN="$TOKEN" \
            NODE_OPTIONS="--require $(cd "$SUITE" && pwd)/bearer.cjs" \
            timeout "$SCENARIO_TIMEOUT" "$CONFORMANCE" server --url "$url" --scenario "$scenario" \
            --expected-failures tests/interop/conformance/expected-failures.yml \
            >"$WORK/out" 2>&1; then
            cat "$WORK/out"
            echo "FAILED: $scenario against $url" >&2
            failed=1
        else
            grep -E '^(Passed|Total)|Expected failures|  ~ ' "$WORK/out" || true
        fi
    done
done
if [ "$failed" -ne 0 ]; then
    [ -f "$WORK/node.log" ] && tail -n 50 "$WORK/node.log" >&2
    exit 1
fi
echo "== conformance: passed"
