"""The GPU speed claims the suite used to assert (tests/gpu/), skipped without CUDA:

- CUDA graphs: a replayed MiniLM 3-item batch vs the eager forward, per call (5 x 20 calls each, interleaved).
  Goal: graph < eager (median of the per-round ratios < 1).
- `infertune tune minilm --device cuda --quick`: the winner's items/s vs the fp32 eager reference's, both
  measured by tune in its interleaved rounds. Goal: winner > reference.

The suite keeps the logic: replays equal the eager vectors and are counted; tune's winner is the fastest
candidate that met the budgets, by its own figures."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, Figure, Report

NAME = "gpu"
TEXTS = ["hi", "What is the capital of France?", "ok", "a b c d e f g"]


def _cuda() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi: no NVIDIA GPU here"
    try:
        import torch

        return None if torch.cuda.is_available() else "torch sees no CUDA device"
    except ImportError:
        return "torch is not installed"


def graphs(rep: Report, repeats: int) -> None:
    import torch

    from infertune.engines.graphs import with_graphs
    from infertune.tasks.embedding.artifact import load_model

    model = os.environ.get("INFERTUNE_TEST_MINILM", "minilm")
    eager = load_model(model, "cuda")
    g, _ = with_graphs(load_model(model, "cuda"), "on")
    batch = g.collate(g.token_ids(TEXTS[:3]))
    g.forward(batch)  # capture
    eager.forward(batch)

    def per_call(f) -> float:
        t = time.perf_counter()
        for _ in range(20):
            f(batch)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / 20 * 1000

    e_ms, g_ms = [], []
    for _ in range(max(5, repeats)):
        e_ms.append(per_call(eager.forward))
        g_ms.append(per_call(g.forward))
    ratios = [b / a for a, b in zip(e_ms, g_ms, strict=True)]
    rep.add(Figure(NAME, "MiniLM 3-item batch, eager forward", "ms/call", e_ms, digits=3))
    rep.add(Figure(NAME, "MiniLM 3-item batch, CUDA graph replay", "ms/call", g_ms, digits=3))
    rep.add(
        Figure(
            NAME,
            "graph / eager, same round",
            "x",
            ratios,
            "median < 1.0x",
            statistics.median(ratios) < 1,
            digits=3,
        )
    )


def tune_cuda(rep: Report, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "infertune.cli.main",
            "tune",
            "minilm",
            "--device",
            "cuda",
            "--quick",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    if r.returncode != 0:
        rep.fail(NAME, f"tune --device cuda exited {r.returncode}: {r.stderr[-800:]}")
        return
    res = json.loads(r.stdout)
    ref = next(c for c in res["candidates"] if c["name"] == res["reference"])
    win = res["winner"]
    for who, c in ((f"winner {win['name']}", win), (f"reference {ref['name']}", ref)):
        rep.add(
            Figure(
                NAME,
                f"tune --device cuda --quick {who}: items/s per timed pass",
                "items/s",
                (c.get("measurement") or {}).get("items_per_s_runs") or [],
                digits=0,
            )
        )
    ratio = win["items_per_s"] / ref["items_per_s"]
    rep.add(
        Figure(
            NAME,
            "tune winner / fp32 eager reference (items/s, best passes)",
            "x",
            [ratio],
            "> 1.0x",
            ratio > 1.0,
            digits=2,
        )
    )


def run(rep: Report, repeats: int, out: Path) -> None:
    if (why := _cuda()) is not None:
        rep.skip(NAME, why)
        return
    graphs(rep, repeats)
    tune_cuda(rep, out / "tune-cuda")
