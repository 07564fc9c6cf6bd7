"""Child process for ``tests/test_conventions_peers.py``: run the ONNX-level peer counters on one file and print
one JSON line ``{"onnx-tool": macs, "onnxsim": macs}``. It runs in the peers' own venv (``bench/peers_env.sh``
makes ``bench/.venv-peers`` with onnx-tool 1.0.1 and onnxsim 0.8.1, no torch), never in the project venv.

    bench/.venv-peers/bin/python tests/onnx_peer_counts.py MODEL.onnx
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def counts(path: str) -> dict[str, int]:
    import onnx
    import onnx_tool
    from onnxsim import model_info

    with contextlib.redirect_stdout(io.StringIO()):
        g = onnx_tool.Model(path, {"verbose": False}).graph
        g.graph_reorder_nodes()
        g.shape_infer(None)
        g.profile(exclude_ops=onnx_tool.NoMacsOps)  # as onnx_tool.model_profile (its CLI) does
        info = model_info.ModelInfo(onnx.load(path))
    return {"onnx-tool": int(g.macs[0]), "onnxsim": int(info.macs)}


if __name__ == "__main__":
    print(json.dumps(counts(sys.argv[1])))
