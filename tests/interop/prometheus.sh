#!/usr/bin/env bash
# Prometheus for real: Debian's `prometheus` scrapes a three-node cluster of the real
# rowcall-node binary with deploy/prometheus/prometheus.yml (pointed at this test's ports,
# scraping every second) and evaluates deploy/prometheus/alerts.yml;
# tests/interop/prometheus_check.py then checks through Prometheus's HTTP API what the rules
# and the dashboard rely on, and kills the leader. Before that, `promtool check config` on
# the shipped configuration and `promtool test rules` on the rules' unit tests.
# Installs prometheus from Debian's packages when it is missing (CI runs as root).
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/interop/common.sh

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    echo "== prometheus: installing Debian's prometheus"
    apt-get update -qq
    # The package's service is not wanted: this script runs its own Prometheus.
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
prometheus --version 2>&1 | head -1

echo "== prometheus: promtool check config, promtool test rules"
promtool check config deploy/prometheus/prometheus.yml
promtool test rules deploy/prometheus/alerts.test.yml

node_binary prometheus

export ROWCALL_ADMIN_KEY=prometheus-admin-key-0123456789abcdef0
H1=$(free_port) G1=$(free_port) H2=$(free_port) G2=$(free_port) H3=$(free_port) G3=$(free_port)
"$BIN" --id 1 --http "127.0.0.1:$H1" --grpc "127.0.0.1:$G1" --data "$WORK/node-1" >"$WORK/node-1.log" 2>&1 &
PIDS+=($!)
P1=$!
wait_ready "http://127.0.0.1:$H1" "$WORK/node-1.log"
# The others join with a join token node 1 mints, as an operator adds nodes to a cluster.
ROWCALL_JOIN_TOKEN=$(mint_join_token "http://127.0.0.1:$H1")
export ROWCALL_JOIN_TOKEN
"$BIN" --id 2 --http "127.0.0.1:$H2" --grpc "127.0.0.1:$G2" --data "$WORK/node-2" --join "127.0.0.1:$G1" \
    >"$WORK/node-2.log" 2>&1 &
PIDS+=($!)
P2=$!
wait_ready "http://127.0.0.1:$H2" "$WORK/node-2.log"
"$BIN" --id 3 --http "127.0.0.1:$H3" --grpc "127.0.0.1:$G3" --data "$WORK/node-3" --join "127.0.0.1:$G1" \
    >"$WORK/node-3.log" 2>&1 &
PIDS+=($!)
P3=$!
wait_ready "http://127.0.0.1:$H3" "$WORK/node-3.log"

# The shipped configuration, with this test's targets and a one-second scrape and evaluation.
mkdir -p "$WORK/prometheus"
cp deploy/prometheus/alerts.yml "$WORK/prometheus/"
sed -e "s|targets: \[\"127.0.0.1:8081\", \"127.0.0.1:8082\", \"127.0.0.1:8083\"\]|targets: [\"127.0.0.1:$H1\", \"127.0.0.1:$H2\", \"127.0.0.1:$H3\"]|" \
    -e 's|scrape_interval: 15s|scrape_interval: 1s|' -e 's|evaluation_interval: 15s|evaluation_interval: 1s|' \
    deploy/prometheus/prometheus.yml >"$WORK/prometheus/prometheus.yml"
if ! grep -q "127.0.0.1:$H1" "$WORK/prometheus/prometheus.yml"; then
    echo "prometheus: the targets line of deploy/prometheus/prometheus.yml changed; update this script" >&2
    exit 1
fi
promtool check config "$WORK/prometheus/prometheus.yml" >/dev/null
PROM_PORT=$(free_port)
prometheus --config.file="$WORK/prometheus/prometheus.yml" --storage.tsdb.path="$WORK/prometheus/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null 2>&1; then break; fi
    sleep 0.2
done

echo "== prometheus: scraping the cluster"
if ! timeout 300 python3 tests/interop/prometheus_check.py "http://127.0.0.1:$PROM_PORT" \
    deploy/grafana/rowcall-dashboard.json "$ROWCALL_ADMIN_KEY" \
    "http://127.0.0.1:$H1=$P1" "http://127.0.0.1:$H2=$P2" "http://127.0.0.1:$H3=$P3"; then
    echo "--- prometheus log (tail)" >&2
    tail -20 "$WORK/prometheus.log" >&2
    for n in 1 2 3; do echo "--- node $n log (tail)" >&2; tail -10 "$WORK/node-$n.log" >&2; done
    exit 1
fi
