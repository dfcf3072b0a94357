"""CUDA graphs on a real GPU: each bucketed shape is captured once, checked against the eager forward, and
replayed; the replayed vectors equal the eager ones, and replays are faster than eager calls for a small batch."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

TEXTS = ["hi", "What is the capital of France?", "ok", "a b c d e f g", "x",
         "The quarterly report shows revenue growth of four percent, driven mostly by cloud services in Europe.",
         "Transformers use attention to mix information across positions in a sequence."]


@pytest.mark.gpu
def test_graphs_replay_the_eager_vectors_faster():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from infertune.artifact import load_model
    from infertune.backends.cuda_graphs import with_graphs

    model = os.environ.get("INFERTUNE_TEST_MINILM", "minilm")  # the GPU image has no embedded-model package
    eager = load_model(model, "cuda")
    g, why = with_graphs(load_model(model, "cuda"), "on")
    ids = g.token_ids(TEXTS)
    for n in (1, 3, 7):
        batch = g.collate(ids[:n])
        want = eager.forward(batch)
        first = g.forward(batch)  # first sight: eager answer, capture, check
        again = g.forward(batch)  # replay
        for got in (first, again):
            cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
            assert cos.min() >= 0.9999
    assert g.on and g.stats["captured"] == 3 and g.stats["replays"] == 3, g.stats  # shapes (1,16) (3,16) (8,24)
    batch = g.collate(ids[:3])

    def per_call(f) -> float:
        best = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(20):
                f(batch)
            torch.cuda.synchronize()
            best.append((time.perf_counter() - t) / 20)
        return float(np.median(best)) * 1000

    e_ms, g_ms = per_call(eager.forward), per_call(g.forward)
    print(f"MiniLM 3-item batch: eager {e_ms:.2f} ms, graph {g_ms:.2f} ms per call (median of 5 x 20)", file=sys.stderr)
    assert g_ms < e_ms
