"""A frontend's face of the engine processes (multi-process `serve`): the same `submit()` as `Engine`, so
the HTTP app does not know which one it talks to.

Per request, on the frontend's event loop: admission (at most `max_queue` in flight in this frontend,
then 429), tokenization (a thread for requests of many texts, so the loop stays free), the choice of
engine (the one with the fewest rows this frontend has outstanding on it), then the request waits in an
outbox that is flushed once per turn of the loop: every request admitted in that turn travels in one
message (transport.py). Results come back on this frontend's PULL socket and are rendered here.

When the launcher says an engine went down, the requests outstanding on it fail at once with 503 (as a
batch in a dead worker does in single-process mode) and no new ones go to it until it is back.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import numpy as np

from infertune.serve.engine import Overloaded, over_limit
from infertune.serve.schema import ApiError, EmbeddingRequest, render

log = logging.getLogger("infertune.serve")
THREAD_TEXTS = 16  # requests with at least this many texts are tokenized (and rendered) off the loop
SLICE_TEXTS = 256  # a tokenizer that holds the GIL (tokie) tokenizes a big request on the loop, this many a turn


class EngineClient:
    def __init__(self, emb: Any, index: int, run_dir: str, engines: int, metrics: Any, *, max_queue: int,
                 truncate: bool):
        self.emb = emb  # a bare Embedder: tokenizer and spec, no weights
        self.index = index
        self.run_dir = run_dir
        self.m = metrics
        self.max_queue = max_queue
        self.truncate = truncate
        self.inflight = 0
        self.up = [False] * engines
        self.load = [0] * engines  # rows outstanding per engine, from this frontend
        self.items = 0
        self.batches = 0  # messages sent to engines
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._outbox: list[list[tuple[int, list[list[int]]]]] = [[] for _ in range(engines)]
        self._flush_at: asyncio.Handle | None = None
        self._ids = itertools.count()
        self._push: list[Any] = []
        self._pull: Any = None
        self._reader: asyncio.Task | None = None
        metrics.watch_gauge(metrics.queue_depth, lambda: float(self.inflight))  # read, not written per request

    async def start(self) -> EngineClient:
        import zmq
        import zmq.asyncio

        from infertune.serve.transport import engine_addr, frontend_addr

        self._ctx = zmq.Context()
        for i in range(len(self.up)):
            s = self._ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)  # admission bounds what is queued, not the socket
            s.connect(engine_addr(self.run_dir, i))
            self._push.append(s)
        self._actx = zmq.asyncio.Context()
        self._pull = self._actx.socket(zmq.PULL)
        self._pull.setsockopt(zmq.LINGER, 0)
        self._pull.bind(frontend_addr(self.run_dir, self.index))
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())
        return self

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        for s in self._push:
            s.close()
        if self._pull is not None:
            self._pull.close()

    # --- engines coming and going (called on the loop by the frontend's control thread) -----------------
    def set_engine(self, i: int, up: bool, why: str = "") -> None:
        if self.up[i] == up:
            return
        self.up[i] = up
        if up:
            return
        self._outbox[i].clear()
        err = ApiError(503, f"the engine process holding this request {why or 'went down'}; it is being "
                       "restarted; retry in a few seconds", type="server_error", code="worker_unavailable",
                       headers={"Retry-After": "1"})
        for rid in [r for r, (_, e, _) in self._pending.items() if e == i]:
            fut, _, _ = self._pending.pop(rid)
            if not fut.done():
                fut.set_exception(err)
        self.load[i] = 0

    # --- requests -----------------------------------------------------------------------------------------
    async def submit(self, req: EmbeddingRequest, served_name: str, timeout_s: float) -> bytes:
        if self.inflight >= self.max_queue:
            raise Overloaded()
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
            raise ApiError(503, "no engine process is up (starting or restarting); poll GET /ready",
                           type="server_error", code="worker_unavailable", headers={"Retry-After": "1"})
        eng = min(live, key=self.load.__getitem__)
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = (fut, eng, len(rows))
        self.load[eng] += len(rows)
        self._outbox[eng].append((rid, rows))
        if self._flush_at is None:
            self._flush_at = asyncio.get_running_loop().call_soon(self._flush)
        try:
            vec = await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            if (got := self._pending.pop(rid, None)) is not None:
                self.load[got[1]] -= got[2]
            raise ApiError(504, f"request took longer than {timeout_s:g} s (the server's --request-timeout-s); "
                           "retry, or send fewer items", type="timeout", code="timeout") from None
        self.items += len(rows)
        tokens = sum(len(r) for r in rows)
        if big:
            return await asyncio.to_thread(render, vec, req.encoding_format, served_name, tokens, req.dimensions)
        return render(vec, req.encoding_format, served_name, tokens, req.dimensions)

    async def _rows(self, req: EmbeddingRequest) -> list[list[int]]:
        """A big request's rows, off the loop where the tokenizer lets threads run beside it (the Rust tokenizer
        releases the GIL); tokie holds it, so a thread would only contend with this loop: it tokenizes here, a
        slice a turn, so other requests move between slices."""
        enc = self.emb.token_encoder() if req.texts is not None else None
        if enc is None or not enc.holds_gil:
            return await asyncio.to_thread(self._tokenize, req)
        rows: list[list[int]] = []
        for at in range(0, req.n, SLICE_TEXTS):
            if at:
                await asyncio.sleep(0)
            rows += self._tokenize(req, slice(at, at + SLICE_TEXTS))
        return rows

    def _tokenize(self, req: EmbeddingRequest, part: slice = slice(None)) -> list[list[int]]:
        if req.texts is None:
            return req.ids or []  # checked and cut to the limit by parse_request
        t0 = time.perf_counter()
        texts = req.texts[part]
        rows = self.emb.token_ids(texts)
        if not self.truncate and (err := over_limit(self.emb, texts, rows, self.emb.spec.max_length,
                                                     offset=part.start or 0)):
            raise err
        self.m.stage_seconds.labels("tokenize").observe(time.perf_counter() - t0)
        return rows

    def _flush(self) -> None:
        from infertune.serve.transport import pack_requests

        self._flush_at = None
        for i, box in enumerate(self._outbox):
            if box:
                self._push[i].send_multipart(pack_requests(self.index, box), copy=False)
                self._outbox[i] = []
                self.batches += 1

    async def _read_loop(self) -> None:
        from infertune.serve.transport import unpack_results

        dim = self.emb.spec.dim
        while True:
            try:
                frames = await self._pull.recv_multipart()
                results = unpack_results(frames, dim)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bad message is logged; the requests in it time out
                log.exception("could not read a message from an engine")
                continue
            for rid, rows, err in results:
                got = self._pending.pop(rid, None)
                if got is None:  # timed out, or failed when its engine went down
                    continue
                fut, eng, n = got
                self.load[eng] -= n
                if fut.done():
                    continue
                if err is not None:
                    status, message, etype, code = err
                    fut.set_exception(ApiError(status, message, type=etype, code=code,
                                               headers={"Retry-After": "1"} if status == 503 else None))
                else:
                    fut.set_result(np.asarray(rows))
