"""The quick tune of the real MiniLM on a user-style JSONL, shared by the tune CLI tests and the serve
tests (serve's throughput comparison serves the artifact that tune wrote, as a user would)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

CLI = [sys.executable, "-m", "infertune.cli.main"]
# the shared quick tune's --time-budget (75 s on a 2-core AVX2 EPYC reached no engine but torch fp32)
TUNE_BUDGET_S = 150
TUNE_SLO_MS = 10_000  # its --slo-p99-ms: met on any box however busy, so there is always a winner (conftest.py)
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


def run_cli(*args, timeout=900):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=ENV, timeout=timeout)


def write_user_jsonl(path):
    """1,000 mixed-length texts, with over-length items, blank lines and non-ASCII text."""
    from infertune.workloads.texts import load_workload

    rng = random.Random(3)
    base = load_workload(None).items
    lines = []
    for i in range(1000):
        if i % 50 == 0:
            text = " ".join(rng.choice(base) for _ in range(12))  # far past 256 tokens
        elif i % 37 == 0:
            text = rng.choice(["Grüße aus Köln – naïve café", "机器学习模型部署", "Ελληνικά κείμενα εδώ",
                               "😀 emoji + text"])
        else:
            text = rng.choice(base)
        lines.append(json.dumps({"input": text}, ensure_ascii=False))
        if i % 100 == 0:
            lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
