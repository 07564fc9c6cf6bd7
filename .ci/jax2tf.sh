#!/usr/bin/env bash
# CI job for the jax2tf -> tf2onnx export route (extra [jax2tf]) in a venv of its own: the route needs jax<=0.7.1,
# which cannot share a venv with the main [jax] extra (jax2onnx). Pinned by constraints/jax2tf.txt.
# Called by .ci/run from the repo root; about 2 min on 2 cores (install ~70-140 s, tests ~35 s), venv ~2.5 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=2 PIP_DISABLE_PIP_VERSION_CHECK=1

python3 -m venv .venv-jax2tf
.venv-jax2tf/bin/pip install -q -c constraints/jax2tf.txt -e '.[jax2tf,test]'
.venv-jax2tf/bin/pip check

echo "== jax2tf -> tf2onnx route (jax 0.7.1, own venv)"
.venv-jax2tf/bin/python -m pytest -q -m heavy tests/test_export_jax2tf.py
