"""ONNX Runtime int8 quantization.

dynamic: weights int8 per channel, activation ranges computed on the fly per batch. Per-tensor QInt8
drops MiniLM to cosine 0.96; per-channel keeps 0.99+.
static: weights int8 per channel, activation ranges calibrated once on real texts and stored as
QuantizeLinear/DequantizeLinear pairs (QDQ); no range computation at run time.
Sensitive MatMuls can be left in fp32 with `exclude` (node names) in both."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def available(device: str, method: str = "ort-dynamic") -> str | None:
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
    return {"per_channel": per_channel, "excluded_nodes": exclude, "ops": quantized_ops(dst)}


def weight_matmuls(path: Path) -> dict[str, tuple[int, int]]:
    """MatMul nodes with a constant [in, out] weight (the Linear layers, not attention's Q.K^T and P.V),
    by node name, with the weight's shape."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    shapes = {i.name: tuple(i.dims) for i in m.graph.initializer}
    return {n.name: shapes[n.input[1]] for n in m.graph.node
            if n.op_type == "MatMul" and len(n.input) == 2 and len(shapes.get(n.input[1], ())) == 2}


# Static int8 of MiniLM (all-MiniLM-L6-v2) on this box (Xeon with AMX/VNNI, 2 threads): 64 calibration texts of
# the sample workload in 5 length-sorted batches, 150 other texts scored against torch fp32 (cosine mean / min).
# Each step below is the recipe above it plus one change:
#   ORT's default op types (Gather, Add, attention MatMuls too), MinMax     0.37   / 0.11
#   only the 36 Linear MatMuls                                               0.9406 / 0.910
#     same, Percentile 99.999 / 99.99                                        0.9430 / 0.913,  0.8739 / 0.741
#   + MatMul outputs left float (OpTypesToExcludeOutputQuantization)         0.9913 / 0.985
#   + residual adds read the float tensor, not the DQ (_unquantize_other...) 0.9934 / 0.988
#     same, Percentile 99.999                                                0.9942 / 0.989  (2x calibration time)
#   + FFN down projections (6 of 36) kept fp32: the default                  0.9967 / 0.994
#     same, Percentile 99.999                                                0.9968 / 0.993  (2.7x calibration time)
#   (ORT dynamic int8 per-channel, same texts:                               0.9934 / 0.990)
# MinMax is the default: Percentile gains at most 0.0008 of mean cosine for 2-3x the calibration time, and
# clipping harder (99.99) loses a lot: the down projections' inputs (after GELU) carry a few outlier
# channels that matter. Keeping those 6 layers fp32 is what brings static int8 inside tune's default
# budget (mean 0.995); `ffn_down_int8=True` quantizes them too (faster, dynamic-int8 accuracy).
# Activations are QUInt8: QInt8 (signed) activations gave the same accuracy at 25 items/s against 159 for
# QUInt8 in one run (Linear-only recipe; ORT's x86 int8 GEMM takes u8 activations, signed ones a slow path).
STATIC_CALIBRATION = ("minmax", "percentile")


def ffn_down_projections(weights: dict[str, tuple[int, int]]) -> list[str]:
    """Linear layers that narrow (in > out): the FFN down projections, whose inputs carry outliers."""
    return [name for name, (k, n) in weights.items() if k > n]


def quantize_static(src: Path, dst: Path, emb: Any, texts: Sequence[str], per_channel: bool = True,
                    exclude: Iterable[str] = (), method: str = "minmax", ffn_down_int8: bool = False) -> dict:
    """QDQ int8 of the Linear MatMuls with activation ranges calibrated on `texts` (tokenized and collated by
    `emb`, the model's tokenizer: length-sorted batches padded per batch). `exclude` (node names) stay fp32, and
    so do the FFN down projections unless `ffn_down_int8` (see the table above)."""
    import time

    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType
    from onnxruntime.quantization import quantize_static as ort_quantize_static

    from infertune.errors import InfertuneError
    from infertune.quantize.calibration import calibration_batches, summary

    if method not in STATIC_CALIBRATION:
        raise InfertuneError(f"unknown calibration {method!r}; choose one of {', '.join(STATIC_CALIBRATION)}")
    names = [i.name for i in ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).get_inputs()]
    batches = calibration_batches(emb, texts, names)

    class Reader(CalibrationDataReader):
        """Calibration batches. ORT's histogram calibrators (Percentile) stack every batch's outputs into
        one array and fail on batches of different lengths; with `CalibStridedMinMax=1` ORT asks for them
        one at a time through `set_range` and merges the ranges (or histograms) instead."""

        def __init__(self):
            self.set_range(0, len(batches))

        def __len__(self):
            return len(batches)

        def set_range(self, start_index: int, end_index: int) -> None:
            self.it = iter(batches[start_index:end_index])

        def get_next(self):
            return next(self.it, None)

    weights = weight_matmuls(src)
    exclude = list(exclude) + ([] if ffn_down_int8 else ffn_down_projections(weights))
    nodes = [n for n in weights if n not in set(exclude)]
    calib = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}[method]
    t0 = time.perf_counter()
    # ORT prints its histogram progress to stdout (tune --json keeps stdout for JSON)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        ort_quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            op_types_to_quantize=["MatMul"], nodes_to_quantize=nodes, nodes_to_exclude=exclude,
                            calibrate_method=calib, calibration_providers=["CPUExecutionProvider"],
                            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "CalibStridedMinMax": 1,
                                           # float MatMul outputs: ORT fuses DQ->MatMul into MatMulIntegerToFloat
                                           "OpTypesToExcludeOutputQuantization": ["MatMul"]})
    restored = _unquantize_other_consumers(dst, set(nodes))
    return {"format": "QDQ", "activations": "uint8 (calibrated)", "weights": "int8",
            "float_inputs_restored": restored,
            "calibration_method": method, "per_channel": per_channel, "quantized_matmuls": len(nodes),
            "excluded_nodes": exclude, "calibration": summary(batches),
            "quantize_s": round(time.perf_counter() - t0, 2), "ops": quantized_ops(dst)}


def _unquantize_other_consumers(path: Path, quantized: set[str]) -> int:
    """ORT's QDQ quantizer rewires *every* consumer of a quantized activation to the DequantizeLinear
    output, so the residual adds and shape ops of a transformer read int8-rounded values too. Give the
    consumers that are not quantized MatMuls the original float tensor back. Returns how many inputs moved."""
    import onnx

    m = onnx.load(str(path))
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}
    dq_to_float: dict[str, str] = {}
    for n in g.node:
        q = producer.get(n.input[0]) if n.op_type == "DequantizeLinear" else None
        if q is not None and q.op_type == "QuantizeLinear":  # an activation's Q -> DQ pair
            dq_to_float[n.output[0]] = q.input[0]
    moved = 0
    for n in g.node:
        if n.name in quantized or n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for i, name in enumerate(n.input):
            if name in dq_to_float:
                n.input[i] = dq_to_float[name]
                moved += 1
    if moved:
        onnx.save(m, str(path))
    return moved


def quantized_ops(path: Path) -> dict[str, int]:
    """Counts of the int8 operators in an ONNX file (QDQ pairs, or dynamic MatMulInteger)."""
    import onnx

    kinds = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul")
    counts: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        if n.op_type in kinds:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts
