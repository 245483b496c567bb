#!/usr/bin/env bash
# CI for the Python client: builds the package (stubs generated from proto/ by grpcio-tools)
# into a fresh virtual environment, then mypy --strict and ruff on its own code, then the
# pytest suite against real nodes of the already-built debug rowcall-node
# (ROWCALL_NODE_BIN, else ${CARGO_TARGET_DIR:-target}/debug/rowcall-node), with the Rust
# client's command line beside it (ROWCALL_CLI_BIN, else rowcall next to the node) for the
# same-errors checks. Bounded in time; about 40 s on 2 cores once pip's cache is warm.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
export ROWCALL_NODE_BIN="${ROWCALL_NODE_BIN:-${CARGO_TARGET_DIR:-target}/debug/rowcall-node}"
case "$ROWCALL_NODE_BIN" in /*) ;; *) ROWCALL_NODE_BIN="$repo/$ROWCALL_NODE_BIN" ;; esac
if [ ! -x "$ROWCALL_NODE_BIN" ]; then
  echo "python client: no node binary at $ROWCALL_NODE_BIN (cargo build -p rowcall-node)" >&2
  exit 1
fi
export ROWCALL_CLI_BIN="${ROWCALL_CLI_BIN:-$(dirname "$ROWCALL_NODE_BIN")/rowcall}"
if [ ! -x "$ROWCALL_CLI_BIN" ]; then
  echo "python client: no Rust client binary at $ROWCALL_CLI_BIN (cargo build -p rowcall-client)" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "== python client: fresh venv, pip install ./client/python and the test tools"
python3 -m venv "$work/venv"
pip=("$work/venv/bin/pip" --quiet --disable-pip-version-check)
timeout 300 "${pip[@]}" install "./client/python[test]"
echo "== python client: mypy --strict (the installed package)"
# From outside the source tree, so mypy checks what pip installed (with its generated stubs).
(cd "$work" && timeout 300 "$work/venv/bin/mypy" --strict --config-file "$here/pyproject.toml" -p rowcall)
echo "== python client: mypy --strict (its tests, benchmark and example, against the installed package)"
(cd "$work" && MYPYPATH="$here/tests" timeout 300 "$work/venv/bin/mypy" --strict \
  --config-file "$here/pyproject.toml" "$here/tests" "$here/bench" "$here/examples")
echo "== python client: ruff"
(cd "$here" && "$work/venv/bin/ruff" check rowcall tests bench examples && "$work/venv/bin/ruff" format --check rowcall tests bench examples)
echo "== python client: pytest against real nodes"
(cd "$here" && timeout 600 "$work/venv/bin/pytest" -q -p no:cacheprovider tests)
