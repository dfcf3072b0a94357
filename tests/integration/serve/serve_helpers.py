"""Shared helpers for the serve integration tests: real servers as subprocesses on free loopback ports."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("bench_serve_vs_naive", ROOT / "scripts" / "bench_serve_vs_naive.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # type: ignore[union-attr]

FAULT_MARKER = "@@inject-forward-fault@@"
NAN_MARKER = "@@inject-nan@@"  # one word: one token of the fake backend too (none of the one-letter words')


def fault_env(forward_fault: bool = True) -> dict[str, str]:
    """The environment in which a served batch holding FAULT_MARKER fails (unless forward_fault is False: the fake
    backend's one-word tokens collide with its warm-up texts) and every input holding NAN_MARKER comes out of the
    engine as NaN (fault_plugin/sitecustomize.py)."""
    import os

    plugin = str(Path(__file__).resolve().parent / "fault_plugin")
    path = os.pathsep.join(p for p in (plugin, os.environ.get("PYTHONPATH", "")) if p)
    env = {"INFERTUNE_TEST_NAN_MARKER": NAN_MARKER, "PYTHONPATH": path}
    return {**env, "INFERTUNE_TEST_FAULT_MARKER": FAULT_MARKER} if forward_fault else env


def write_fake_artifact(root: Path, us_per_token: int, max_length: int = 512, dim: int = 8) -> Path:
    """A tiny artifact on the `fake` backend: no torch, loads at once, forward sleeps us_per_token per padded
    token (GIL released), so shutdown and overload tests are deterministic on a busy 2-core box. Its
    tokenizer makes one token per whitespace-separated word (use one-character words)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model").mkdir(exist_ok=True)
    manifest = {
        "format": "infertune-artifact/1", "infertune": "0.1.0", "kind": "embedding", "model": "fake",
        "embedding": {"name": "fake", "pooling": "mean", "normalize": True, "max_length": max_length, "dim": dim,
                      "source_format": "hf"},
        "candidate": {"backend": "fake", "options": [["us_per_token", str(us_per_token)]]},
        "files": {"weights": "model"}, "device": "cpu",
        "tune": {"batch_token_budget": 2048, "batch_max_items": 64, "latency_ms": {"p50": 30.0, "p95": 40.0,
                 "p99": 50.0}, "threads": None},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def metric(url: str, name: str, **labels: str) -> float:
    """Sum of samples called `name` (with these labels) in /metrics, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def embed(url: str, inputs, model: str = "minilm", **extra) -> httpx.Response:
    return httpx.post(url + "/v1/embeddings", json={"model": model, "input": inputs, **extra}, timeout=120)


def cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of a with the same row of b."""
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
