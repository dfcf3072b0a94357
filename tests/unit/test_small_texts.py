"""Small wrong texts, each held to what the code does: the vLLM memory fraction sentence, the frontends
per GPU in serve's help, and no claim of a TensorRT backend (README, the ONNX Runtime backend)."""

from __future__ import annotations

import re
from pathlib import Path

import infertune.hardware.sizing as sizing
from infertune.plan.planner import PlanConfig, plan

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = ROOT / "tests" / "unit" / "configs" / "qwen3-0.6b.json"


def _vllm_why(r) -> str:
    return next(e.why for e in r.embedding.engines if e.name == "vllm-pooling")


def test_memory_fraction_sentence_says_instead_of_only_when_it_differs(tmp_path):
    d = tmp_path / "Qwen3-Embedding-0.6B"
    d.mkdir()
    d.joinpath("config.json").write_text(QWEN3.read_text())
    small = plan(PlanConfig(model=str(d), gpu="H100"))
    assert "instead of vLLM's default 0.9" in _vllm_why(small)
    # batch activations that need all of the 0.9: the fraction is the default, and no "instead of" it
    full = plan(PlanConfig(model=str(d), gpu="RTX 4060 Laptop", max_num_batched_tokens=200_000))
    util = re.search(r"--gpu-memory-utilization ([\d.]+)", full.commands["vllm-pooling"]).group(1)
    assert util == "0.9"
    assert "instead of" not in _vllm_why(full) and "--gpu-memory-utilization 0.9:" in _vllm_why(full)


def test_serve_help_gives_the_frontend_cap_the_code_uses(monkeypatch):
    from infertune.cli import serve

    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 256)
    cap = sizing.default_frontends("cuda", 1)
    text = serve.__doc__ or ""
    import inspect

    text += inspect.getsource(serve)
    assert f"at most {cap} per GPU" in text and f"<= {cap} per GPU" in text
    assert "at most 8 per GPU" not in text and "<= 8 per GPU" not in text
    readme = (ROOT / "README.md").read_text()
    assert f"at most {cap} per GPU" in readme and "at most 8 per GPU" not in readme


def test_no_tensorrt_backend_is_claimed():
    readme = (ROOT / "README.md").read_text()
    assert "vLLM/TensorRT when installed" not in readme
    assert "infertune has no TensorRT backend" in readme and "What it does not do" in readme
    ort = (ROOT / "src" / "infertune" / "engines" / "onnxruntime.py").read_text()
    assert "TensorRT providers when installed" not in ort and "TensorRT execution provider is not used" in ort
    assert "TensorrtExecutionProvider" not in ort  # and indeed the code never asks for it
