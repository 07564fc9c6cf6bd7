#!/usr/bin/env bash
# Create bench/.venv-peers with the peer tools (onnx-tool, onnxslim, onnxsim + its optional onnx-shape-inference,
# as in shared/research/peers.md) in a venv of their own,
# so they never touch the project venv. pip only (never uv); torch is NOT installed there.
# Usage: bash bench/peers_env.sh            (idempotent; re-run to reinstall)
#        PEERS_PIP_ARGS="onnx-tool==1.0.1 onnxslim==0.1.98 onnxsim==0.8.1" bash bench/peers_env.sh   (pin)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv-peers"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# shellcheck disable=SC2086
"$venv/bin/python" -m pip install --quiet ${PEERS_PIP_ARGS:-onnx-tool onnxslim onnxsim onnx-shape-inference}
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "error: torch got installed into $venv (a peer dependency pulled it in)" >&2
  exit 1
fi
# Record the versions next to the results.
mkdir -p "$here/out"
"$venv/bin/python" - <<'PY' | tee "$here/out/peer_versions.json"
import json, sys
from importlib.metadata import version, PackageNotFoundError
out = {"python": sys.version.split()[0]}
for pkg in ("onnx-tool", "onnxslim", "onnxsim", "onnx", "onnxruntime", "numpy", "protobuf", "sympy",
            "onnx-shape-inference", "onnx-ir"):
    try:
        out[pkg] = version(pkg)
    except PackageNotFoundError:
        out[pkg] = None
print(json.dumps(out, indent=1))
PY
