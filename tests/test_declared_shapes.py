"""Shapes a file declares that inference contradicts (passes/shapes.py): inference wins, and the report says so.

jax2onnx was seen writing a transposed shape into value_info for a Relu output; onnxruntime warns about the merge,
and a user auditing an exporter wants the same signal from graphcost.
"""

from __future__ import annotations

import onnx.parser

from graphcost.load import Model
from graphcost.passes import shapes


def _model(declared: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(f"""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, 8, 16, 16] x) => (float[batch, 8, 16, 16] y)
    <{declared} r> {{
      r = Relu(x)
      y = Sigmoid(r)
    }}
    """)


def test_a_contradicted_declaration_is_named_and_the_inferred_shape_used() -> None:
    result = shapes.infer_shapes(Model(_model("float[batch, 16, 16, 8]"), None, None))
    dims = [d.dim_value or d.dim_param for d in result.types["r"].tensor_type.shape.dim]
    assert dims == ["batch", 8, 16, 16]
    said = [w.message for w in result.warnings if "declares shapes" in w.message]
    assert said == ["the file declares shapes that inference contradicts ('r' declared [batch,16,16,8], inferred "
                    "[batch,8,16,16]); the inferred shapes are used"]


def test_an_agreeing_or_less_specific_declaration_says_nothing() -> None:
    for declared in ("float[batch, 8, 16, 16]", "float[n, 8, ?, 16]"):
        result = shapes.infer_shapes(Model(_model(declared), None, None))
        assert not [w for w in result.warnings if "declares shapes" in w.message]
