"""Exporters: ONNX / OpenVINO IR checked against the original (`infertune export`), and TensorRT steps."""
