"""Reference PyTorch models and their ONNX exports, used as graphcost's ground truth."""
