"""The HTTP side's one face of the batch core: `submit()` a parsed request, get the rendered body back.

The same client serves both topologies; only its link differs: inproc.InprocLink to a batch core in a
thread of this process, or transport.ZmqLink to engine processes (one per device).

Per request, on the event loop: admission (at most `max_queue` in flight in this client, then Overloaded; then
by expected wait, admission.py: the tokens outstanding on the engines over their measured service rate, against
the request's deadline, else Overloaded or, for an engine that finishes nothing, EngineStalled), tokenization
(a thread for requests of many texts, so the loop stays free), the choice of engine (the one with the fewest rows
this client has outstanding on it), then the request waits in an outbox that is
flushed once per turn of the loop: every request admitted in that turn travels in one message
(transport.py). Results come back through the link and are rendered here.

When an engine goes down (the launcher says so), the requests outstanding on it fail at once with
EngineDown and no new ones go to it until it is back. An engine process that holds requests and sends
nothing for `stall_s` is stalled (a hung device, a stopped process): the client kills it, fails its
requests, and the launcher restarts it. Errors are serve/errors.py's; http.py maps them to statuses.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from infertune.serve.admission import ServiceRate, judge
from infertune.serve.errors import EngineDown, EngineStalled, InputTooLong, Overloaded, TimedOut, from_wire
from infertune.serve.schema import EmbeddingRequest, render
from infertune.serve.transport import pack_requests, unpack_answer

log = logging.getLogger("infertune.serve")
THREAD_TEXTS = 16  # requests with at least this many texts are tokenized (and rendered) off the loop
SLICE_TEXTS = 256  # a tokenizer that holds the GIL (tokie) tokenizes a big request on the loop, this many a turn


class _Pending:
    """A request sent to an engine and not answered yet."""

    __slots__ = ("fut", "eng", "rows", "tokens", "sent")

    def __init__(self, fut: asyncio.Future, eng: int, rows: int, tokens: int, sent: float):
        self.fut, self.eng, self.rows, self.tokens, self.sent = fut, eng, rows, tokens, sent


class EngineClient:
    def __init__(self, emb: Any, index: int, link: Any, metrics: Any, *, max_queue: int, truncate: bool,
                 stall_s: float | None = None, tokenize_threads: int | None = None, max_wait_s: float = 10.0):
        self.emb = emb  # tokenizer and spec (in a frontend process: a bare Embedder, no weights)
        self.index = index  # this client's address for answers (the frontend's index)
        self.link = link
        self.m = metrics
        self.max_queue = max_queue
        self.truncate = truncate
        self.stall_s = stall_s
        self.max_wait_s = max_wait_s  # a request's deadline unless it sends its own (X-Infertune-Deadline-Ms)
        engines = link.engines
        self.rates = [ServiceRate() for _ in range(engines)]  # per engine: tokens/s and tokens outstanding
        self.inflight = 0
        self.up = [False] * engines
        self.pids: list[int | None] = [None] * engines  # engine processes (None: a thread of this process)
        self.load = [0] * engines  # rows outstanding per engine, from this client
        self.heard = [0.0] * engines  # when each engine last answered this client
        self.items = 0
        self.batches = 0  # messages sent to engines
        self._pending: dict[int, _Pending] = {}
        self._outbox: list[list[tuple[int, list[list[int]]]]] = [[] for _ in range(engines)]
        self._flush_at: asyncio.Handle | None = None
        self._ids = itertools.count()
        self._watch: asyncio.Task | None = None
        # big requests are tokenized and rendered on these threads (None: asyncio's default pool)
        self._pool = ThreadPoolExecutor(tokenize_threads, "infertune-tokenize") if tokenize_threads else None
        metrics.watch_gauge(metrics.queue_depth, lambda: float(self.inflight))  # read, not written per request
        metrics.watch_gauge(metrics.queue_tokens, lambda: float(sum(r.outstanding for r in self.rates)))
        metrics.watch_gauge(metrics.service_rate, lambda: float(sum(r.current(time.monotonic()) or 0.0
                                                                    for r in self.rates)))
        metrics.watch_gauge(metrics.expected_wait, self.expected_wait)
        metrics.max_wait.set(max_wait_s)
        self._tokenize_s = metrics.stage_seconds.labels("tokenize")  # the child once: labels() per request cost 1 us

    async def start(self) -> EngineClient:
        await self.link.start(self._deliver)
        if self.stall_s:
            self._watch = asyncio.get_running_loop().create_task(self._watch_stalls())
        return self

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self.link.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    # --- engines coming and going (called on the loop) ---------------------------------------------------
    def set_engine(self, i: int, up: bool, why: str = "", pid: int | None = None) -> None:
        self.pids[i] = pid
        if self.up[i] == up:
            return
        self.up[i] = up
        if up:
            self.heard[i] = time.monotonic()
            return
        self._fail_engine(i, f"the model worker (engine process) holding this request {why or 'went down'}; it "
                             "is being restarted; retry in a few seconds")

    def _fail_engine(self, i: int, message: str) -> None:
        self._outbox[i].clear()
        for rid in [r for r, got in self._pending.items() if got.eng == i]:
            fut = self._pending.pop(rid).fut
            if not fut.done():
                fut.set_exception(EngineDown(message))
        self.load[i] = 0
        self.rates[i].dropped(self.rates[i].outstanding, time.monotonic())

    async def _watch_stalls(self) -> None:
        """Kill an engine process that holds this client's requests and has said nothing for `stall_s`."""
        while True:
            await asyncio.sleep(min(0.25, self.stall_s / 4))
            now = time.monotonic()
            oldest: dict[int, float] = {}
            for p in self._pending.values():
                oldest[p.eng] = min(p.sent, oldest.get(p.eng, p.sent))
            for eng, sent in oldest.items():
                pid = self.pids[eng]
                if pid is None or pid == os.getpid() or now - max(sent, self.heard[eng]) < self.stall_s:
                    continue
                log.error("engine %d (pid %d) answered nothing for %.1f s with requests waiting: killing it", eng,
                          pid, self.stall_s)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                self.up[eng] = False
                self._fail_engine(eng, f"the model worker (engine process {pid}) did not answer within "
                                       f"{self.stall_s:g} s (stalled); it was killed and is being restarted; "
                                       "retry in a few seconds")

    def _forget(self, rid: int) -> _Pending | None:
        """Stop waiting for a request (timed out, failed): its rows and tokens no longer outstanding."""
        p = self._pending.pop(rid, None)
        if p is not None:
            self.load[p.eng] -= p.rows
            self.rates[p.eng].dropped(p.tokens, time.monotonic())
        return p

    def expected_wait(self) -> float:
        """The wait a new request is expected to have now (s): the shortest over the live engines; 0 before any
        estimate, and a large finite number for an engine that finishes nothing (a gauge cannot say inf)."""
        now = time.monotonic()
        waits = [r.expected_wait(now) for r, up in zip(self.rates, self.up, strict=True) if up]
        known = [w for w in waits if w is not None]
        return min(min(known, default=0.0), 1e9)

    # --- requests -----------------------------------------------------------------------------------------
    async def submit(self, req: EmbeddingRequest, served_name: str, timeout_s: float,
                     deadline_s: float | None = None) -> bytes:
        """Embed one request; return the rendered response body. `deadline_s`: the longest the request may be
        expected to wait before its rows start (default --max-wait-s); once admitted it runs to completion or
        `timeout_s`. Raises serve.errors.ServeError."""
        if self.inflight >= self.max_queue:
            raise Overloaded(f"server is at capacity ({self.max_queue} requests queued, --max-queue); retry after "
                             "1 s", reason="queue_full")
        deadline = self.max_wait_s if deadline_s is None else deadline_s
        v = judge([r for r, up in zip(self.rates, self.up, strict=True) if up], deadline, time.monotonic())
        if not v.admit:
            if v.reason == "engine_stalled":
                raise EngineStalled(v.message)
            raise Overloaded(v.message, reason=v.reason, retry_after_s=v.retry_after_s)
        self.inflight += 1
        try:
            return await self._submit(req, served_name, timeout_s)
        finally:
            self.inflight -= 1

    async def _submit(self, req: EmbeddingRequest, served_name: str, timeout_s: float) -> bytes:
        big = req.n >= THREAD_TEXTS
        rows = await self._rows(req) if big else self._tokenize(req)
        live = [i for i, u in enumerate(self.up) if u]
        if not live:
            raise EngineDown("no model worker (engine) is up: starting or restarting; poll GET /ready")
        eng = min(live, key=self.load.__getitem__)
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        now = time.monotonic()
        tokens = sum(len(r) for r in rows)
        self._pending[rid] = _Pending(fut, eng, len(rows), tokens, now)
        self.rates[eng].sent(tokens, now)
        self.load[eng] += len(rows)
        self._outbox[eng].append((rid, rows))
        if self._flush_at is None:
            self._flush_at = loop.call_soon(self._flush)
        try:
            vec = await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            self._forget(rid)
            raise TimedOut(f"request took longer than {timeout_s:g} s (the server's --request-timeout-s); "
                           "retry, or send fewer items") from None
        self.items += len(rows)
        if big:
            return await self._off_loop(render, vec, req.encoding_format, served_name, tokens, req.dimensions)
        return render(vec, req.encoding_format, served_name, tokens, req.dimensions)

    async def _rows(self, req: EmbeddingRequest) -> list[list[int]]:
        """A big request's rows, off the loop where the tokenizer lets threads run beside it (the Rust tokenizer
        releases the GIL); tokie holds it, so a thread would only contend with this loop: it tokenizes here, a
        slice a turn, so other requests move between slices."""
        enc = self.emb.token_encoder() if req.texts is not None else None
        if enc is None or not enc.holds_gil:
            return await self._off_loop(self._tokenize, req)
        rows: list[list[int]] = []
        for at in range(0, req.n, SLICE_TEXTS):
            if at:
                await asyncio.sleep(0)
            rows += self._tokenize(req, slice(at, at + SLICE_TEXTS))
        return rows

    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _tokenize(self, req: EmbeddingRequest, part: slice = slice(None)) -> list[list[int]]:
        if req.texts is None:
            return req.ids or []  # checked and cut to the limit by parse_request
        t0 = time.perf_counter()
        texts = req.texts[part]
        rows = self.emb.token_ids(texts)
        if not self.truncate and (err := over_limit(self.emb, texts, rows, self.emb.spec.max_length,
                                                     offset=part.start or 0)):
            raise err
        self._tokenize_s.observe(time.perf_counter() - t0)
        return rows

    def _flush(self) -> None:
        self._flush_at = None
        for i, box in enumerate(self._outbox):
            if box:
                self.link.send(i, pack_requests(self.index, box))
                self._outbox[i] = []
                self.batches += 1

    def _deliver(self, frames: list[Any]) -> None:
        """One message of finished requests from an engine (on the loop)."""
        sender, results = unpack_answer(frames, self.emb.spec.dim)
        now = self.heard[sender] = time.monotonic()  # answers, or a heartbeat while it works for other clients
        done = 0
        for rid, rows, err in results:
            got = self._pending.pop(rid, None)
            if got is None:  # timed out, or failed when its engine went down
                continue
            fut = got.fut
            self.load[got.eng] -= got.rows
            done += got.tokens
            if fut.done():
                continue
            if err is not None:
                fut.set_exception(from_wire(err))
            else:
                fut.set_result(np.asarray(rows))
        if done:
            self.rates[sender].finished(done, now)
        else:
            self.rates[sender].progress(now)


def over_limit(emb: Any, texts: list[str], rows: list[list[int]], limit: int,
               offset: int = 0) -> InputTooLong | None:
    """The error for the first text longer than `limit` tokens (rows were tokenized with truncation, so a
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
    return InputTooLong(f"input[{i + offset}] has {n} tokens; this model's limit is {limit} tokens. Shorten it, or "
                        "start the server with --truncate", param="input")
