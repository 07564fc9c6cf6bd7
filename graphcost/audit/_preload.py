"""What the process that forks the workers (the audit itself, or a forkserver) loads once, so every
per-model child starts warm.

Importing the worker brings in the analysis stack; graphcost imports some heavy dependencies lazily
(sympy only when a model has symbolic dims), so one tiny analysis with a symbolic dim pulls those in
too. Without this, each child would pay those imports again: ~2 s on a 0.02 s model.
"""

from __future__ import annotations


def warm_up() -> None:
    # lazy: loading the analysis stack (about 0.5 s) is this function's whole point, done once where it is called
    import onnx.parser

    import graphcost.api

    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        warm (float[n, 4] x) => (float[n, 4] y) {
            h = MatMul(x, w)
            y = Relu(h)
        }""")
    model.graph.initializer.append(onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT, [4, 4], [0.0] * 16))
    try:
        graphcost.api.analyze(model)
    except Exception:
        pass  # a cold child is slower, never wrong


import graphcost.audit.worker  # noqa: E402,F401  (the point of this module)

warm_up()
