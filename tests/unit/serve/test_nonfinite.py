"""A row with NaN or Inf is never answered: the batch core's row check (one sum over the batch output, then per
row), the request that holds it gets a NonFinite naming its input index and the likely cause, its batch-mates
get their rows, the rows are counted, and http maps the error to a 500."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from infertune.engines.base import Embedder
from infertune.serve.batch_core import BatchCore, Chunk, nonfinite_rows
from infertune.serve.errors import NonFinite, from_wire
from infertune.serve.http import api_error
from infertune.serve.transport import pack_requests, unpack_answer

NAN_ID, INF_ID = 666, 777


def test_finite_rows_pass_and_bad_rows_are_found_with_their_kind():
    rows = np.ones((5, 4), dtype=np.float32)
    assert nonfinite_rows(rows) is None
    rows[2, 1] = np.nan
    rows[4, 3] = np.inf
    rows[3, 0] = -np.inf
    rows[3, 1] = np.nan  # NaN and Inf in one row: NaN
    assert nonfinite_rows(rows).tolist() == [0, 0, 1, 1, 2]


def test_huge_finite_rows_whose_sum_overflows_are_finite():
    rows = np.full((4, 8), 3e38, dtype=np.float32)
    with np.errstate(over="ignore"):
        assert not np.isfinite(rows.sum())  # the cheap check trips, the per-row one clears it
    assert nonfinite_rows(rows) is None


class _Tok:
    pad_token_id = 0


class _NanEngine(Embedder):
    """Row r's vector is [sum of its ids, 1, 1, 1], NaN when it holds NAN_ID, +Inf when it holds INF_ID."""

    def __init__(self):
        super().__init__(SimpleNamespace(dim=4, max_length=512, normalize=True), _Tok(), "cpu")
        self.needs_token_types = False
        self.batches = 0

    def forward(self, batch):
        self.batches += 1
        ids = batch["input_ids"] * batch["attention_mask"]
        out = np.ones((len(ids), 4), dtype=np.float32)
        out[:, 0] = ids.sum(1)
        out[(ids == NAN_ID).any(1), 1] = np.nan
        out[(ids == INF_ID).any(1), 2] = np.inf
        return out


class _Count:
    def __init__(self):
        self.n = 0

    def inc(self, k=1):
        self.n += k

    def labels(self, *a):
        return self

    def observe(self, *a):
        pass


class _Metrics:
    def __init__(self):
        self.nonfinite_rows, self.batch_failures, self.stage_seconds = _Count(), _Count(), _Count()

    def observe_batch(self, *a):
        pass


def _window(reqs):
    emb, m, sent = _NanEngine(), _Metrics(), []
    settings = SimpleNamespace(batch_tokens=1 << 16, max_batch_tokens=1 << 16, max_batch_items=1024, max_wait_ms=1.0,
                               max_padding=None)
    core = BatchCore(emb, settings, m, inbox=None, send=lambda fe, frames: sent.append(frames))
    core.run_window([Chunk(pack_requests(0, reqs))])
    got = {rid: (rows, err) for frames in sent for rid, rows, err in unpack_answer(frames, 4)[1]}
    return emb, m, got


def test_the_request_with_a_bad_row_fails_naming_its_index_and_its_batch_mates_are_answered():
    emb, m, got = _window([(0, [[5, 6], [7], [8, NAN_ID, 9], [10]]), (1, [[11, 12]]), (2, [[INF_ID], [3], [NAN_ID]])])
    assert emb.batches == 1  # one batch: the good request really was a batch-mate of the bad ones
    rows, err = got[0]
    assert rows is None
    e = from_wire(err)
    assert isinstance(e, NonFinite)
    assert e.message.startswith("non-finite values in the embedding of input 2 (NaN); a fp16 overflow is the "
                                "usual cause: try bf16"), e.message
    rows, err = got[1]
    assert err is None and np.isfinite(rows).all()
    np.testing.assert_allclose(rows, [[23 / np.sqrt(23**2 + 3), *[1 / np.sqrt(23**2 + 3)] * 3]], rtol=1e-6)
    assert "inputs 0 (Inf), 2 (NaN)" in from_wire(got[2][1]).message
    assert m.nonfinite_rows.n == 3 and m.batch_failures.n == 0


def test_a_window_of_finite_rows_counts_nothing():
    _, m, got = _window([(0, [[1, 2], [3]]), (1, [[4]])])
    assert all(err is None for _, err in got.values()) and m.nonfinite_rows.n == 0


def test_http_answers_500_with_a_code_a_client_can_match():
    a = api_error(NonFinite("non-finite values in the embedding of input 3 (NaN)"))
    assert a.status == 500 and a.body()["error"]["code"] == "nonfinite_embedding"
    assert a.body()["error"]["type"] == "server_error"
