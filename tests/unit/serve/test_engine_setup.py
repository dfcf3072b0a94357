"""Serve's start-up timing (serve/engine_setup.time_batches): the first cost line comes from warm batches, and a
batch that would run long on a slow engine is not run before /ready."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from infertune.engines.base import Embedder
from infertune.serve.engine_setup import time_batches


class _Tok:
    pad_token_id = 0


class SlowPerToken(Embedder):
    """Sleeps `s_per_token` per padded token; records the padded tokens of every batch it ran."""

    def __init__(self, s_per_token: float):
        super().__init__(SimpleNamespace(dim=2, max_length=512, normalize=False), _Tok(), "cpu")
        self.needs_token_types = False
        self.s_per_token = s_per_token
        self.ran: list[int] = []

    def forward(self, batch):
        ids = batch["input_ids"]
        self.ran.append(int(ids.size))
        time.sleep(ids.size * self.s_per_token)
        return np.ones((ids.shape[0], 2), dtype=np.float32)


def test_a_batch_past_max_s_at_the_measured_cost_is_left_out():
    rows = [[1] * 100] * 20  # sizes 1, 5 and 20 rows of 100 tokens: 10, 50 and 200 ms at 0.1 ms a token
    emb = SlowPerToken(1e-4)
    seed = time_batches(emb, rows, budget=2000, max_s=0.05)
    assert max(emb.ran) == 500 and 2000 not in emb.ran  # a busier host measures a higher cost: it is left out still
    assert len(seed) >= 4 and len({n for n, _ in seed}) == 2  # enough points for the cost line, at two sizes


def test_every_size_is_timed_where_it_fits_max_s():
    rows = [[1] * 100] * 20
    emb = SlowPerToken(0.0)
    seed = time_batches(emb, rows, budget=2000, max_s=60.0)
    assert sorted({n for n, _ in seed}) == [100.0, 500.0, 2000.0] and len(seed) == 6
