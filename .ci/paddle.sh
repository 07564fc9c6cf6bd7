#!/usr/bin/env bash
# CI: the side interpreter .venv-paddle for the paddle2onnx real-export tests (tests/test_paddle_exports.py builds
# PP-OCR's detector, recognizer and direction classifier with it, tests/paddle_exports.py). paddlepaddle pins its own
# protobuf/numpy, so it stays out of the main venv; the venv does not see the main venv's packages (the exports need
# only paddle and paddle2onnx, which brings its own onnx). Called by .ci/run from the repo root; the heavy tests then
# find .venv-paddle on their own.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

python3 -m venv .venv-paddle
# paddle2onnx 2.1.0 imports `packaging` without declaring it
.venv-paddle/bin/pip install -q paddlepaddle==3.3.1 paddle2onnx==2.1.0 packaging
.venv-paddle/bin/python tests/paddle_exports.py probe >/dev/null
