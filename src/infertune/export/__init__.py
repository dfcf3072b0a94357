"""Exporters: ONNX (with output verification) and TensorRT engine plans."""
