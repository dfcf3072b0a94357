"""The CPU engines beyond PyTorch, on the real MiniLM: OpenVINO fp32 / NNCF int8 and ONNX Runtime static
int8 (QDQ, activations calibrated on workload texts). Each must agree with PyTorch eager fp32 and load
back from its saved artifact to the same vectors. Each engine is prepared once (cpu_engines, minilm_engines.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infertune.config import Candidate

pytestmark = pytest.mark.slow


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def setup(cpu_engines):
    """The model, 64 mixed-length eval texts, 32 other texts to calibrate on, and the torch fp32 vectors."""
    e = cpu_engines
    ref = e.prepare(Candidate(backend="torch-eager", precision="fp32")).embed(e.evals, pooled=True)
    return e.spec, e.evals, e.calib, e.work, ref


def _round_trip(emb, cand: Candidate, spec, root: Path, texts: list[str]) -> np.ndarray:
    """Save like `tune` does (files + manifest), load with `artifact.load_embedder`, embed again."""
    from infertune.engines.embedding_artifact import load_embedder
    from infertune.tasks.embedding.artifact import FORMAT, MANIFEST

    files = emb.save(root)
    manifest = {"format": FORMAT, "kind": "embedding", "model": spec.name,
                "embedding": {k: v for k, v in spec.to_dict().items() if k != "path"},
                "candidate": cand.model_dump(mode="json"), "files": files, "device": "cpu"}
    (root / MANIFEST).write_text(json.dumps(manifest))
    return load_embedder(root).embed(texts, pooled=True)


@pytest.fixture(scope="module")
def ov():
    pytest.importorskip("openvino")


def test_openvino_fp32_matches_torch_and_round_trips(setup, cpu_engines, ov, tmp_path):
    import torch

    spec, evals, _, _, ref = setup
    cand = Candidate(backend="openvino", precision="fp32")
    emb = cpu_engines.prepare(cand)
    got = emb.embed(evals, pooled=True)
    assert _cos(ref, got).min() >= 0.9999  # fp32 end to end: lossless up to summation order
    d = emb.describe()
    # on AMX/AVX512_BF16 CPUs OpenVINO would run bf16 unless asked for f32: this is what ran
    assert "float32" in d["inference_precision"] or d["inference_precision"] == "f32"
    assert set(d["matmul_precisions"]) == {"f32"}
    assert d["performance_hint"] == "LATENCY" and d["threads"] == torch.get_num_threads()
    # saved weights stay fp32 (OpenVINO's save_model would compress them to fp16 by default)
    again = _round_trip(emb, cand, spec, tmp_path / "art", evals)
    np.testing.assert_allclose(again, got, rtol=0, atol=1e-5)


def test_openvino_nncf_int8_is_close_and_quantized(setup, cpu_engines, ov, tmp_path):
    pytest.importorskip("nncf")
    spec, evals, _, _, ref = setup
    cand = Candidate(backend="openvino", precision="int8", quant="nncf-ptq")
    emb = cpu_engines.prepare(cand)
    got = emb.embed(evals, pooled=True)
    assert _cos(ref, got).mean() >= 0.98  # a broken calibration (or model_type missing) gives ~0.6
    d = emb.describe()
    assert d["fake_quantize_nodes"] > 0
    assert d["matmul_precisions"].get("u8", 0) + d["matmul_precisions"].get("i8", 0) > 0
    assert d["quantization"]["calibration"]["items"] == len(setup[2])
    again = _round_trip(emb, cand, spec, tmp_path / "art", evals)
    np.testing.assert_allclose(again, got, rtol=0, atol=1e-4)


def test_onnxruntime_static_int8_is_close_and_quantized(setup, cpu_engines, tmp_path):
    pytest.importorskip("onnxruntime")
    spec, evals, _, _, ref = setup
    cand = Candidate(backend="onnxruntime", precision="int8", quant="ort-static")
    emb = cpu_engines.prepare(cand)
    got = emb.embed(evals, pooled=True)
    assert _cos(ref, got).mean() >= 0.98
    q = emb.describe()["quantization"]
    assert q["format"] == "QDQ" and q["quantized_matmuls"] > 0 and q["ops"]["QuantizeLinear"] > 0
    again = _round_trip(emb, cand, spec, tmp_path / "art", evals)
    np.testing.assert_allclose(again, got, rtol=0, atol=1e-5)


def test_openvino_says_why_not(setup, ov):
    from infertune.engines.openvino import OpenVino

    assert OpenVino.available(Candidate(backend="openvino"), "cuda") == "OpenVINO runs on the CPU here"
    assert "nncf-ptq" in OpenVino.available(Candidate(backend="openvino", precision="int8"), "cpu")


CPU_ENGINES = [Candidate(backend="torch-eager", precision="fp32"), Candidate(backend="torch-eager", precision="bf16"),
               Candidate(backend="torch-eager", precision="int8", quant="torch.ao-dynamic"),
               Candidate(backend="onnxruntime", precision="fp32"),
               Candidate(backend="onnxruntime", precision="int8", quant="ort-dynamic"),
               Candidate(backend="onnxruntime", precision="int8", quant="ort-static"),
               Candidate(backend="openvino", precision="fp32"), Candidate(backend="openvino", precision="bf16"),
               Candidate(backend="openvino", precision="int8", quant="nncf-ptq")]


@pytest.mark.parametrize("cand", CPU_ENGINES, ids=lambda c: c.id)
def test_real_engines_answer_alike_alone_and_batched(setup, cpu_engines, cand):
    """tune's batch-invariance check passes every CPU engine that runs here, with the default tolerance."""
    from infertune.catalog import QUANTS
    from infertune.config import AccuracyBudget
    from infertune.registry import load_backend
    from infertune.tasks.embedding import invariance as inv

    if (why := load_backend(cand.backend).available(cand, "cpu")) is not None:
        pytest.skip(why)
    _, evals, _, _, ref = setup
    emb = cpu_engines.prepare(cand)
    lengths = [len(x) for x in emb.tokenizer(evals, truncation=False)["input_ids"]]
    pick = inv.sample(lengths)
    drift = None
    if cand.quant and QUANTS[cand.quant].per_batch_scales:  # held to its own drift from the reference
        drift = 1 - float(_cos(ref, emb.embed(evals, pooled=True)).min())
    got = inv.run(emb, [evals[i] for i in pick], [lengths[i] for i in pick])
    rec, ok, why = inv.judge(got, [lengths[i] for i in pick], inv.tolerance(cand, AccuracyBudget(), drift))
    print(f"\n{cand.id}: worst 1 - cos {rec.worst_deviation:.2e} (a text of {rec.worst_text_tokens} tokens), "
          f"{rec.n_texts} texts in {rec.n_batches} batches, {rec.seconds:.1f} s; tolerance {rec.tolerance:.1e}")
    assert ok, why
    assert rec.n_texts == inv.SAMPLE and rec.worst_deviation >= 0
