"""Helpers for the validate tests: fake-backend artifacts (fixed cost per token, no torch, optional leak)
and a runner for the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def write_fake_artifact(root: Path, us_per_token: int = 100, leak_mb_per_batch: float = 0.0,
                        max_length: int = 512) -> Path:
    """The fake backend: one token per word, forward sleeps us_per_token per padded token (GIL released)."""
    (root / "model").mkdir(parents=True, exist_ok=True)
    opts = [["us_per_token", str(us_per_token)]]
    if leak_mb_per_batch:
        opts.append(["leak_mb_per_batch", str(leak_mb_per_batch)])
    manifest = {
        "format": "infertune-artifact/1", "infertune": "0.1.0", "kind": "embedding", "model": "fake",
        "embedding": {"name": "fake", "pooling": "mean", "normalize": True, "max_length": max_length, "dim": 8,
                      "source_format": "hf"},
        "candidate": {"backend": "fake", "options": opts}, "files": {"weights": "model"}, "device": "cpu",
        "tune": {"batch_token_budget": 2048, "batch_max_items": 64, "latency_ms": {"p50": 30.0}, "threads": None},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def short_workload(path: Path, n: int = 40) -> Path:
    """n six-word texts: far under any input limit, so validate has nothing to screen before its drills (the
    default workload's long texts are sent once each first, seconds on a busy box)."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "the", "cat", "sleeps"]
    path.write_text("".join(json.dumps({"input": " ".join(words[i % 5:i % 5 + 6])}) + "\n" for i in range(n)))
    return path


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "infertune.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
