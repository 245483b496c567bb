"""The same server answers give the same errors as the Rust client: each request here is
made through this package and through the Rust client (its command line, `rowcall`, which
prints `rowcall_client::Error`), against the same real cluster, and the error this package
raises (its type, code, hint and text) must be the one the Rust client reports."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable

import pytest
from cluster import ADMIN_KEY, Cluster, cli_binary

import rowcall


def rust(cluster: Cluster, *args: str, stdin: str = "", key: str = ADMIN_KEY) -> tuple[int, str]:
    """The Rust client's exit code and error line for one command."""
    binary = cli_binary()
    assert binary.exists(), f"no Rust client at {binary}: cargo build -p rowcall-client"
    env = dict(os.environ, ROWCALL_NODES=",".join(cluster.grpc_addrs()), NO_COLOR="1")
    env.pop("ROWCALL_ADMIN_KEY", None)
    if key:
        env["ROWCALL_ADMIN_KEY"] = key
    done = subprocess.run(
        [str(binary), *args], input=stdin, env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stderr.strip()


def python_error(
    cluster: Cluster, call: Callable[[rowcall.Client], object], key: str
) -> rowcall.RowcallError:
    """The error this package raises for the same request."""
    with (
        rowcall.Client(cluster.grpc_addrs(), credential=key) as client,
        pytest.raises(rowcall.RowcallError) as raised,
    ):
        call(client)
    return raised.value


K = f"PY_SAME_{uuid.uuid4().hex[:8].upper()}"
ROW = {"key": K, "type": "static", "auth": "public", "content": "# WHAT: same errors\n\nx"}


@pytest.mark.parametrize(
    ("case", "command", "stdin", "key", "call", "kind", "code"),
    [
        (
            "no such row",
            ["get", "PY_NO_SUCH_ROW"],
            "",
            ADMIN_KEY,
            lambda c: c.get("PY_NO_SUCH_ROW"),
            rowcall.NotFound,
            "not_found",
        ),
        (
            "bad arguments",
            ["invoke", "BASE64_ENCODE", "--args", '{"text": 3}'],
            "",
            ADMIN_KEY,
            lambda c: c.invoke("BASE64_ENCODE", {"text": 3}),
            rowcall.InvalidArgument,
            "invalid_args",
        ),
        (
            "bad row",
            ["put"],
            json.dumps({"key": "lower-case", "type": "static"}),
            ADMIN_KEY,
            lambda c: c.put({"key": "lower-case", "type": "static"}),
            rowcall.InvalidArgument,
            "invalid_row",
        ),
        (
            "no credential",
            ["put"],
            json.dumps(ROW),
            "",
            lambda c: c.put(ROW),
            rowcall.Unauthenticated,
            "unauthorized",
        ),
        (
            "wrong version",
            ["rm", "ECHO", "--if-version", "999999"],
            "",
            ADMIN_KEY,
            lambda c: c.delete("ECHO", if_version=999999),
            rowcall.Conflict,
            "version_conflict",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_the_same_answer_gives_the_rust_clients_error(
    cluster: Cluster,
    case: str,
    command: list[str],
    stdin: str,
    key: str,
    call: Callable[[rowcall.Client], object],
    kind: type[rowcall.Rejected],
    code: str,
) -> None:
    exit_code, said = rust(cluster, *command, stdin=stdin, key=key)
    error = python_error(cluster, call, key=key)
    assert type(error) is kind, f"{case}: {type(error).__name__}, not {kind.__name__}"
    assert error.code == code and error.hint, case
    # The Rust client prints `rowcall: [context: ]<Rejection>`; ours is the same Rejection.
    assert str(error) in said, f"{case}: the Rust client said {said!r}, this package {error}"
    # Its exit code says not found (3) for NOT_FOUND only, and 1 for any other refusal.
    assert exit_code == (3 if kind is rowcall.NotFound else 1), case
