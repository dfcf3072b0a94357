"""The overlapped timed pass (engines/overlap.py) that `tune` uses for engines whose launches return before the
device is done: every item is run once, the next chunk is tokenized while the current one runs, at most two
batches are in flight, and the probe limits (max_batches) cut it the same way every time."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np

from infertune.config import Batching
from infertune.engines.base import Embedder
from infertune.engines.overlap import MIN_CHUNK, MIN_CHUNKS


class _Tok:
    pad_token_id = 0


class SlowDevice(Embedder):
    """Token ids are word counts; launch returns at once, collect takes 2 ms (the device); records the order."""

    async_launch = True

    def __init__(self):
        super().__init__(SimpleNamespace(dim=2, max_length=512, normalize=True), _Tok(), "cuda")
        self.needs_token_types = False
        self.log: list[tuple[str, str, int]] = []  # (event, thread, rows)
        self.lock = threading.Lock()

    def token_ids(self, texts):
        with self.lock:
            self.log.append(("tokenize", threading.current_thread().name, len(texts)))
        time.sleep(0.002)
        with self.lock:
            self.log.append(("tokenized", threading.current_thread().name, len(texts)))
        return [[7] * (1 + len(t.split())) for t in texts]

    def launch(self, batch):
        with self.lock:
            self.log.append(("launch", threading.current_thread().name, len(batch["input_ids"])))
        return np.ones((len(batch["input_ids"]), 2), np.float32)

    def collect(self, handle):
        time.sleep(0.002)
        with self.lock:
            self.log.append(("collect", threading.current_thread().name, len(handle)))
        return handle


TEXTS = [" ".join(["w"] * (1 + (i * 37) % 90)) for i in range(640)]


def test_every_item_runs_once_with_tokenization_ahead_and_two_in_flight():
    emb = SlowDevice()
    got = emb.measure_pass(TEXTS, Batching(kind="tokens", size=2048, max_items=256), shuffle=3)
    assert got["complete"] and got["items"] >= len(TEXTS)
    assert len(got["latency_ms"]) == len(got["padded_per_batch"]) == got["batches"] > 8
    # what the main thread waited for: the device (collect sleeps 2 ms a batch), within the pass's wall
    assert 0.002 * got["batches"] <= got["wait_device_s"] < got["wall_s"] and 0 <= got["wait_tokens_s"] < got["wall_s"]
    from infertune.tasks.embedding.measure import summarize

    share = summarize([got]).wait_share
    assert share["device"] == round(got["wait_device_s"] / got["wall_s"], 4) and 0 < share["device"] < 1
    sizing, *toks = [e for e in emb.log if e[0] == "tokenize"]
    assert sizing[2] == 64  # a sample of the texts, tokenized to size the chunks
    assert len(toks) >= MIN_CHUNKS and all(t[1].startswith("infertune-tokenize") for t in toks)  # off the main thread
    assert sum(t[2] for t in toks) == got["items"] == len(TEXTS) and toks[0][2] == len(TEXTS) // MIN_CHUNKS
    second_collect = [i for i, e in enumerate(emb.log) if e[0] == "collect"][1]
    assert emb.log.index(toks[1]) < second_collect  # chunk 2 is being tokenized while chunk 1's batches run
    flying = most = 0
    for e in emb.log:
        flying += {"launch": 1, "collect": -1}.get(e[0], 0)
        most = max(most, flying)
    assert most == 2 and flying == 0


def test_a_small_pass_goes_round_the_texts_until_it_has_run_enough_chunks():
    """A pass shorter than MIN_CHUNKS windows runs its texts again (the pipeline's fill and drain stay small);
    every item counts, and the tokens are the texts' tokens, repeats included."""
    emb = SlowDevice()
    texts = TEXTS[:200]
    got = emb.measure_pass(texts, Batching(kind="tokens", size=2048, max_items=256))  # a budget under 64 texts
    toks = [e[2] for e in emb.log if e[0] == "tokenize"][1:]  # after the sample that sizes the chunks
    assert toks == [MIN_CHUNK] * MIN_CHUNKS and got["items"] == sum(toks) > len(texts) and got["complete"]
    per_text = [2 + (i * 37) % 90 for i in range(200)]
    order = [i % 200 for i in range(sum(toks))]
    assert got["tokens"] == sum(per_text[i] for i in order)


def test_a_probe_cut_at_max_batches_runs_the_same_batches_every_time():
    runs = [SlowDevice().measure_pass(TEXTS, Batching(kind="tokens", size=2048, max_items=256), shuffle=3,
                                      max_batches=5) for _ in range(2)]
    assert [r["batches"] for r in runs] == [5, 5] and not runs[0]["complete"]
    assert runs[0]["items"] == runs[1]["items"] and runs[0]["padded_per_batch"] == runs[1]["padded_per_batch"]


def test_several_tokenizer_threads_keep_the_chunks_in_order(monkeypatch):
    """Chunks tokenized on several threads at once (a GPU host) are run in their order: the same batches as one."""
    import infertune.engines.overlap as overlap

    one = SlowDevice().measure_pass(TEXTS, Batching(kind="tokens", size=2048, max_items=256), shuffle=3)
    monkeypatch.setattr(overlap, "TOKENIZERS", 3)
    emb = SlowDevice()
    three = emb.measure_pass(TEXTS, Batching(kind="tokens", size=2048, max_items=256), shuffle=3)
    assert three["padded_per_batch"] == one["padded_per_batch"] and three["items"] == one["items"]
    assert len({e[1] for e in emb.log if e[0] == "tokenize"}) > 1  # more than one tokenizer thread ran


def test_tokenizer_processes_give_the_engines_ids_and_feed_the_pass(monkeypatch):
    """The tokenizer processes rebuild the encoder that was checked against transformers (tokie or the Rust tokenizer): the same ids as
    the embedder's own token_ids; a pass tokenized in them runs every item once, as with threads."""  # noqa: E501
    import multiprocessing as mp

    import infertune.engines.overlap as overlap
    from infertune.engines.embedding_artifact import load_model
    from infertune.engines.tokenize_pool import TokenizerPool
    from infertune.workloads.texts import load_workload

    texts = load_workload(None).items[:150]
    emb = load_model("minilm", "cpu")
    want = emb.token_ids(texts)
    pool = TokenizerPool(emb.token_encoder().recipe, 2, mp.get_context("spawn"))
    try:
        rows, seconds = pool.submit(texts).result(timeout=120)
        assert [r.tolist() for r in rows] == want and seconds > 0

        class Null(SlowDevice):  # MiniLM's tokenizer, a device that answers at once
            def token_ids(self, t):
                return emb.token_ids(t)

        dev = Null()
        dev.device, dev._token_pool = "cuda", pool
        monkeypatch.setattr(overlap, "tokenizer_processes", lambda: 2)
        got = dev.measure_pass(texts, Batching(kind="tokens", size=4096, max_items=256), shuffle=1)
        import random

        order = list(range(150))
        random.Random(1).shuffle(order)  # the pass's order, gone round until it has run its chunks
        assert got["complete"] and got["tokens"] == sum(len(want[order[i % 150]]) for i in range(got["items"]))
        assert not [e for e in dev.log if e[0] == "tokenize"]  # nothing tokenized in this process
    finally:
        pool.close()


def test_a_tune_worker_can_start_tokenizer_processes():
    """Tune's workers are daemonic processes, and multiprocessing refuses children to a daemon: an H200
    tune once failed its reference that way. A worker starts a tokenizer pool and gets the ids."""
    from infertune.engines.embedding_artifact import load_model
    from infertune.tuning.worker import run_isolated

    emb = load_model("minilm", "cpu")
    texts = ["a short one", "a somewhat longer sentence about tokenizers and processes"]
    want = emb.token_ids(texts)
    got = run_isolated("infertune.engines.tokenize_pool:encode_in_processes",
                       {"recipe": list(emb.token_encoder().recipe), "texts": texts, "processes": 2}, timeout_s=180)
    assert got == want


def test_chunks_hold_about_one_full_batch_of_the_budget():
    """A chunk is ~90% of a budget's worth of texts (so the engine's batch is full, as under load), within an
    eighth of the texts and MAX_CHUNK."""
    from infertune.engines.overlap import MAX_CHUNK, chunk_size

    emb = SlowDevice()
    sample = [" ".join(["w"] * 49)] * 64  # 50 tokens each with the fake's tokenizer? measured below
    mean = sum(len(x) for x in emb.token_ids(sample)) / len(sample)
    assert chunk_size(emb, sample, 640, Batching(kind="tokens", size=16384, max_items=2048)) == int(0.9 * 16384 / mean)
    assert chunk_size(emb, sample, 640, Batching(kind="tokens", size=1024, max_items=256)) == 80  # an eighth
    assert chunk_size(emb, sample, 640, Batching(kind="tokens", size=10**6, max_items=8192)) == MAX_CHUNK
    assert chunk_size(emb, sample, 640, Batching(kind="tokens", size=10**6, max_items=100)) == 100
    assert chunk_size(emb, sample, 6400, Batching(kind="fixed", size=32)) == 800


def test_a_pool_has_every_process_started_before_it_is_used():
    """The pool's start-up calls meet at a barrier, so each process has started and answered once: no timed pass
    pays for a process still starting (GPU probes with the pool ran 10-20x slower than later passes on an H200)."""
    import multiprocessing as mp

    from infertune.engines.embedding_artifact import load_model
    from infertune.engines.tokenize_pool import TokenizerPool

    emb = load_model("minilm", "cpu")
    pool = TokenizerPool(emb.token_encoder().recipe, 3, mp.get_context("spawn"))
    try:
        assert len(pool.pids) == 3 and pool.pids == set(pool.pool._processes)  # each process answered itself
        rows, _ = pool.submit(["one more"]).result(timeout=60)
        assert [r.tolist() for r in rows] == emb.token_ids(["one more"])
    finally:
        pool.close()
