"""Real rowcall-node processes for the tests: a cluster on free loopback ports, started as
the README's multi-node start does (every node holds the cluster secret and names the
others with --bootstrap --join), waited for by polling /readyz, killed with SIGKILL.

The binary: ROWCALL_NODE_BIN, else ``target/debug/rowcall-node`` under CARGO_TARGET_DIR or
the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ADMIN_KEY = "pytest-admin-key-0123456789abcdef0123"
CLUSTER_SECRET = "pytest-cluster-secret-0123456789abcdef0123456789"
READY_WITHIN = 60.0


def node_binary() -> Path:
    env = os.environ.get("ROWCALL_NODE_BIN")
    if env:
        return Path(env)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "rowcall-node"


def cli_binary() -> Path:
    """The Rust client's command line, ``rowcall``: ROWCALL_CLI_BIN, else beside the node."""
    env = os.environ.get("ROWCALL_CLI_BIN")
    return Path(env) if env else node_binary().parent / "rowcall"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    id: int
    http: int
    grpc: int
    data: Path
    log: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = None

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc}"


@dataclass
class Cluster:
    """``n`` nodes; with ``tls`` their gRPC listeners serve the operator's certificates
    (made with deploy/tls/make-certs.sh) and ``ca`` is the CA file clients trust."""

    n: int = 3
    tls: bool = False
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rowcall-py-")))
    nodes: list[Node] = field(default_factory=list)
    ca: Path | None = None

    def start(self) -> Cluster:
        binary = node_binary()
        if not binary.exists():
            raise RuntimeError(f"no rowcall-node at {binary}: build it or set ROWCALL_NODE_BIN")
        ports = [(free_port(), free_port()) for _ in range(self.n)]
        if self.tls:
            self._certificates()
        for i, (http, grpc) in enumerate(ports, start=1):
            others = ",".join(f"127.0.0.1:{g}" for j, (_, g) in enumerate(ports, 1) if j != i)
            args = [
                "--id",
                str(i),
                "--http",
                f"127.0.0.1:{http}",
                "--grpc",
                f"127.0.0.1:{grpc}",
                "--data",
                str(self.root / f"node-{i}"),
                "--bootstrap",
            ]
            if others:
                args += ["--join", others]
            if self.tls:
                tls = self.root / "tls"
                args += [
                    "--peer-ca",
                    str(tls / "ca.crt"),
                    "--peer-cert",
                    str(tls / f"node-{i}.crt"),
                    "--peer-key",
                    str(tls / f"node-{i}.key"),
                ]
            self.nodes.append(
                Node(i, http, grpc, self.root / f"node-{i}", self.root / f"node-{i}.log", args)
            )
        for node in self.nodes:
            self.launch(node.id)
        for node in self.nodes:
            self.wait_ready(node.id)
        return self

    def _certificates(self) -> None:
        script = REPO / "deploy" / "tls" / "make-certs.sh"
        tls = self.root / "tls"
        for i in range(1, self.n + 1):
            subprocess.run(
                ["bash", str(script), str(tls), f"node-{i}", "127.0.0.1"],
                check=True,
                stdout=subprocess.DEVNULL,
                timeout=60,
            )
        self.ca = tls / "ca.crt"

    def node(self, id: int) -> Node:
        return self.nodes[id - 1]

    def launch(self, id: int) -> None:
        node = self.node(id)
        env = dict(
            os.environ,
            ROWCALL_ADMIN_KEY=ADMIN_KEY,
            ROWCALL_CLUSTER_SECRET=CLUSTER_SECRET,
            ROWCALL_RATE_LIMIT="off",
            NO_COLOR="1",
            ROWCALL_LOG=os.environ.get("ROWCALL_LOG", "info,openraft=warn,sled=warn"),
        )
        log = open(node.log, "ab")  # noqa: SIM115 (the child keeps it)
        node.process = subprocess.Popen(
            [str(node_binary()), *node.args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()

    def ready(self, id: int) -> bool:
        url = f"http://127.0.0.1:{self.node(id).http}/readyz"
        if self.tls:
            return self._ready_tls(id)
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def _ready_tls(self, id: int) -> bool:
        # The HTTP listener is plain HTTP here (no --https-cert).
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.node(id).http}/readyz", timeout=1
            ) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def wait_ready(self, id: int) -> None:
        deadline = time.monotonic() + READY_WITHIN
        node = self.node(id)
        while time.monotonic() < deadline:
            if node.process is not None and node.process.poll() is not None:
                raise RuntimeError(f"node {id} exited: {node.log.read_text()[-3000:]}")
            if self.ready(id):
                return
            time.sleep(0.1)
        raise RuntimeError(f"node {id} never became ready: {node.log.read_text()[-3000:]}")

    def kill(self, id: int) -> None:
        """SIGKILL, as a crash."""
        node = self.node(id)
        if node.process is not None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(timeout=10)
            node.process = None

    def pause(self, id: int) -> None:
        process = self.node(id).process
        assert process is not None
        process.send_signal(signal.SIGSTOP)

    def resume(self, id: int) -> None:
        process = self.node(id).process
        assert process is not None
        process.send_signal(signal.SIGCONT)

    def leader(self) -> int:
        """The leader's id, once every running node names the same one in /api/cluster
        (polled: after a fault a node may still name the leader it knew)."""
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            named: set[object] = set()
            for node in self.nodes:
                if node.process is None:
                    continue
                try:
                    url = f"http://127.0.0.1:{node.http}/api/cluster"
                    with urllib.request.urlopen(url, timeout=1) as answer:
                        named.add(json.load(answer).get("leader"))
                except (OSError, ValueError):
                    named.add(None)
            if len(named) == 1:
                (leader,) = named
                if isinstance(leader, int) and self.node(leader).process is not None:
                    return leader
            time.sleep(0.1)
        raise RuntimeError("the nodes name no one leader")

    def grpc_addrs(self) -> list[str]:
        return [n.grpc_addr for n in self.nodes]

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                node.process.send_signal(signal.SIGCONT)
                node.process.kill()
                node.process.wait(timeout=10)
                node.process = None
        if os.environ.get("ROWCALL_KEEP_TEST_DATA") != "1":
            shutil.rmtree(self.root, ignore_errors=True)
