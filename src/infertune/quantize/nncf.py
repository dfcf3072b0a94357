"""NNCF post-training int8 quantization of an OpenVINO model, calibrated on real texts.

`model_type=TRANSFORMER` matters: it keeps the attention softmax, residual adds and LayerNorms out of int8
(SmoothQuant on the MatMul inputs instead). Without it MiniLM fell to cosine 0.61 on an AVX2-only CPU."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


def available(device: str, method: str = "nncf-ptq") -> str | None:
    import importlib.util

    if importlib.util.find_spec("nncf") is None:
        return "nncf is not installed (pip install 'infertune[openvino]')"
    if device != "cpu":
        return "NNCF int8 for OpenVINO runs on the CPU here"
    return None


def quantize(model: Any, emb: Any, texts: Sequence[str],
             keep_high: Sequence[str] = ()) -> tuple[Any, dict[str, Any]]:
    """NNCF post-training int8 quantization of an OpenVINO model on real calibration batches (tokenized and
    collated by `emb`, the model's tokenizer)."""
    import logging

    import nncf

    from infertune.quantize.calibration import calibration_batches, summary
    from infertune.quantize.ort import matmul_node_for

    batches = calibration_batches(emb, texts, [p.any_name for p in model.inputs])
    ignored = None
    if keep_high:  # the IR keeps the ONNX node names, so the torch Linear name maps the same way
        ignored = nncf.IgnoredScope(names=[matmul_node_for(n) for n in keep_high], validate=False)
    t0 = time.perf_counter()
    nncf_log = logging.getLogger("nncf")
    level = nncf_log.level
    nncf_log.setLevel(logging.ERROR)  # its progress bars and INFO lines would flood tune's output
    try:
        q = nncf.quantize(model, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER,
                          subset_size=len(batches), ignored_scope=ignored)
    finally:
        nncf_log.setLevel(level)
    fq = sum(1 for op in q.get_ops() if op.get_type_name() == "FakeQuantize")
    return q, {"method": "nncf-ptq", "nncf": nncf.__version__, "model_type": "transformer",
               "calibration": summary(batches), "fake_quantize_nodes": fq, "keep_high": list(keep_high),
               "quantize_s": round(time.perf_counter() - t0, 2)}
