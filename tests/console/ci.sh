#!/usr/bin/env bash
# Browser tests of the operator console (/console): headless Chromium from Debian's
# packages (installed when missing), driven over WebDriver by Python selenium in a fresh
# venv, against a 3-node cluster of the debug rowcall-node in BIN_DIR. Screenshots of each
# page go to $CONSOLE_OUT (default: a folder under the temporary directory, printed).
#   bash tests/console/ci.sh [BIN_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-target/debug}"
case "$bin" in /*) ;; *) bin="$(pwd)/$bin" ;; esac
[ -x "$bin/rowcall-node" ] || { echo "console: no rowcall-node in $bin" >&2; exit 1; }
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "== console: apt-get install chromium chromium-driver"
  timeout 300 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends chromium chromium-driver
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export CONSOLE_OUT="${CONSOLE_OUT:-$(mktemp -d -t rowcall-console.XXXXXX)}"
echo "== console: fresh venv, pip install selenium"
python3 -m venv "$work/venv"
timeout 300 "$work/venv/bin/pip" --quiet --disable-pip-version-check install "selenium>=4.20,<5"
echo "== console: browser tests (screenshots in $CONSOLE_OUT)"
ROWCALL_NODE_BIN="$bin/rowcall-node" CONSOLE_WORK="$work" timeout 300 "$work/venv/bin/python" "$here/test_console.py"
