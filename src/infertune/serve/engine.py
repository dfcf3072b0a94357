"""The batching engine: tokenize -> batch -> forward -> post-process, each stage a thread, joined by
bounded queues so tokenization of the next requests overlaps the current forward pass.

- admission (event loop): at most `max_queue` requests in flight; the next one is refused at once
  (the app answers 429 with Retry-After) instead of queueing without bound;
- tokenize (N threads): drains several requests per tokenizer call; over-length text is rejected
  (400 naming the limit) or truncated;
- batcher (on the forward thread, pulled when the model is free): once an item is ready it waits at most
  `max_wait_ms` for company, or less when a full budget is already there; everything ready is
  length-sorted and packed under the padded-token budget by `batching.plan_batches` (under
  `max_batch_tokens` when it holds more than one budget: fewer, larger batches); the batch holding the
  oldest item runs and the rest go back to the front of the line. Pulling instead of forming batches
  ahead lets every item that arrived during the last forward pass compete for the next one (MiniLM bf16,
  2-core box, c=32: batches formed ahead averaged 6.6 items at padding ratio 1.74);
- forward (1 thread, owns the model, or drives the supervised worker process of supervisor.py): a batch
  that raises fails only its own requests (500; 503 when the worker died or is restarting);
- post-process (1 thread): normalises, scatters rows back to requests, renders finished responses.

The engine does not import FastAPI: it can be driven in-process (`serve --ceiling` drives a model the same way, without it).
"""  # noqa: E501

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.batching import pad_length, plan_batches, round_up
from infertune.config import Batching
from infertune.serve.config import Settings
from infertune.serve.metrics import Metrics
from infertune.serve.schema import ApiError, EmbeddingRequest, render

log = logging.getLogger("infertune.serve")
_STOP = object()
# lengths are padded to a multiple of this (batching.pad_length): a server that sees every length 1..N
# keeps kernels for every shape, and memory grows with them (serve/memory.py); eight times fewer shapes
# costs < 4 padded tokens per row on average
PAD_MULTIPLE = 8


class Overloaded(Exception):
    """The admission queue is full."""


@dataclass(eq=False)
class Job:
    req: EmbeddingRequest
    loop: asyncio.AbstractEventLoop | None
    future: asyncio.Future | None
    served_name: str
    t_submit: float = field(default_factory=time.perf_counter)
    out: np.ndarray | None = None
    remaining: int = 0
    tokens: int = 0
    done: bool = False  # answered (result, error, or given up by a timeout)
    # set instead of loop/future by a caller outside asyncio (the engine process of serve/core.py): called
    # once, from a stage thread, with (job, result, error)
    callback: Callable[[Job, Any, BaseException | None], None] | None = None
    tag: Any = None  # the caller's handle for this job


@dataclass(eq=False)
class Item:
    job: Job
    index: int
    ids: list[int]
    t_ready: float = 0.0


class Engine:
    def __init__(self, embedder: Any, settings: Settings, metrics: Metrics, *, max_queue: int = 512,
                 truncate: bool = False, fault: Callable[[list[Item]], None] | None = None, raw: bool = False):
        self.emb = embedder
        self.raw = raw  # finished jobs get their float32 rows, not a rendered body (a frontend renders)
        self.s = settings
        self.m = metrics
        self.max_queue = max_queue
        self.truncate = truncate
        self.fault = fault  # test hook: called before each forward; may raise
        self.inflight = 0  # touched only on the event loop
        self._lock = threading.Lock()  # guards Job.done transitions
        self._tok_q: queue.Queue = queue.Queue(maxsize=max_queue + settings.tokenize_workers)
        self._ready: deque[Item] = deque()
        self._ready_cv = threading.Condition()
        self._post_q: queue.Queue = queue.Queue(maxsize=4)
        self._threads: list[threading.Thread] = []
        self._tokenizers_left = 0
        self.batches = 0
        self.items = 0
        self._batching = Batching(kind="tokens", size=settings.batch_tokens, max_items=settings.max_batch_items)
        self._grown = Batching(kind="tokens", size=max(settings.max_batch_tokens, settings.batch_tokens),
                               max_items=settings.max_batch_items)
        metrics.watch_queue("tokenize", self._tok_q.qsize)
        metrics.watch_queue("batch", lambda: len(self._ready))
        metrics.watch_queue("postprocess", self._post_q.qsize)

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._tokenizers_left = self.s.tokenize_workers
        targets = [self._tokenize_loop] * self.s.tokenize_workers + [self._forward_loop, self._post_loop]
        for i, t in enumerate(targets):
            th = threading.Thread(target=t, name=f"infertune-{t.__name__.strip('_')}-{i}", daemon=True)
            th.start()
            self._threads.append(th)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish everything already admitted, then stop the stage threads."""
        for _ in range(self.s.tokenize_workers):
            self._tok_q.put(_STOP)
        deadline = time.monotonic() + timeout
        for th in self._threads:
            th.join(max(0.0, deadline - time.monotonic()))

    def warmup(self, texts: list[str]) -> None:
        """Run a short batch and a long one through the model so first requests don't pay."""
        ids = sorted(self.emb.token_ids(texts), key=len)
        for rows in (ids[:4], ids[-2:], ids[:1]):
            self.emb.postprocess(self.emb.forward(self.emb.collate(rows)))
        if self.emb.compiles_per_shape:
            warm_shapes(self.emb, ids)
        self.emb.synchronize()

    # --- admission (event loop) -------------------------------------------------------------------
    async def submit(self, req: EmbeddingRequest, served_name: str, timeout_s: float) -> bytes:
        """Embed one request; return the rendered response body. Raises Overloaded or ApiError."""
        if self.inflight >= self.max_queue:
            raise Overloaded()
        loop = asyncio.get_running_loop()
        job = Job(req, loop, loop.create_future(), served_name)
        self.inflight += 1
        self.m.queue_depth.set(self.inflight)
        try:
            self._tok_q.put_nowait(job)
            try:
                return await asyncio.wait_for(asyncio.shield(job.future), timeout_s)
            except TimeoutError:
                self._finish(job, error=ApiError(504, f"request took longer than {timeout_s:g} s (the server's "
                                                 "--request-timeout-s); retry, or send fewer items",
                                                 type="timeout", code="timeout"))
                return await job.future
        finally:
            self.inflight -= 1
            self.m.queue_depth.set(self.inflight)

    def _finish(self, job: Job, result: Any = None, error: BaseException | None = None) -> None:
        with self._lock:
            if job.done:
                return
            job.done = True
        if job.callback is not None:
            job.callback(job, result, error)
        elif error is not None:
            job.loop.call_soon_threadsafe(_set, job.future, None, error)
        else:
            job.loop.call_soon_threadsafe(_set, job.future, result, None)

    # --- stages (threads) ---------------------------------------------------------------------------
    def _tokenize_loop(self) -> None:
        stopping = False
        while not stopping:
            jobs = [self._tok_q.get()]
            while len(jobs) < 64:  # drain what's waiting: one tokenizer call for many requests
                try:
                    jobs.append(self._tok_q.get_nowait())
                except queue.Empty:
                    break
            if any(j is _STOP for j in jobs):
                stopping = True
                jobs = [j for j in jobs if j is not _STOP]
            try:
                self._tokenize(jobs)
            except Exception as e:  # noqa: BLE001 - fail these requests, keep serving
                log.exception("tokenization failed")
                for j in jobs:
                    self._finish(j, error=ApiError(500, f"tokenization failed: {type(e).__name__}: {e}",
                                                   type="server_error"))
        with self._ready_cv:
            self._tokenizers_left -= 1
            self._ready_cv.notify_all()

    def _tokenize(self, jobs: list[Job]) -> None:
        jobs = [j for j in jobs if not j.done]
        t0 = time.perf_counter()
        texts = [t for j in jobs if j.req.texts is not None for t in j.req.texts]
        all_ids = iter(self.emb.token_ids(texts) if texts else [])
        limit = self.emb.spec.max_length
        ready: list[Item] = []
        for j in jobs:
            if j.req.texts is None:
                rows = j.req.ids or []
            else:
                rows = [next(all_ids) for _ in j.req.texts]
                if not self.truncate and (err := over_limit(self.emb, j.req.texts, rows, limit)) is not None:
                    self._finish(j, error=err)
                    continue
            j.out = np.empty((len(rows), self.emb.spec.dim), dtype=np.float32)
            j.remaining = len(rows)
            j.tokens = sum(len(r) for r in rows)
            ready += [Item(j, i, r) for i, r in enumerate(rows)]
        now = time.perf_counter()
        self.m.stage_seconds.labels("tokenize").observe(now - t0)
        for it in ready:
            it.t_ready = now
        with self._ready_cv:
            self._ready.extend(ready)
            self._ready_cv.notify()

    def _take_window(self) -> list[Item] | None:
        """Block for the first ready item, then gather more until the budget fills or max-wait passes."""
        cap = 4 * self.s.max_batch_items  # a short sort window: items beyond it wait for the next one
        with self._ready_cv:
            while not self._ready:
                if self._tokenizers_left == 0:
                    return None
                self._ready_cv.wait()
            deadline = self._ready[0].t_ready + self.s.max_wait_ms / 1000
            while True:
                n = min(len(self._ready), cap)
                longest = max(len(self._ready[i].ids) for i in range(n))
                full = n * longest >= self.s.batch_tokens or n >= self.s.max_batch_items
                left = deadline - time.perf_counter()
                if full or left <= 0 or self._tokenizers_left == 0:
                    break
                self._ready_cv.wait(left)
            return [self._ready.popleft() for _ in range(min(len(self._ready), cap))]

    def _next_batch(self) -> tuple[list[Item], dict] | None:
        """Pull the next batch when the model is free: everything ready competes for it (a larger,
        better-sorted window than batches formed ahead of time), the batch holding the oldest item runs,
        and the rest go back to the front of the line for the next pull."""
        while (window := self._take_window()) is not None:
            window = [it for it in window if not it.job.done]
            if not window:
                continue
            lengths = [round_up(len(it.ids), PAD_MULTIPLE) for it in window]  # as collated
            cap = self.s.max_padding
            plan = plan_batches(lengths, self._batching, cap)
            if len(plan) > 1 and self._grown.size > self._batching.size:  # under load: fewer, larger batches
                plan = plan_batches(lengths, self._grown, cap)
            chosen = next(b for b in plan if 0 in b)  # window[0] is the oldest ready item: no starvation
            picked = set(chosen)
            rest = [it for i, it in enumerate(window) if i not in picked]
            if rest:
                with self._ready_cv:
                    self._ready.extendleft(reversed(rest))
            items = [window[i] for i in chosen]
            now = time.perf_counter()
            for it in items:
                self.m.stage_seconds.labels("queue").observe(now - it.t_ready)
            return items, pad_length(self.emb.collate([it.ids for it in items]), PAD_MULTIPLE, self.emb.pad_id)
        return None

    def _forward_loop(self) -> None:
        while (got := self._next_batch()) is not None:
            items, batch = got
            if all(it.job.done for it in items):  # every request timed out or failed meanwhile
                continue
            t0 = time.perf_counter()
            try:
                if self.fault is not None:
                    self.fault(items)
                pooled = self.emb.forward(batch)
                self.emb.synchronize()
            except Exception as e:  # noqa: BLE001 - fail this batch's requests only
                self.m.batch_failures.inc()
                if getattr(e, "status", None) == 503:  # supervisor.WorkerDown: the worker died or is restarting
                    log.warning("forward pass failed: %s", e)
                    err = ApiError(503, str(e), type="server_error", code="worker_unavailable",
                                   headers={"Retry-After": "1"})
                else:
                    log.exception("forward pass failed")
                    err = ApiError(500, f"the batch holding this request failed: {type(e).__name__}: {e}",
                                   type="server_error")
                for j in {id(it.job): it.job for it in items}.values():
                    self._finish(j, error=err)
                continue
            self.m.stage_seconds.labels("forward").observe(time.perf_counter() - t0)
            self.m.observe_batch(len(items), batch["input_ids"].size, sum(len(it.ids) for it in items))
            self.batches += 1
            self.items += len(items)
            self._post_q.put((items, pooled))
        self._post_q.put(_STOP)

    def _post_loop(self) -> None:
        while (got := self._post_q.get()) is not _STOP:
            items, pooled = got
            t0 = time.perf_counter()
            try:
                vec = self.emb.postprocess(pooled)
                for it, row in zip(items, vec, strict=True):
                    j = it.job
                    if j.done:
                        continue
                    j.out[it.index] = row
                    j.remaining -= 1
                    if j.remaining == 0:
                        self._finish(j, result=j.out if self.raw else
                                     render(j.out, j.req.encoding_format, j.served_name, j.tokens,
                                                j.req.dimensions))
            except Exception as e:  # noqa: BLE001
                log.exception("post-processing failed")
                for j in {id(it.job): it.job for it in items}.values():
                    self._finish(j, error=ApiError(500, f"post-processing failed: {type(e).__name__}: {e}",
                                                   type="server_error"))
            self.m.stage_seconds.labels("postprocess").observe(time.perf_counter() - t0)


def warm_shapes(emb: Any, rows: list[list[int]]) -> None:
    """Run the kinds of shapes serving will see before /ready: a compiled model (torch.compile) specialises
    on batch size 1, on lengths equal to the batch size, and on each new length class, and compiling one
    of those mid-traffic stalls the engine for seconds (seen on the H200: 45 ms batches at 7% GPU for the
    first 15 s of a benchmark, 4x slower than the same server once compiled)."""
    longest = max(8, min(emb.spec.max_length, max(len(r) for r in rows)))
    lengths = sorted({8, 16, 24, 64, -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE})
    base = max(rows, key=len)
    for length in lengths:
        row = (base * (length // max(1, len(base)) + 1))[:length]
        for b in (1, 2, 3, 17, 64):
            batch = pad_length(emb.collate([row] * b), PAD_MULTIPLE, emb.pad_id)
            emb.postprocess(emb.forward(batch))
    emb.synchronize()


def over_limit(emb: Any, texts: list[str], rows: list[list[int]], limit: int, offset: int = 0) -> ApiError | None:
    """The 400 for the first text longer than `limit` tokens (rows were tokenized with truncation, so a
    row at the limit may have been cut: those are counted again untruncated), or None. `offset`: where `texts`
    start in the request (its error names the request's index)."""
    at_limit = [i for i, r in enumerate(rows) if len(r) >= limit]
    if not at_limit:
        return None
    full = emb.count_tokens([texts[i] for i in at_limit])
    over = [(i, n) for i, n in zip(at_limit, full, strict=True) if n > limit]
    if not over:
        return None
    i, n = over[0]
    i += offset
    return ApiError(400, f"input[{i}] has {n} tokens; this model's limit is {limit} tokens. Shorten it, or "
                    "start the server with --truncate", param="input", code="context_length_exceeded")


def _set(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
