"""The engine process's batching in arrays (serve/batch_core.py) and its wire format (serve/transport.py):
the numpy-indexed collate equals the plain per-row one, every request gets back exactly its own rows in
its own order whatever the window's split, a failing batch fails only its requests, and row bucketing
stays within its bounds. A recording embedder stands in for the model: logic only, no sockets."""

from __future__ import annotations

import pickle
import random
from types import SimpleNamespace

import numpy as np
import pytest

from infertune.engines.base import Embedder
from infertune.serve import batch_core
from infertune.serve.batch_core import BatchCore, Chunk, bucket_rows
from infertune.serve.transport import pack_requests, pack_results, unpack_answer, unpack_requests


class _Tok:
    pad_token_id = 0


class Recorder(Embedder):
    """forward(): row r's vector is [sum of its real ids, its length, 1, 0...]; records every batch."""

    def __init__(self, device: str = "cpu", fail_on: int | None = None):
        spec = SimpleNamespace(dim=4, max_length=512, normalize=False)
        super().__init__(spec, _Tok(), device)
        self.needs_token_types = False
        self.batches: list[dict] = []
        self.fail_on = fail_on

    def forward(self, batch):
        self.batches.append(batch)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        if self.fail_on is not None and (ids == self.fail_on).any():
            raise RuntimeError("injected")
        out = np.zeros((len(ids), 4), dtype=np.float32)
        out[:, 0] = (ids * mask).sum(1)
        out[:, 1] = mask.sum(1)
        out[:, 2] = 1
        return out


def _settings(**kw):
    base = dict(batch_tokens=256, max_batch_tokens=1024, max_batch_items=64, max_wait_ms=1.0, max_padding=None)
    return SimpleNamespace(**{**base, **kw})


def _requests(rng: random.Random, n: int) -> list[tuple[int, list[list[int]]]]:
    return [(rid, [[rng.randint(1, 999) for _ in range(rng.randint(1, 60))] for _ in range(rng.randint(1, 5))])
            for rid in range(n)]


def _run(emb, reqs_by_fe: dict[int, list], settings=None, cost=None):
    sent: dict[int, list] = {}
    core = BatchCore(emb, settings or _settings(), _Metrics(), inbox=None,
                     send=lambda fe, frames: sent.setdefault(fe, []).append(frames))
    core.cost = cost
    chunks = [Chunk(pack_requests(fe, reqs)) for fe, reqs in reqs_by_fe.items()]
    core.run_window(chunks)
    return {fe: [r for frames in msgs for r in unpack_answer(frames, 4)[1]] for fe, msgs in sent.items()}


class _Metrics:
    def __getattr__(self, name):
        return _Sink()

    def observe_batch(self, *a):
        pass


class _Sink:
    def labels(self, *a):
        return self

    def observe(self, *a):
        pass

    def inc(self, *a):
        pass


@pytest.mark.parametrize("device,cost", [("cpu", None), ("cpu", (1e-3, 1e-6)), ("cuda", (1e-3, 1e-9))])
def test_every_request_gets_exactly_its_rows(device, cost):
    rng = random.Random(0)
    reqs = {0: _requests(rng, 30), 3: _requests(rng, 17)}
    got = _run(Recorder(device), reqs, cost=cost)
    for fe, rs in reqs.items():
        back = {rid: rows for rid, rows, err in got[fe]}
        assert sorted(back) == [rid for rid, _ in rs]
        for rid, rows in rs:
            expect = np.array([[sum(r), len(r), 1, 0] for r in rows], dtype=np.float32)
            np.testing.assert_array_equal(back[rid], expect)


def test_collate_in_arrays_equals_the_per_row_collate():
    rng = random.Random(1)
    emb = Recorder("cpu")
    reqs = _requests(rng, 20)
    _run(emb, {0: reqs}, settings=_settings(batch_tokens=1 << 20, max_batch_tokens=1 << 20, max_batch_items=10**6))
    (batch,) = emb.batches  # one window, one batch: every row, sorted longest first
    rows = sorted((r for _, rs in reqs for r in rs), key=len, reverse=True)
    plain = Embedder.collate(emb, rows)
    width = batch["input_ids"].shape[1]
    assert width % 8 == 0 and width - plain["input_ids"].shape[1] < 8
    got_ids = batch["input_ids"][:, :plain["input_ids"].shape[1]]
    got_mask = batch["attention_mask"][:, :plain["input_ids"].shape[1]]
    assert sorted(map(tuple, got_ids)) == sorted(map(tuple, plain["input_ids"]))  # the same rows, any order
    assert int(got_mask.sum()) == int(plain["attention_mask"].sum()) == sum(map(len, rows))
    assert not batch["attention_mask"][:, plain["input_ids"].shape[1]:].any()


def test_gpu_rows_are_bucketed_and_filler_rows_are_dropped():
    emb = Recorder("cuda")
    reqs = [(i, [[5] * 10]) for i in range(9)]
    got = _run(emb, {0: reqs}, settings=_settings(batch_tokens=1 << 20, max_batch_tokens=1 << 20))
    assert [len(b["input_ids"]) for b in emb.batches] == [16]  # 9 rows -> 16, fillers attend one token
    assert emb.batches[0]["attention_mask"][9:].sum(1).tolist() == [1] * 7
    assert len(got[0]) == 9 and all(rows.shape == (1, 4) and rows[0, 0] == 50 for _, rows, _ in got[0])


def test_a_failing_batch_fails_only_its_requests():
    emb = Recorder("cpu", fail_on=777)
    reqs = [(0, [[1] * 50]), (1, [[777, 2, 3]]), (2, [[4] * 50])]
    got = {rid: (rows, err) for rid, rows, err in _run(emb, {0: reqs}, settings=_settings(
        batch_tokens=64, max_batch_tokens=64))[0]}
    assert got[1][0] is None and got[1][1][0] == "BatchFailed" and "injected" in got[1][1][1]
    assert got[0][1] is None and got[2][1] is None and got[0][0][0, 0] == 50


def test_bucket_rows_bounds():
    prev = 0
    for n in range(1, 5000):
        b = bucket_rows(n)
        assert b >= n and b >= prev
        assert b <= 8 or b - n < 8 or b <= n * 1.125 + 1
        prev = b
    assert len({bucket_rows(n) for n in range(1, 5000)}) < 80


def test_wire_format_round_trips():
    rng = random.Random(2)
    reqs = _requests(rng, 40)
    fe, back = unpack_requests(pack_requests(5, reqs))
    assert fe == 5 and back == reqs
    results = [(0, np.arange(8, dtype=np.float32).reshape(2, 4), None), (1, None, ("EngineDown", "down")),
               (2, np.ones((1, 4), np.float32), None)]
    sender, out = unpack_answer(pack_results(results, engine=3), 4)
    assert sender == 3 and [r[0] for r in out] == [0, 1, 2] and out[1][2] == ("EngineDown", "down")
    np.testing.assert_array_equal(out[0][1], results[0][1])
    np.testing.assert_array_equal(out[2][1], results[2][1])
    assert pickle.loads(pack_requests(0, reqs)[0])[1][0] == (0, len(reqs[0][1]))


def test_requests_are_answered_as_their_last_batch_finishes():
    """A window split into batches answers each request right after the batch holding its last row (so a
    closed-loop client sends again while the other batches run); a request whose rows span batches is
    answered once, whole, after the last of them."""
    emb = Recorder("cpu")
    sent: list[tuple[int, list]] = []
    core = BatchCore(emb, _settings(batch_tokens=64, max_batch_tokens=64), _Metrics(), inbox=None,
                     send=lambda fe, frames: sent.append((len(emb.batches), unpack_answer(frames, 4)[1])))
    core.cost = (1e-3, 1e-9)  # batches are nearly free: split by length
    reqs = [(0, [[1] * 40]), (1, [[2] * 3]), (2, [[3] * 41, [4] * 2]), (3, [[5] * 4])]
    core.run_window([Chunk(pack_requests(0, reqs))])
    assert len(emb.batches) >= 2 and len(sent) >= 2  # more than one message for one window
    when = {rid: n for n, results in sent for rid, _, _ in results}
    assert sorted(when) == [0, 1, 2, 3]
    for rid, rows in reqs:  # answered right after the batch that held its last row, never before
        held = [k + 1 for k, b in enumerate(emb.batches) for r in rows
                if len(r) <= b["input_ids"].shape[1] and any(
                    (b["input_ids"][i][: len(r)] == r).all() and b["attention_mask"][i].sum() == len(r)
                    for i in range(len(b["input_ids"])))]
        assert when[rid] == max(held), (rid, when[rid], held)
    back = {rid: rows for _, results in sent for rid, rows, _ in results}
    np.testing.assert_array_equal(back[2], np.array([[123, 41, 1, 0], [8, 2, 1, 0]], dtype=np.float32))


def test_an_engine_with_its_own_row_buckets_is_collated_at_them():
    """An engine that runs rows in its own buckets (CUDA graphs: pad_rows) gets batches of that many rows,
    not the engine process's default rounding on top (9 rows: 12, not 16)."""
    from infertune.engines.cuda_graphs import graph_rows

    emb = Recorder("cuda")
    emb.pad_rows = graph_rows
    got = _run(emb, {0: [(i, [[5] * 10]) for i in range(9)]},
               settings=_settings(batch_tokens=1 << 20, max_batch_tokens=1 << 20))
    assert [len(b["input_ids"]) for b in emb.batches] == [graph_rows(9)] == [12]
    assert len(got[0]) == 9


def test_a_packed_engine_gets_arrival_order_batches_by_real_tokens():
    """An engine that runs batches padding-free (packed = True) is planned by real tokens in arrival order: a
    window within the token budget is one batch whatever its spread of lengths (a padded plan would split 1-token
    rows from 60-token ones), a bigger one splits into even batches, and every request still gets its rows."""
    emb = Recorder("cuda")
    emb.packed = True
    emb.pad_rows = lambda n: n
    rng = random.Random(4)
    reqs = _requests(rng, 40)
    tokens = sum(len(r) for _, rows in reqs for r in rows)
    got = _run(emb, {0: reqs}, settings=_settings(batch_tokens=tokens, max_batch_tokens=tokens, max_batch_items=4096),
               cost=(1e-3, 1e-9))
    assert len(emb.batches) == 1
    back = {rid: rows for rid, rows, err in got[0]}
    for rid, rows in reqs:
        np.testing.assert_array_equal(back[rid], np.array([[sum(r), len(r), 1, 0] for r in rows], dtype=np.float32))
    emb.batches.clear()
    third = tokens // 3 + 60
    _run(emb, {0: reqs}, settings=_settings(batch_tokens=third, max_batch_tokens=third, max_batch_items=4096))
    real = [int(b["attention_mask"].sum()) for b in emb.batches]
    assert len(real) == 3 and sum(real) == tokens and max(real) - min(real) <= 2 * 60
    emb.batches.clear()  # a window past the budget grows into the under-load budget, as padded batches do
    _run(emb, {0: reqs}, settings=_settings(batch_tokens=third, max_batch_tokens=tokens, max_batch_items=4096))
    assert len(emb.batches) == 1
    emb.batches.clear()  # ... but not past the engine's CUDA graphs while they are on (bigger batches run eagerly)
    emb.on, emb.max_tokens = True, third
    _run(emb, {0: reqs}, settings=_settings(batch_tokens=third, max_batch_tokens=tokens, max_batch_items=4096))
    assert len(emb.batches) == 3 and max(int(b["attention_mask"].sum()) for b in emb.batches) <= third
    emb.batches.clear()
    emb.on = False  # graphs turned themselves off: the under-load budget again
    _run(emb, {0: reqs}, settings=_settings(batch_tokens=third, max_batch_tokens=tokens, max_batch_items=4096))
    assert len(emb.batches) == 1


def test_a_packed_engine_does_not_wait_for_more_work_unless_told():
    plain, packed = Recorder("cuda"), Recorder("cuda")
    packed.packed = True
    s = _settings(max_wait_ms=8.0)
    assert BatchCore(plain, s, _Metrics(), None, None).wait_s() == 0.008
    assert BatchCore(packed, s, _Metrics(), None, None).wait_s() == 0.0
    s.sources = {"max_wait_ms": "flag"}  # the user's --max-wait-ms holds
    assert BatchCore(packed, s, _Metrics(), None, None).wait_s() == 0.008


class AsyncRecorder(Recorder):
    """A device whose launches return at once: collect() waits 5 ms (the device's work), and raises for a batch
    holding `fail_on` (a fault seen only when the result is read, as a CUDA error is)."""

    async_launch = True

    def __init__(self, fail_on=None):
        super().__init__("cuda")
        self.events: list[str] = []
        self.late_fail = fail_on

    def launch(self, batch):
        self.events.append("launch")
        return batch, Recorder.forward(self, batch)

    def collect(self, handle):
        import time

        batch, out = handle
        time.sleep(0.005)
        self.events.append("collect")
        if self.late_fail is not None and (batch["input_ids"] == self.late_fail).any():
            raise RuntimeError("injected at collect")
        return out


def test_an_async_engine_launches_the_next_batch_before_answering_this_one():
    """With launches that return before the device is done (CUDA), the engine loop answers on a second thread:
    the next batch is launched while the previous one is collected (at most two in flight), every request still
    gets exactly its rows, and a batch that fails when collected fails only its own requests."""
    import threading

    rng = random.Random(5)
    reqs = _requests(rng, 60) + [(60, [[5000, 1, 2]])]  # ids of _requests are < 1000
    emb = AsyncRecorder(fail_on=5000)
    sent: dict[int, list] = {}
    quiet = SimpleNamespace(get=lambda timeout_s: [])  # no more messages arrive
    core = BatchCore(emb, _settings(batch_tokens=64, max_batch_tokens=64), _Metrics(), inbox=quiet,
                     send=lambda fe, frames: sent.setdefault(fe, []).append(frames))
    core.cost = (1e-3, 1e-9)
    core.pending = [Chunk(pack_requests(0, reqs[:30])), Chunk(pack_requests(2, reqs[30:]))]
    stop = threading.Event()
    stop.set()  # run what is pending, then return
    core.loop(stop)
    in_flight, most = 0, 0
    for e in emb.events:
        in_flight += 1 if e == "launch" else -1
        most = max(most, in_flight)
    assert len(emb.batches) > 4 and most == 2 and in_flight == 0
    got = {rid: (rows, err) for fe, msgs in sent.items() for frames in msgs
           for rid, rows, err in unpack_answer(frames, 4)[1]}
    assert sorted(got) == list(range(61))
    assert got[60][0] is None and got[60][1][0] == "BatchFailed" and "at collect" in got[60][1][1]
    for rid, rows in reqs[:60]:
        if got[rid][1] is None:
            np.testing.assert_array_equal(got[rid][0], np.array([[sum(r), len(r), 1, 0] for r in rows], np.float32))
    assert sum(err is None for _, err in got.values()) >= 50  # only the failing batch's requests failed


def test_a_busy_core_beats_to_frontends_it_has_not_answered(monkeypatch):
    """A frontend whose request waits behind other frontends' batches gets heartbeats naming the engine (so its
    stall watch does not kill a busy engine); a frontend answered within the beat interval gets none."""
    import time

    monkeypatch.setattr(batch_core, "BEAT_S", 0.05)

    class Slow(Recorder):
        def forward(self, batch):
            time.sleep(0.03)
            return super().forward(batch)

    sent: list[tuple[int, int, list]] = []

    def send(fe, frames):
        engine, results = unpack_answer(frames, 4)
        sent.append((fe, engine, results))

    core = BatchCore(Slow(), _settings(batch_tokens=32, max_batch_tokens=32), _Metrics(), inbox=None, send=send,
                     index=2)
    core.cost = (1e-3, 1e-9)
    busy = [(rid, [[7] * 30]) for rid in range(12)]  # 12 batches of one row: about 0.36 s of work for frontend 0
    waiting = Chunk(pack_requests(1, [(99, [[5] * 30])]))
    core._heard[1] = time.perf_counter()  # frontend 1's request arrived with frontend 0's
    core.run_window([Chunk(pack_requests(0, busy))])
    beats = [(fe, engine) for fe, engine, results in sent if not results]
    assert beats and set(beats) == {(1, 2)}  # only the frontend left waiting, naming engine 2
    core.run_window([waiting])
    assert [r[0] for fe, _, results in sent if fe == 1 for r in results] == [99]
