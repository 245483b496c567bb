#!/usr/bin/env python3
"""Runs the shown sessions of the README and the book against a real demo node, so their
"real output" stays real: every `console` block whose commands are `curl` calls to
localhost:8080 is run in order on a fresh demo node (`rowcall-node` with its demo
catalogue), and each command's output is compared with the one shown.

    python3 docs/run_examples.py ROWCALL_NODE

JSON is compared value by value, except values that differ on every run (times, receipt
ids, hashes of a time): those are checked for their type only, and a receipt id the node
gave is put in place of the shown one in later commands and outputs. `,...` in a shown
object means "and more keys"; a line `...` in shown text means "and more lines". Text
otherwise matches line for line. Exits 1 naming every difference.
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FILES = ["README.md", "docs/src/getting-started.md"]
SHOWN_ADDR = re.compile(r"\b(localhost|127\.0\.0\.1):8080\b")
ADMIN_KEY = "docs-examples-admin-key-0123456789abcdef"
# Values that differ on every run: the clock, and what is derived from it.
VOLATILE = {"utc", "date", "time", "unix_ms", "at", "updated_at", "output_sha256"}
# Receipt ids: new on every run, and named again by later commands.
IDS = {"invocation_id", "id"}


def sessions(path):
    """(line number, command, shown output) for every command of the runnable `console`
    blocks of `path`."""
    out, block, lines = [], None, open(os.path.join(REPO, path), encoding="utf-8").read()
    for n, line in enumerate(lines.splitlines(), 1):
        if block is None:
            if line.strip() == "```console":
                block = []
            continue
        if line.strip() == "```":
            out += commands_of(block)
            block = None
            continue
        block.append((n, line))
    return [c for c in out if c[1].startswith("curl ") and SHOWN_ADDR.search(c[1])]


def commands_of(block):
    out, i = [], 0
    while i < len(block):
        n, line = block[i]
        if not line.startswith("$ "):
            i += 1
            continue
        command = line[2:]
        while command.rstrip().endswith("\\") and i + 1 < len(block):
            i += 1
            command = command.rstrip()[:-1] + " " + block[i][1].strip()
        i += 1
        shown = []
        while i < len(block) and not block[i][1].startswith("$ "):
            shown.append(block[i][1])
            i += 1
        while shown and not shown[-1].strip():
            shown.pop()
        out.append((n, command, "\n".join(shown)))
    return out


class Session:
    def __init__(self, addr):
        self.addr = addr
        self.ids = {}

    def localise(self, text):
        text = SHOWN_ADDR.sub(self.addr, text)
        for shown, got in self.ids.items():
            text = text.replace(shown, got)
        return text

    def compare(self, shown, got, where, problems):
        if isinstance(shown, dict):
            if not isinstance(got, dict):
                problems.append(f"{where}: shown an object, got {json.dumps(got)[:80]}")
                return
            open_ended = shown.pop("...", False)
            for key, value in shown.items():
                if key not in got:
                    problems.append(f"{where}.{key}: shown, but not in the answer")
                elif key in IDS and isinstance(value, str) and isinstance(got[key], str):
                    self.ids.setdefault(value, got[key])
                elif key in VOLATILE:
                    if type(value) is not type(got[key]):
                        problems.append(f"{where}.{key}: shown {value!r}, got {got[key]!r}")
                else:
                    self.compare(value, got[key], f"{where}.{key}", problems)
            extra = sorted(set(got) - set(shown))
            if extra and not open_ended:
                problems.append(f"{where}: the answer has keys the shown one lacks: {extra}")
        elif isinstance(shown, list):
            if not isinstance(got, list) or len(got) != len(shown):
                problems.append(f"{where}: shown {len(shown)} items, got {json.dumps(got)[:120]}")
                return
            for i, (s, g) in enumerate(zip(shown, got)):
                self.compare(s, g, f"{where}[{i}]", problems)
        else:
            if isinstance(shown, str):
                shown = self.localise(shown)
            if shown != got:
                problems.append(f"{where}: shown {shown!r}, got {got!r}")


def shown_json(text):
    """The shown JSON, with `,...` (more keys) kept as a `"...": true` key."""
    return json.loads(re.sub(r",\.\.\.\s*}", ',"...":true}', text))


def check(session, where, command, shown, problems):
    env = dict(os.environ, ROWCALL_ADMIN_KEY=ADMIN_KEY)
    run = subprocess.run(["bash", "-c", session.localise(command)], env=env,
                         capture_output=True, text=True, timeout=60)
    got = run.stdout.rstrip("\n")
    if run.returncode != 0:
        problems.append(f"{where}: `{command[:60]}` exited {run.returncode}: {run.stderr[:200]}")
        return
    if shown.lstrip().startswith("{"):
        try:
            expected = shown_json(shown)
        except ValueError as e:
            problems.append(f"{where}: the shown output is not JSON: {e}")
            return
        try:
            answer = json.loads(got)
        except ValueError:
            problems.append(f"{where}: the answer is not JSON: {got[:200]}")
            return
        session.compare(expected, answer, where, problems)
        return
    got_lines = got.splitlines()
    for i, line in enumerate(shown.splitlines()):
        if line.strip() == "...":
            return
        have = got_lines[i] if i < len(got_lines) else None
        if session.localise(line) != have:
            problems.append(f"{where}: line {i + 1}: shown {line!r}, got {have!r}")
            return
    if len(got_lines) > len(shown.splitlines()):
        problems.append(f"{where}: the answer has more lines than shown (end it with `...`)")


def free_ports(count):
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    node_bin = sys.argv[1]
    problems, ran = [], 0
    for path in FILES:
        commands = sessions(path)
        if not commands:
            continue
        # A fresh demo node per file: each file's session starts where a reader's does.
        with tempfile.TemporaryDirectory() as work:
            http, grpc = free_ports(2)
            addr = f"127.0.0.1:{http}"
            log = open(os.path.join(work, "node.log"), "w")
            env = dict(os.environ, ROWCALL_ADMIN_KEY=ADMIN_KEY)
            node = subprocess.Popen(
                [node_bin, "--http", addr, "--grpc", f"127.0.0.1:{grpc}",
                 "--data", os.path.join(work, "data")],
                stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                if not ready(addr, node):
                    log.flush()
                    print(f"{path}: the demo node did not become ready; its log:", file=sys.stderr)
                    print(open(os.path.join(work, "node.log")).read(), file=sys.stderr)
                    return 1
                session = Session(addr)
                for n, command, shown in commands:
                    check(session, f"{path}:{n}", command, shown, problems)
                    ran += 1
            finally:
                node.terminate()
                node.wait(timeout=30)
    for p in problems:
        print(p)
    print(f"docs/run_examples.py: {ran} shown commands run on a demo node: "
          f"{len(problems)} differences")
    return 1 if problems or not ran else 0


def ready(addr, node):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if node.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://{addr}/readyz", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


if __name__ == "__main__":
    sys.exit(main())
