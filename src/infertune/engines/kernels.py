"""The kernels that ran: one profiled batch per engine, its weight GEMMs counted by the data type they computed in
(fp32, bf16, fp16, int8, fp8), and the weight bytes in memory. A candidate named "int8" whose Linear layers ran
fp32 GEMMs is caught here (tasks/embedding/kernels.py judges it).

"gemms" counts the GEMMs against weights (Linear / FullyConnected / MatMul with a constant operand); the attention
GEMMs (activation x activation: bmm, 4-D MatMul) stay in the precision of the activations on every engine, so they
are counted apart under "attention" and never judged."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES = 5

# a data type's name as torch, ONNX Runtime or OpenVINO spell it -> the kind of GEMM
_KINDS = {"float": "fp32", "f32": "fp32", "float32": "fp32", "c10::bfloat16": "bf16", "bfloat16": "bf16",
          "bf16": "bf16", "c10::half": "fp16", "half": "fp16", "float16": "fp16", "f16": "fp16",
          "signed char": "int8", "unsigned char": "int8", "int8": "int8", "uint8": "int8", "i8": "int8",
          "u8": "int8", "c10::qint8": "int8", "c10::quint8": "int8"}

# torch ops that are one weight GEMM each, and the kind their name fixes (None: read from the input's dtype).
# aten::linear / aten::matmul are not counted: they dispatch to one of these
_TORCH_GEMMS = {"aten::addmm": None, "aten::mm": None, "aten::_int_mm": "int8", "aten::_scaled_mm": "fp8",
                "aten::_weight_int8pack_mm": "int8",
                "aten::_weight_int4pack_mm": "int4", "quantized::linear_dynamic": "int8",
                "quantized::linear": "int8", "quantized::linear_dynamic_fp16": "fp16",
                "mkldnn::_linear_pointwise": None, "onednn::qlinear_pointwise": "int8",
                "fbgemm::f8f8bf16_rowwise": "fp8"}
_TORCH_ATTENTION = {"aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                    "aten::_scaled_dot_product_cudnn_attention"}
_ORT_INT8 = {"MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearMatMul", "QGemm",
             "QAttention", "DynamicQuantizeLSTM"}
_ORT_GEMMS = {"MatMul", "FusedMatMul", "Gemm", "Attention"}


def kind_of(dtype: str) -> str:
    """fp32 | bf16 | fp16 | int8 | fp8 for a dtype name (e.g. 'float', 'c10::BFloat16', 'u8', 'f8e4m3')."""
    d = str(dtype).lower().replace("torch.", "")
    if "float8" in d or d.startswith("f8") or "e4m3" in d or "e5m2" in d:
        return "fp8"
    return _KINDS.get(d, d or "unknown")


def mix(gemms: Counter, attention: Counter, weight_bytes: int, source: str, examples: list[str]) -> dict[str, Any]:
    """The plain record every engine returns (results.json: executed.kernels)."""
    return {"gemms": dict(gemms), "total": int(sum(gemms.values())), "attention": dict(attention),
            "weight_bytes": int(weight_bytes), "source": source, "examples": examples[:EXAMPLES]}


# --- torch -------------------------------------------------------------------------------------------------------
def torch_mix(forward: Any, batch: dict[str, np.ndarray], model: Any) -> dict[str, Any]:
    """torch.profiler over one `forward(batch)`; the CUDA kernels' names are the examples where a GPU ran them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    forward(batch)  # unprofiled first: a compiled engine compiles a new shape here (its tracing is not a GEMM run)
    from infertune.logs import native_stderr_to_log

    with native_stderr_to_log(), profile(activities=acts, record_shapes=True) as prof:
        forward(batch)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    gemms: Counter[str] = Counter()
    attention: Counter[str] = Counter()
    names: list[str] = []
    device_names: list[str] = []
    for ev in prof.profiler.kineto_results.events():
        name = ev.name()
        dtypes = [str(d) for d in ev.dtypes()]
        if name in _TORCH_GEMMS:
            gemms[_TORCH_GEMMS[name] or kind_of(dtypes[0] if dtypes else "")] += 1
            if name not in names:
                names.append(name)
        elif name in _TORCH_ATTENTION:
            attention[kind_of(dtypes[0] if dtypes else "")] += 1
        elif (ev.device_type() == torch.autograd.DeviceType.CUDA and ("gemm" in name.lower() or "mm" in name)
              and name not in device_names):
            device_names.append(name)
    return mix(gemms, attention, torch_weight_bytes(model), "torch.profiler", (device_names or names))


def _tensor_bytes(t: Any) -> int:
    """A tensor's storage bytes; a tensor subclass (torchao's quantized weights) counts its packed inner tensors."""
    import torch

    if hasattr(t, "__tensor_flatten__") and type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        inner, _ = t.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in inner)
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()  # a quantized tensor (torch.ao's qint8) is 1 byte an element
    return 0


def torch_weight_bytes(model: Any) -> int:
    """Parameters and buffers in memory, packed quantized weights (torch.ao's LinearPackedParams) included."""
    import torch

    def walk(v: Any) -> int:
        if isinstance(v, torch.Tensor):
            return _tensor_bytes(v)
        if isinstance(v, (tuple, list)):
            return sum(walk(x) for x in v)
        return 0

    sd = model.state_dict() if hasattr(model, "state_dict") else {}
    return sum(walk(v) for v in sd.values())


# --- ONNX Runtime ------------------------------------------------------------------------------------------------
def ort_mix(onnx_path: Path, providers: list[str], feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """One batch through a profiling session of the same model (ORT's JSON trace names each node's op type,
    provider and input types); weight bytes: the initializers'."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(onnx_path).parent / "kernels_profile")
    sess = ort.InferenceSession(str(onnx_path), opts, providers=providers)
    sess.run(None, feeds)
    trace = Path(sess.end_profiling())
    try:
        events = json.loads(trace.read_text())
    finally:
        trace.unlink(missing_ok=True)
    gemms, attention, examples = ort_counts(events)
    return mix(gemms, attention, onnx_weight_bytes(onnx_path), "onnxruntime profile", examples)


def ort_counts(events: list[dict[str, Any]]) -> tuple[Counter, Counter, list[str]]:
    """Weight and attention GEMMs of an ORT profile: an int8 op is int8 by its type; a float MatMul is attention
    when both operands are activations of rank 4 (a weight's initializer is prepacked and not listed, or 2-D)."""
    gemms: Counter[str] = Counter()
    attention: Counter[str] = Counter()
    examples: list[str] = []
    for ev in events:
        if ev.get("cat") != "Node" or not str(ev.get("name", "")).endswith("_kernel_time"):
            continue
        args = ev.get("args", {})
        op = args.get("op_name", "")
        if op not in _ORT_INT8 and op not in _ORT_GEMMS:
            continue
        inputs = [next(iter(x.items())) for x in args.get("input_type_shape", []) if x]
        label = f"{op} ({args.get('provider', '?')})"
        if op not in _ORT_INT8 and len(inputs) >= 2 and all(len(s) >= 4 for _, s in inputs[:2]):
            attention[kind_of(inputs[0][0])] += 1
            continue
        gemms["int8" if op in _ORT_INT8 else kind_of(inputs[0][0] if inputs else "float")] += 1
        if label not in examples:
            examples.append(label)
    return gemms, attention, examples


def onnx_weight_bytes(onnx_path: Path) -> int:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


# --- OpenVINO ----------------------------------------------------------------------------------------------------
def openvino_mix(compiled: Any, model: Any) -> dict[str, Any]:
    """The CPU plugin's runtime model after an inference: each FullyConnected (a weight GEMM) with the precision it
    runs in and its primitive (e.g. jit_gemm_I8, brgemm_avx512_amx); MatMul between activations is attention.
    Weight bytes: the IR's constants."""
    gemms: Counter[str] = Counter()
    attention: Counter[str] = Counter()
    examples: list[str] = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        layer = rt["layerType"].astype(str)
        if layer not in ("FullyConnected", "MatMul"):
            continue
        prec = kind_of(rt["runtimePrecision"].astype(str))
        if layer == "MatMul":
            attention[prec] += 1
            continue
        gemms[prec] += 1
        label = f"{layer} {rt['primitiveType'].astype(str)}"
        if label not in examples:
            examples.append(label)
    weights = sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")
    return mix(gemms, attention, weights, "openvino runtime model", examples)
