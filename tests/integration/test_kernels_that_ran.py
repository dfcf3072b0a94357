"""The kernels that ran, on the real MiniLM (36 Linear layers in its encoder, plus the pooler's): each CPU engine's one
profiled batch counts its weight GEMMs by data type, and an engine labelled int8 that ran fp32 GEMMs is rejected."""

from __future__ import annotations

from collections import Counter

import pytest

from infertune.config import Candidate
from infertune.tasks.embedding.kernels import record, verdict

pytestmark = pytest.mark.slow

LAYERS = 36  # 6 blocks x (q, k, v, attention output, FFN up, FFN down)


@pytest.fixture(scope="module")
def setup(cpu_engines):
    """The engines (prepared once for the session, minilm_engines.py: their 32 calibration texts, one work folder
    for the ONNX engines) and 16 texts to profile on."""
    return cpu_engines, cpu_engines.items[:16]


def _prepare(setup, cand: Candidate):
    return setup[0].prepare(cand)


def _check(mix: dict, source: str) -> None:
    assert set(mix) >= {"gemms", "total", "attention", "weight_bytes", "source", "examples"}
    assert mix["source"] == source and mix["total"] == sum(mix["gemms"].values()) and 0 < len(mix["examples"]) <= 5
    print(f"\n{source}: GEMMs {mix['gemms']}, attention {mix['attention']}, "
          f"weights {mix['weight_bytes'] / 2**20:.1f} MiB, {mix['examples']}")


def test_torch_int8_label_with_a_quantization_that_never_applied_is_rejected(setup, monkeypatch):
    cand = Candidate(backend="torch-eager", precision="int8", quant="torch.ao-dynamic")
    real = record(_prepare(setup, cand), setup[1])
    _check(real, "torch.profiler")
    assert real["gemms"] == {"int8": LAYERS, "fp32": 1}  # torch.ao quantizes the encoder; the pooler stays fp32
    assert verdict(cand, real) == ""
    import infertune.quantize.torch_ao as torch_ao

    monkeypatch.setattr(torch_ao, "quantize_dynamic_int8", lambda model, *a, **k: model)  # loads, never applies
    emb = setup[0].prepare_anew(cand)  # a patched preparation: not the session's
    lying = record(emb, setup[1])
    assert lying["gemms"] == {"fp32": LAYERS + 1}
    assert verdict(cand, lying).startswith(f"int8 requested, 0 of {LAYERS + 1} GEMMs ran int8: {LAYERS + 1} fp32")
    # in memory: the encoder's Linear weights at 1 byte instead of 4, everything else as it was (scales: < 1%)
    import torch

    linear = sum(m.weight.numel() for n, m in emb.model.named_modules()
                 if isinstance(m, torch.nn.Linear) and n.startswith("encoder"))
    assert abs(real["weight_bytes"] - (lying["weight_bytes"] - 3 * linear)) < 0.01 * lying["weight_bytes"]


def test_onnxruntime_dynamic_int8_runs_int8_gemms(setup):
    pytest.importorskip("onnxruntime")
    fp32 = record(_prepare(setup, Candidate(backend="onnxruntime", precision="fp32")), setup[1])
    _check(fp32, "onnxruntime profile")
    assert fp32["gemms"] == {"fp32": LAYERS}  # the pooler is not in the export
    cand = Candidate(backend="onnxruntime", precision="int8", quant="ort-dynamic")
    mix = record(_prepare(setup, cand), setup[1])
    _check(mix, "onnxruntime profile")
    assert mix["gemms"] == {"int8": LAYERS} and verdict(cand, mix) == ""
    assert sum(mix["attention"].values()) == 12  # QK^T and AV per block stay float
    assert mix["weight_bytes"] < 0.6 * fp32["weight_bytes"]


def test_openvino_nncf_int8_reports_what_its_runtime_model_runs(setup):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from infertune.engines.kernels import kind_of

    cand = Candidate(backend="openvino", precision="int8", quant="nncf-ptq")
    emb = _prepare(setup, cand)
    mix = record(emb, setup[1])
    _check(mix, "openvino runtime model")
    runtime = Counter(kind_of(op.get_rt_info()["runtimePrecision"].astype(str))
                      for op in emb.compiled.get_runtime_model().get_ordered_ops()
                      if op.get_rt_info()["layerType"].astype(str) == "FullyConnected")
    assert mix["gemms"] == dict(runtime) and mix["total"] == LAYERS
    assert verdict(cand, mix) == ("" if runtime["int8"] >= LAYERS / 2 else verdict(cand, mix))
