"""A timed pass that overlaps tokenization, the host's batch work and the device, as `serve` does on a GPU.

Why: `tune --device cuda` used to tokenize the whole pass, then run its batches one after the other, each
waiting for the device before the next was built. Its figure measured the host, not the GPU: about a third of
the same artifact's forward-only ceiling (docs/measurements/2026-12-01-h200-packed-embeddings).
`serve` tokenizes in frontend processes while the engine runs, and launches a batch before it answers the last.

How: tokenizer processes, as many as `serve` starts frontends for one GPU (engines/tokenize_pool.py; on a small
host, or without a checked Rust tokenizer, threads of this process), tokenize the next chunks of the (shuffled)
texts while this thread plans the current chunk's batches the way the engine does (by real tokens for a packed
engine), launches each, and collects the one before it (`Embedder.launch` / `collect`: at most two in flight). A
chunk is about one full batch of the candidate's budget (`chunk_size`); a pass runs at least MIN_CHUNKS of them and
two per tokenizer, going round the texts again when there are few. Items/s is the pass's items over its wall time,
first tokenization to last rows. A batch's latency is its device time (from its launch, or from the end of the
batch it queued behind) plus its share of its chunk's tokenization.
"""

from __future__ import annotations

import os
import random
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from infertune.batching import ASYNC_DEPTH, plan_batches, plan_packed
from infertune.config import Batching
from infertune.engines.tokenize_pool import pool_for
from infertune.hardware.sizing import tokenizer_processes

MIN_CHUNKS = 8  # a pass runs at least this many chunks (going round the texts again if needed)
MIN_CHUNK = 64  # texts
MAX_CHUNK = 512  # texts: a pass runs >= 2 chunks per tokenizer, so bigger chunks make long passes
# chunks tokenized at once, each on its own thread (the Rust tokenizer releases the GIL): as `serve` tokenizes in
# several frontend processes; one thread (Rust's own parallelism inside) left the GPU waiting (docs/measurement.md)
TOKENIZERS = max(1, min(4, (os.cpu_count() or 1) // 4))


def start_tokenizers(emb: Any) -> None:
    """Start the embedder's tokenizer processes now (a GPU engine that overlaps), not inside its first timed pass:
    12 spawned processes take seconds, which would count in the first candidate's probe and reject it."""
    if getattr(emb, "async_launch", False) and _on_gpu(emb):
        pool_for(emb, tokenizer_processes())


def _on_gpu(emb: Any) -> bool:
    return str(getattr(emb, "device", "")).startswith("cuda")


def chunk_size(emb: Any, sample: Sequence[str], n: int, batching: Batching) -> int:
    """Texts per chunk: about one full batch of the candidate's budget (90% of it, from the sample's mean length,
    at most MAX_CHUNK texts), as the engine forms batches under load; at least an eighth of the texts (and
    MIN_CHUNK). Why: each batch has a fixed cost on the device that small batches do not amortise; chunks of an
    eighth of the texts left a GPU waiting on the worker (docs/measurement.md, "On a GPU")."""
    eighth = max(MIN_CHUNK, -(-n // MIN_CHUNKS))
    if not sample:
        return eighth
    if batching.kind == "fixed":
        full = batching.size
    else:
        mean = max(1.0, sum(len(x) for x in emb.token_ids(list(sample))) / len(sample))
        full = int(0.9 * batching.size / mean)
    return max(eighth, min(full, batching.max_items, MAX_CHUNK))


def overlapped_pass(emb: Any, texts: Sequence[str], batching: Batching, max_s: float | None = None,
                    shuffle: int | None = None, max_batches: int | None = None) -> dict[str, Any]:
    """One timed pass (the dict of `Embedder.measure_pass`)."""
    return _Pass(emb, texts, batching, shuffle).run(max_s, max_batches)


class _Pass:
    """The state of one overlapped pass: chunks handed out in a circular order, their token ids coming back from
    the tokenizers, batches launched and collected at most ASYNC_DEPTH apart."""

    def __init__(self, emb: Any, texts: Sequence[str], batching: Batching, shuffle: int | None):
        self.emb, self.texts, self.batching = emb, texts, batching
        self.order = list(range(len(texts)))
        if shuffle is not None:
            random.Random(shuffle).shuffle(self.order)
        self.procs = pool_for(emb, tokenizer_processes()) if _on_gpu(emb) else None
        self.inflight = self.procs.processes if self.procs else TOKENIZERS
        self.min_chunks = max(MIN_CHUNKS, 2 * self.inflight)  # every tokenizer has work while the first chunks run
        self.size = chunk_size(emb, [texts[i] for i in self.order[:64]], len(self.order), batching)
        self.pos = self.count = 0  # the next position in the (circular) order, chunks handed out
        self.lat: list[float] = []
        self.padded: list[int] = []
        self.done_items = self.done_tokens = self.launched = 0
        self.flight: deque = deque()
        self.last_done = 0.0
        self.wait_tokens = self.wait_device = 0.0  # the main thread blocked on token ids / on the device

    def next_chunk(self) -> list[int] | None:
        if not self.order or (self.pos >= len(self.order) and self.count >= self.min_chunks):
            return None
        chunk = [self.order[(self.pos + i) % len(self.order)] for i in range(min(self.size, len(self.order)))]
        self.pos, self.count = self.pos + len(chunk), self.count + 1
        return chunk

    def tokenize(self, chunk: list[int]) -> tuple[list[list[int]], float]:
        t = time.perf_counter()
        return self.emb.token_ids([self.texts[i] for i in chunk]), time.perf_counter() - t

    def collect_oldest(self) -> None:
        handle, t_launch, tok_ms, n, real, ran = self.flight.popleft()
        t = time.perf_counter()
        rows = self.emb.collect(handle)
        self.wait_device += time.perf_counter() - t
        self.emb.postprocess(rows)
        now = time.perf_counter()
        self.lat.append((now - max(t_launch, self.last_done)) * 1000 + tok_ms)
        self.last_done = now
        self.done_items += n
        self.done_tokens += real
        self.padded.append(ran)

    def launch_chunk(self, ids: list[list[int]], t_tok: float, stop_at: float | None,
                     max_batches: int | None) -> bool:
        """Plan, collate and launch a chunk's batches; True when the pass must stop (time or batch limit)."""
        emb = self.emb
        lengths = [len(x) for x in ids]
        if getattr(emb, "packed", False):  # padding-free batches: planned by real tokens, as the engine does
            plan = plan_packed(lengths, self.batching.size, self.batching.max_items)
        else:
            plan = plan_batches(lengths, self.batching)
        for b in plan:
            batch = emb.collate([ids[i] for i in b])
            t = time.perf_counter()
            handle = emb.launch(batch)
            ran = int(getattr(emb, "ran_tokens", 0) or batch["input_ids"].size)
            self.flight.append((handle, t, t_tok * 1000 * len(b) / len(ids), len(b), sum(lengths[i] for i in b), ran))
            self.launched += 1
            if len(self.flight) >= ASYNC_DEPTH:
                self.collect_oldest()
            if (max_batches is not None and self.launched >= max_batches) or \
                    (stop_at is not None and time.perf_counter() > stop_at):
                return True
        return False

    def run(self, max_s: float | None, max_batches: int | None) -> dict[str, Any]:
        t0 = time.perf_counter()
        stop_at = None if max_s is None else t0 + max_s
        ahead: deque = deque()  # chunks being tokenized, in order
        with ThreadPoolExecutor(TOKENIZERS, thread_name_prefix="infertune-tokenize") as pool:

            def fill() -> None:
                while len(ahead) < self.inflight and (chunk := self.next_chunk()) is not None:
                    ahead.append(self.procs.submit([self.texts[i] for i in chunk]) if self.procs
                                 else pool.submit(self.tokenize, chunk))

            fill()
            while ahead:
                t = time.perf_counter()
                ids, t_tok = ahead.popleft().result()
                self.wait_tokens += time.perf_counter() - t
                fill()
                if self.launch_chunk(ids, t_tok, stop_at, max_batches):
                    break
            while self.flight:
                self.collect_oldest()
            self.emb.synchronize()
            wall = time.perf_counter() - t0
            for f in ahead:
                f.cancel()
        return {"wall_s": wall, "latency_ms": self.lat, "items": self.done_items, "tokens": self.done_tokens,
                "padded_tokens": sum(self.padded), "padded_per_batch": self.padded, "batches": self.launched,
                "complete": self.done_items >= len(self.order),  # every text ran (chunks go round the order in turn)
                "wait_tokens_s": self.wait_tokens, "wait_device_s": self.wait_device}
