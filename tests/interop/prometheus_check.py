"""Checks, through Prometheus's HTTP API, that Prometheus scrapes a 3-node rowcall cluster the
way deploy/prometheus/alerts.yml and deploy/grafana/rowcall-dashboard.json expect it to.

Standard library only. Usage:
    prometheus_check.py PROM_URL DASHBOARD_JSON ADMIN_KEY NODE_URL=PID [NODE_URL=PID ...]

What must hold, in order:
  1. every node is `up`, and exactly one is the leader;
  2. under traffic (asks, directory writes, invocations) the applied index rises on every
     node, and the invocation and ask counters move;
  3. every metric an alert rule (read from Prometheus's own /api/v1/rules, so the file it
     loaded is the one checked) or a dashboard panel uses has series, and every panel's
     expression is valid PromQL;
  4. with the leader killed, the surviving nodes elect another, their leader-change counters
     move, and the RowcallNodeDown rule goes pending for the dead node.
Exits non-zero with a message naming the first thing that did not hold.
"""

import json
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

PROM, DASHBOARD, ADMIN = sys.argv[1], sys.argv[2], sys.argv[3]
NODES = dict(arg.split("=", 1) for arg in sys.argv[4:])  # "http://127.0.0.1:8081" -> pid
# Grafana's template variables, given the values a user who picks "all" would.
# `name{matchers}` or a bare `name` (not a function call: no `(` after it).
SELECTOR = re.compile(r"\b(rowcall_[a-z0-9_]+|up)\b(?!\s*\()(?:\s*\{([^}]*)\})?")
LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
SCRAPE_LABELS = {"job", "instance", "cluster", "__name__"}
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$job": "rowcall", "$instance": ".*"}


def fail(message):
    print(f"prometheus: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def get(url, headers=None, data=None, method=None):
    request = urllib.request.Request(url, headers=headers or {}, data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


def query(expr):
    """An instant query: [(labels, value)], or fails on a PromQL error."""
    url = f"{PROM}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        answer = get(url)
    except urllib.error.HTTPError as e:
        fail(f"query {expr!r}: {e.code} {e.read().decode(errors='replace')}")
    if answer["status"] != "success":
        fail(f"query {expr!r}: {answer}")
    return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]


def by_instance(expr):
    return {labels.get("instance"): value for labels, value in query(expr)}


def eventually(what, check, seconds=60):
    """Polls `check` (truthy when done) once a second; fails naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            fail(f"{what} (waited {seconds} s)")
        time.sleep(1)


def rises(what, expr, before, where):
    """Waits until `expr` is above `before` on every instance in `where`; prints both."""
    def risen():
        now = by_instance(expr)
        return all(now.get(i, 0) > before.get(i, 0) for i in where) and now
    now = eventually(f"the {what} rising on every one of {sorted(where)}", risen)
    print(f"prometheus: {what} rose: "
          + ", ".join(f"{i} {before.get(i, 0):.0f}->{now[i]:.0f}" for i in sorted(where)))


def drive(seconds):
    """Asks, directory writes and invocations spread over the nodes for `seconds`."""
    urls = list(NODES)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        url = urls[n % len(urls)]
        q = urllib.parse.urlencode({"ask": "what time is it"})
        get(f"{url}/api/dispatch?{q}")
        row = {
            "key": f"PROM_CHECK_{n}",
            "type": "static",
            "auth": "public",
            "content": f"# WHAT: A row the Prometheus interop check writes\n\n{{\"n\":{n}}}\n",
        }
        get(f"{url}/api/directory", data=json.dumps(row).encode(), method="POST",
            headers={"content-type": "application/json", "x-terminal-key": ADMIN})
        get(f"{url}/api/dispatch", data=json.dumps({"key": "TIME_NOW"}).encode(), method="POST",
            headers={"content-type": "application/json"})
        n += 1
        time.sleep(0.1)
    return n


def instances():
    return {urllib.parse.urlparse(url).netloc for url in NODES}


def main():
    want = instances()
    eventually(f"all {len(want)} nodes up", lambda: by_instance('up{job="rowcall"} == 1').keys() >= want)
    print(f"prometheus: {len(want)} nodes up")
    leaders = eventually("exactly one leader", lambda: (
        l := by_instance('rowcall_raft_is_leader{job="rowcall"} == 1')) and len(l) == 1 and l)
    print(f"prometheus: one leader, {next(iter(leaders))}")

    before = by_instance('rowcall_raft_applied_index{job="rowcall"}')
    rounds = drive(8)
    print(f"prometheus: drove {rounds} rounds of ask + write + invoke")

    rises("applied index", 'rowcall_raft_applied_index{job="rowcall"}', before, want)
    for name in ["rowcall_dispatch_invocations_total", "rowcall_resolver_ask_duration_seconds_count"]:
        eventually(f"{name} moving", lambda: sum(v for _, v in query(f"increase({name}[1m])")) > 0)
        print(f"prometheus: {name} moves")

    # Every expression the operator relies on: the rules Prometheus loaded, the dashboard's panels.
    rules = get(f"{PROM}/api/v1/rules")["data"]["groups"]
    expressions = [(f"rule {r['name']}", r["query"]) for g in rules for r in g["rules"]]
    if not expressions:
        fail("Prometheus loaded no alert rules")
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if expr:
                for var, value in GRAFANA_VARS.items():
                    expr = expr.replace(var, value)
                expressions.append((f"panel {panel.get('title')!r}", expr))
    # Each selector's metric must have series, and each label it matches on must be on them
    # (a selector for a label the exporter never sets, e.g. a summary's `quantile` on a
    # histogram, matches nothing forever). Labels from the scrape are on every series.
    uses = {}
    for where, expr in expressions:
        query(expr)  # valid PromQL, or fail() says which
        for name, matchers in SELECTOR.findall(expr):
            for label in LABEL.findall(matchers):
                if label not in SCRAPE_LABELS:
                    uses.setdefault((name, label), where)
            uses.setdefault((name, None), where)
    for (name, label), where in sorted(uses.items(), key=str):
        has = f'{{__name__="{name}", job="rowcall"}}' if label is None else \
            f'{{__name__="{name}", job="rowcall", {label}!=""}}'
        what = f"series for {name}" + (f" with a {label} label" if label else "")
        eventually(f"{what} (used by {where})", lambda: query(f"count({has})"), seconds=20)
    metrics = {name for name, _ in uses}
    print(f"prometheus: {len(expressions)} rule and panel expressions valid; all {len(metrics)} "
          f"metrics they select have series, with every label they match on")

    # Kill the leader: another is elected, the leader-change counters move, the rule notices.
    leader = next(iter(leaders))
    rest = want - {leader}
    changes = by_instance('rowcall_raft_leader_changes_seen_total{job="rowcall"}')
    pid = next(pid for url, pid in NODES.items() if urllib.parse.urlparse(url).netloc == leader)
    os.kill(int(pid), signal.SIGKILL)
    print(f"prometheus: killed the leader {leader} (pid {pid})")

    def new_leader():
        now = by_instance('rowcall_raft_is_leader{job="rowcall"} == 1')
        alive = [i for i in now if i in rest]
        return len(alive) == 1 and alive[0]
    print(f"prometheus: new leader {eventually('a new leader among the survivors', new_leader)}")

    rises("leader changes seen", 'rowcall_raft_leader_changes_seen_total{job="rowcall"}',
          changes, rest)

    def noticed():
        alerts = get(f"{PROM}/api/v1/alerts")["data"]["alerts"]
        return [a["state"] for a in alerts if a["labels"].get("alertname") == "RowcallNodeDown"
                and a["labels"].get("instance") == leader]
    print(f"prometheus: RowcallNodeDown for {leader}: {eventually('RowcallNodeDown', noticed)[0]}")
    print("prometheus: PASS")


if __name__ == "__main__":
    main()
