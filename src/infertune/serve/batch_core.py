"""The batching loop of the server, in arrays rather than per-item objects.

The one batch core of `serve`, in both topologies: in a thread of the server process (one process), or in
an engine process per device (several). Its intake is an inbox of messages (transport.ZmqInbox, a ZeroMQ
PULL socket; inproc.InprocInbox, a queue in the same process) and its output a `send(frontend, frames)`
callback; the messages are the same either way (transport.py).

One thread does everything, so nothing waits on a lock or hands work to another thread under the GIL:
drain the clients' messages from the inbox (each a block of requests: row lengths and token ids
as int32 arrays), gather a window, run it, send the answers. Per request the cost is a tuple in a
header; per item, a slot in numpy arrays.

A window is whole requests taken in arrival order: it closes when the ready rows fill one grown token
budget (rows x longest >= max_batch_tokens) or the item cap, or when the oldest waited `max_wait_ms`.
Its rows are length-sorted and split where one more batch costs less than the padding it saves
(`batching.plan_by_cost` on a line of forward time against padded tokens, fitted to this engine's own
batches: timed at warm-up, refitted every 32 batches; lengths rounded up to a multiple of 8), then cut
to the token budget and item cap. A window of one-input requests of mixed lengths no longer runs as one
batch padded to its longest row (measured on the H200: 125-item batches padded to the longest cost
24.5 ms in fp32). Each batch is collated with numpy indexing
(no per-row loop) and runs forward -> normalise. A batch that raises fails only the requests with a row
in it. When the window is done, every frontend gets one message with all its finished requests.
While a window runs, new requests queue in ZeroMQ; the next window takes them all.
"""

from __future__ import annotations

import logging
import pickle
import queue
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from infertune.batching import ASYNC_DEPTH, PAD_MULTIPLE, bucket_rows, fit_line, plan_batches, plan_by_cost, plan_packed
from infertune.config import Batching
from infertune.serve.errors import BatchFailed, nonfinite, to_wire

log = logging.getLogger("infertune.serve")
BEAT_S = 0.25  # the longest a busy core leaves a frontend without a message (see _beat)


class _Window:
    """The rows of one window, filled batch by batch (by the answer thread when there is one)."""

    __slots__ = ("out", "failed", "err", "bad")

    def __init__(self, out: np.ndarray, failed: np.ndarray):
        self.out, self.failed, self.err = out, failed, None
        self.bad: np.ndarray | None = None  # per row: 0 finite, 1 NaN, 2 Inf (None: every row so far finite)


def nonfinite_rows(rows: np.ndarray) -> np.ndarray | None:
    """Which rows of a batch's output hold NaN (1) or only Inf (2), 0 for a finite row; None when all are finite.
    The serving path pays one sum over the batch: a NaN or Inf anywhere makes it non-finite (an overflow of the
    sum alone only costs the per-row check, which then finds nothing)."""
    with np.errstate(all="ignore"):
        if np.isfinite(rows.sum()):
            return None
        bad = ~np.isfinite(rows).all(axis=1)
        if not bad.any():
            return None
        kind = np.zeros(len(rows), dtype=np.uint8)
        kind[bad] = np.where(np.isnan(rows[bad]).any(axis=1), 1, 2)
    return kind


class Chunk:
    """One frontend message: requests (ids, row counts) with their rows' lengths and token ids."""

    __slots__ = ("fe", "rids", "nrows", "lens", "flat", "t")

    def __init__(self, frames: list[Any]):
        self.fe, heads = pickle.loads(frames[0])
        self.rids = [r for r, _ in heads]
        self.nrows = np.fromiter((n for _, n in heads), dtype=np.int64, count=len(heads))
        self.lens = np.frombuffer(frames[1], dtype=np.int32)
        self.flat = np.frombuffer(frames[2], dtype=np.int32)
        self.t = time.perf_counter()


class BatchCore:
    def __init__(self, emb: Any, settings: Any, metrics: Any, inbox: Any, send: Any,
                 seed: list[tuple[float, float]] | None = None, index: int = 0):
        # inbox.get(timeout_s) -> the messages (frame lists) that arrived, waiting up to timeout_s for the first
        self.emb, self.s, self.m, self.inbox, self.send = emb, settings, metrics, inbox, send
        self.index = index  # this engine's index: every answer says who sent it
        # frontend -> when it last heard from this core (an answer or a heartbeat): engine_client's stall watch
        self._heard: dict[int, float] = {}
        self._beat_check = 0.0
        # forward seconds against padded tokens, fitted online: where a window splits into batches
        self.timings: deque[tuple[float, float]] = deque(seed or [], maxlen=256)
        self.cost = fit_line(self.timings) if len(self.timings) >= 4 else None
        grown = max(settings.max_batch_tokens, settings.batch_tokens)
        self.policy = Batching(kind="tokens", size=settings.batch_tokens, max_items=settings.max_batch_items)
        self.grown = Batching(kind="tokens", size=grown, max_items=settings.max_batch_items)
        self.window_rows = max(settings.max_batch_items, 1)
        self.pending: list[Chunk] = []
        self.pad_id = int(emb.pad_id)
        self.types = bool(getattr(emb, "needs_token_types", False))
        self.batches = 0
        # on a GPU every new batch shape costs CPU time in eager mode (GEMM heuristics per shape): seen on the
        # H200 as 45-50 ms batches at 8% GPU that sped up as shapes repeated; rows are rounded up to few sizes
        self.bucket = str(getattr(emb, "device", "cpu")).startswith("cuda")
        self.pad_width = getattr(emb, "pad_width", None)
        self.pad_rows = getattr(emb, "pad_rows", None)  # rows a batch really runs (CUDA graph buckets)
        self.user_wait = (getattr(settings, "sources", None) or {}).get("max_wait_ms") == "flag"
        self._q: queue.Queue | None = None  # launched batches for the answer thread (loop(), async engines)
        self._slots: threading.Semaphore | None = None
        self._last_done = 0.0

    def wait_s(self) -> float:
        """How long a window waits for more work after its first item. A packed engine (a batch costs its real
        tokens, CUDA graphs make its launch cheap) does not wait unless --max-wait-ms says so: work queues up
        while the device runs, as in continuous batching. A tuned wait left the GPU idle after every batch that
        had taken all waiting requests (docs/measurements/2026-12-01-h200-packed-embeddings, run 3)."""
        if getattr(self.emb, "packed", False) and not self.user_wait:
            return 0.0
        return self.s.max_wait_ms / 1000

    # --- intake ------------------------------------------------------------------------------------------
    def _drain(self, timeout_s: float) -> None:
        for frames in self.inbox.get(max(0.0, timeout_s)):
            try:
                self.pending.append(c := Chunk(frames))
                self._heard.setdefault(c.fe, time.perf_counter())
            except Exception:  # noqa: BLE001 - a malformed message is logged; the engine goes on
                log.exception("could not read a message from a frontend")

    def _window(self, stop: Any) -> list[Chunk] | None:
        """Block for work, then gather until the window is full or the oldest item waited max_wait_ms."""
        while not self.pending:
            if stop.is_set():
                return None
            self._drain(0.1)
        deadline = self.pending[0].t + self.wait_s()
        rows, longest, seen = 0, 0, 0
        while True:
            for c in self.pending[seen:]:  # only the messages this drain added (many small ones under load)
                if len(c.lens):
                    rows += len(c.lens)
                    longest = max(longest, int(c.lens.max()))
            seen = len(self.pending)
            if rows * longest >= self.grown.size or rows >= self.window_rows:
                break
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            self._drain(left)
        self._drain(0)
        taken, rows = [], 0
        while self.pending and (not taken or rows < 4 * self.window_rows):
            c = self.pending.pop(0)
            taken.append(c)
            rows += len(c.lens)
        return taken

    def grown_budget(self) -> Batching:
        """The budget a window under load may grow its batches to: the under-load budget, but no larger than the
        engine's CUDA graphs while they are on. A batch past them runs eagerly, a Python call per module on the
        engine's one thread, which then bounds serving (docs/measurements/2026-12-01-h200-tokie, run 2)."""
        on = getattr(self.emb, "on", False)
        cap = getattr(self.emb, "max_tokens", None) if on else None
        if not cap or self.grown.size <= cap:
            return self.grown
        return Batching(kind="tokens", size=max(self.policy.size, int(cap)), max_items=self.s.max_batch_items)

    # --- one window ------------------------------------------------------------------------------------------
    def run_window(self, chunks: list[Chunk]) -> None:
        now = time.perf_counter()
        for c in chunks:
            self.m.stage_seconds.labels("queue").observe(now - c.t)
        lens = np.concatenate([c.lens for c in chunks]).astype(np.int64)
        flat = np.concatenate([c.flat for c in chunks])
        starts = np.cumsum(lens) - lens
        padded = -(-lens // PAD_MULTIPLE) * PAD_MULTIPLE
        if self.pad_width is not None:  # the engine runs batches at its own widths (CUDA graph buckets)
            padded = np.fromiter((self.pad_width(int(n)) for n in padded), dtype=np.int64, count=len(padded))
        out = np.empty((len(lens), self.emb.spec.dim), dtype=np.float32)
        failed = np.zeros(len(lens), dtype=bool)
        grown = self.grown_budget()
        if getattr(self.emb, "packed", False):  # padding-free batches (engines/packed_graphs.py): real tokens
            padded = lens
            plan = plan_packed(lens.tolist(), self.policy.size, self.s.max_batch_items)
            if len(plan) > 1 and grown.size > self.policy.size:  # under load: fewer, larger batches, as the
                # padded path does (a packed forward runs more items/s in the larger batches)
                plan = plan_packed(lens.tolist(), grown.size, self.s.max_batch_items)
        elif self.cost is not None:  # the split that the measured cost line says is fastest
            plan = plan_by_cost(padded.tolist(), grown, *self.cost, rows=self.pad_rows)
        else:
            plan = plan_batches(padded.tolist(), self.policy, self.s.max_padding)
            if len(plan) > 1 and grown.size > self.policy.size:  # under load: fewer, larger batches
                plan = plan_batches(padded.tolist(), grown, self.s.max_padding)
        # a request is answered as soon as the batch holding its last row is done, not at the end of the window:
        # its client can send the next one while the window's other batches run (closed-loop clients keep the
        # device fed); a multi-input request whose rows span batches waits for the last of them
        row_batch = np.zeros(len(lens), dtype=np.int64)
        for k, b in enumerate(plan):
            row_batch[np.asarray(b, dtype=np.int64)] = k
        due: dict[int, list[tuple[int, Any, int, int]]] = {}
        row = 0
        for c in chunks:
            for rid, n in zip(c.rids, c.nrows.tolist(), strict=True):
                last = int(row_batch[row:row + n].max()) if n else 0
                due.setdefault(last, []).append((c.fe, rid, row, row + n))
                row += n
        win = _Window(out, failed)
        for k, b in enumerate(plan):
            idx = np.asarray(b, dtype=np.int64)
            handle, t0, ran = None, 0.0, 0
            if self._slots is not None:
                self._slots.acquire()  # at most ASYNC_DEPTH batches launched and not yet collected
            try:
                batch = self._collate(idx, lens, starts, flat, int(padded[idx].max()))
                t0 = time.perf_counter()
                handle = self.emb.launch(batch)
                # tokens the engine really ran: a packed engine says (real plus graph filler), else the padded batch
                ran = int(getattr(self.emb, "ran_tokens", 0) or batch["input_ids"].size)
            except Exception as e:  # noqa: BLE001 - this batch's requests fail, the engine goes on
                self._failed(win, idx, e)
            self._finish((win, idx, handle, t0, ran, int(lens[idx].sum()), due.pop(k, [])))
        for rest in due.values():  # a window with no rows to run (nothing planned)
            self._finish((win, None, None, 0.0, 0, 0, rest))

    # --- answers: inline, or on the answer thread while the device runs the next batch ----------------------
    def _finish(self, item: tuple) -> None:
        if self._q is not None:
            self._q.put(item)
        else:
            self._complete(item)

    def _complete(self, item: tuple) -> None:
        """Wait for a launched batch, normalise its rows into the window, answer the requests due with it."""
        win, idx, handle, t0, ran, real, due = item
        pooled, error = None, None
        try:
            if handle is not None:
                pooled = self.emb.collect(handle)
        except Exception as e:  # noqa: BLE001 - this batch's requests fail, the engine goes on
            error = e
        finally:
            if idx is not None and self._slots is not None:
                self._slots.release()  # the device is done with it: the loop may launch another
        if error is not None:
            self._failed(win, idx, error)
        elif pooled is not None:
            now = time.perf_counter()
            # the device's time for this batch: from its launch, or from the previous batch's end if it queued
            # behind it (batches overlap the host's work, not each other)
            took = now - max(t0, self._last_done)
            self._last_done = now
            self.m.stage_seconds.labels("forward").observe(took)
            self.timings.append((float(ran), took))
            got = pooled[:len(idx)]
            if (kind := nonfinite_rows(got)) is not None:  # never answered: their requests get a NonFinite
                self._nonfinite(win, idx, kind)
                got = np.where(kind[:, None] > 0, np.float32(0), got)  # (zeros: normalising them is quiet)
            win.out[idx] = self.emb.postprocess(got)
            self.m.observe_batch(len(idx), ran, real)
            self.batches += 1
            if self.batches % 32 == 0 and len(self.timings) >= 4:
                self.cost = fit_line(self.timings)
        self._answer(due, win)
        self._beat()

    def _beat(self) -> None:
        """A heartbeat to every frontend that heard nothing from this core for BEAT_S while it made progress:
        a frontend's requests may wait behind other frontends' work for longer than its stall limit."""
        now = time.perf_counter()
        if now - self._beat_check < BEAT_S / 4:
            return
        self._beat_check = now
        for fe, heard in list(self._heard.items()):
            if now - heard >= BEAT_S:
                self._heard[fe] = now
                self.send(fe, [pickle.dumps((self.index, []), protocol=5), b""])

    def _failed(self, win: _Window, idx: np.ndarray, e: Exception) -> None:
        log.error("forward pass failed: %s: %s", type(e).__name__, e, exc_info=e)
        self.m.batch_failures.inc()
        win.failed[idx] = True
        win.err = to_wire(BatchFailed(f"the batch holding this request failed: {type(e).__name__}: {e}"))

    def _nonfinite(self, win: _Window, idx: np.ndarray, kind: np.ndarray) -> None:
        n = int(np.count_nonzero(kind))
        self.m.nonfinite_rows.inc(n)
        if win.bad is None:
            win.bad = np.zeros(len(win.failed), dtype=np.uint8)
        win.bad[idx] = kind
        log.warning("%d of %d rows of a batch had NaN or Inf values: not returned, their requests get a 500", n,
                    len(idx))

    def _answer_loop(self) -> None:
        while (item := self._q.get()) is not None:
            try:
                self._complete(item)
            except Exception:  # noqa: BLE001 - never let one answer kill the thread
                log.exception("answering a batch failed")

    def _collate(self, idx: np.ndarray, lens: np.ndarray, starts: np.ndarray, flat: np.ndarray,
                 width: int) -> dict[str, np.ndarray]:
        bl = lens[idx]
        mask = np.arange(width)[None, :] < bl[:, None]
        total = int(bl.sum())
        # source position of every real token, row by row: the row's start plus 0..len-1
        offs = np.repeat(starts[idx] - (np.cumsum(bl) - bl), bl) + np.arange(total)
        ids = np.full((len(idx), width), self.pad_id, dtype=np.int64)
        ids[mask] = flat[offs]
        # the engine's own row buckets when it has them (CUDA graphs), else few sizes on a GPU
        rows = self.pad_rows(len(idx)) if self.pad_rows else bucket_rows(len(idx)) if self.bucket else len(idx)
        if rows > len(idx):  # filler rows (one attended pad token each, no NaN); their outputs are dropped
            ids = np.concatenate([ids, np.full((rows - len(idx), width), self.pad_id, dtype=np.int64)])
            mask = np.concatenate([mask, np.arange(width)[None, :].repeat(rows - len(idx), 0) < 1])
        batch = {"input_ids": ids, "attention_mask": mask.astype(np.int64)}
        if self.types:
            batch["token_type_ids"] = np.zeros_like(ids)
        return batch

    def _answer(self, reqs: list[tuple[int, Any, int, int]], win: _Window) -> None:
        """Send each frontend one message with these requests (frontend, id, first row, end row): rows, or the
        error of a failed batch that held one of their rows, or the inputs whose rows were not finite."""
        if not reqs:
            return
        t0 = time.perf_counter()
        out, failed, err, bad = win.out, win.failed, win.err, win.bad
        by_fe: dict[int, tuple[list, list]] = {}
        for fe, rid, a, b in reqs:
            heads, blocks = by_fe.setdefault(fe, ([], []))
            if err is not None and failed[a:b].any():
                heads.append((rid, None, err))
            elif bad is not None and bad[a:b].any():
                rows = [(i, "NaN" if k == 1 else "Inf") for i, k in enumerate(bad[a:b].tolist()) if k]
                heads.append((rid, None, to_wire(nonfinite(rows))))
            else:
                heads.append((rid, b - a, None))
                blocks.append((a, b))
        for fe, (heads, blocks) in by_fe.items():
            body = np.concatenate([out[a:b] for a, b in blocks]) if blocks else np.empty((0, out.shape[1]), np.float32)
            self.send(fe, [pickle.dumps((self.index, heads), protocol=5), body.tobytes()])
            self._heard[fe] = t0
        self.m.stage_seconds.labels("postprocess").observe(time.perf_counter() - t0)

    def loop(self, stop: Any) -> None:
        """Run windows until `stop` is set and nothing is left. An engine whose launches return before the
        device is done (CUDA) answers on a second thread, so collating, launching and gathering the next
        batches overlap the device's work on this one."""
        thread = None
        if getattr(self.emb, "async_launch", False):
            self._q, self._slots = queue.Queue(), threading.Semaphore(ASYNC_DEPTH)
            thread = threading.Thread(target=self._answer_loop, name="infertune-engine-answers", daemon=True)
            thread.start()
        try:
            while (chunks := self._window(stop)) is not None:
                try:
                    self.run_window(chunks)
                except Exception:  # noqa: BLE001 - never let one window kill the engine
                    log.exception("a batch window failed")
        finally:
            if thread is not None:
                self._q.put(None)
                thread.join()
                self._q = self._slots = None
