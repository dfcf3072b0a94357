"""ONNX Runtime dynamic int8 quantization (weights int8 per channel, activations on the fly).

Per-tensor QInt8 drops MiniLM to cosine 0.96; per-channel keeps 0.99+. Sensitive MatMuls can be
left in fp32 with `exclude` (node names)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

FITS = ("onnxruntime",)


def available(device: str) -> str | None:
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is None:
        return "onnxruntime is not installed (pip install 'infertune[onnx]')"
    return None


def matmul_node_for(linear_name: str) -> str:
    """torch.onnx (TorchScript exporter) names a Linear's MatMul '/<dotted path with slashes>/MatMul'."""
    parts: list[str] = []
    for part in linear_name.split("."):
        if part.isdigit() and parts:
            parts[-1] += "." + part  # ModuleList children: 'layer.0'
        else:
            parts.append(part)
    return "/m/" + "/".join(parts) + "/MatMul"


def quantize_dynamic(src: Path, dst: Path, per_channel: bool = True, exclude: Iterable[str] = ()) -> dict:
    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as qd

    exclude = list(exclude)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qd(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel,
           nodes_to_exclude=exclude, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return {"per_channel": per_channel, "excluded_nodes": exclude}
