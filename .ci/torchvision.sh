#!/usr/bin/env bash
# CI: the side interpreter .venv-tv for the torchvision real-export tests (tests/real_exports.py runs torchvision
# builds with it). torchvision must stay out of the main venv, where it breaks `import transformers` in the HF
# heavy tests, so .venv-tv sees the main venv's packages through a .pth file and adds only torchvision and pillow.
# Called by .ci/run from the repo root after the main venv exists; the heavy tests then find .venv-tv on their own.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

python3 -m venv .venv-tv
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib .venv/bin/python > "$(purelib .venv-tv/bin/python)/main.pth"
.venv-tv/bin/pip install -q --no-deps torchvision==0.28.0 pillow
.venv-tv/bin/python tests/real_exports.py probe torchvision - - >/dev/null
