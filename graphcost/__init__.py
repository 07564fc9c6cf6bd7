"""graphcost: static cost analysis of ONNX models."""
