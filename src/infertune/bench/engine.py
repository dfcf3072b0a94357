"""The load generator: an asyncio loop (uvloop when installed) per worker process.

Open loop (rate): every request has a precomputed send time; the dispatcher starts each one when due
and never waits for answers, so a stalled server cannot slow the schedule down (no coordinated
omission). Latency is taken from the *scheduled* time, so time a request spent waiting behind a slow
client or server is counted. Closed loop (concurrency): N streams, each sends when its last answer
came back. Each worker also measures its own lag and CPU so the parent can tell a slow client from a
slow server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from infertune.bench.client import request

HEARTBEAT_S = 0.005


def use_lean(spec: dict[str, Any]) -> bool:
    """The lean client (bench/lean.py) for non-streamed requests unless aiohttp was asked for; it needs
    httptools, else aiohttp serves."""
    if spec.get("stream") or spec.get("http_client", "auto") == "aiohttp":
        return False
    try:
        import httptools  # noqa: F401
    except ImportError:
        return False
    return True


def _raise_nofile() -> None:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


async def _heartbeat(stop: float, out: list[float]) -> None:
    now = time.monotonic
    while True:
        t = now()
        if t >= stop:
            return
        await asyncio.sleep(HEARTBEAT_S)
        out.append(now() - t - HEARTBEAT_S)


async def run_point(spec: dict[str, Any], bodies: list[bytes], in_tokens: list[int]) -> dict[str, Any]:
    """Run this worker's share of one load point; returns raw records and self-check samples."""
    mode, t0 = spec["mode"], spec["t0"]
    stop = t0 + spec["warmup"] + spec["duration"]
    records: list[tuple] = []
    beats: list[float] = []
    unsent: list[float] = []  # scheduled send times never sent
    capped = False
    cpu0, wall0 = time.process_time(), time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        send = await _sender(spec, stack, bodies, in_tokens)
        await asyncio.sleep(max(0.0, t0 - time.monotonic()))
        hb = asyncio.ensure_future(_heartbeat(stop, beats))
        if mode == "rate":
            unsent, capped = await _open_loop(spec, send, records, stop, len(bodies))
        else:
            await _closed_loop(spec, send, records, stop, len(bodies))
        hb.cancel()
    wall = time.monotonic() - wall0
    return {"records": records, "beats": beats, "cpu": time.process_time() - cpu0, "wall": wall, "pid": os.getpid(),
            "unsent": unsent, "capped": capped}


async def _sender(spec: dict[str, Any], stack: contextlib.AsyncExitStack, bodies: list[bytes],
                  in_tokens: list[int]) -> Callable[[int, float], Awaitable[tuple]]:
    """send(j, sched): post body j scheduled at `sched` and return its record, through the lean client or an
    aiohttp session (closed with `stack`)."""
    import aiohttp

    url, api, stream = spec["url"], spec["api"], spec["stream"]
    limit = spec["concurrency"] if spec["mode"] == "concurrency" else spec["max_connections"]
    headers = {"Content-Type": "application/json", **spec.get("headers", {})}
    if use_lean(spec):
        from infertune.bench.lean import LeanClient

        lean = LeanClient(url, headers, spec["timeout"], limit)
        stack.callback(lean.close)

        def send(j: int, sched: float):
            return lean.request(j, bodies[j], api, sched, in_tokens[j])
    else:
        conn = aiohttp.TCPConnector(limit=limit, limit_per_host=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=spec["timeout"], sock_connect=min(10.0, spec["timeout"]))
        session = await stack.enter_async_context(aiohttp.ClientSession(
            connector=conn, timeout=timeout, headers=headers, auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar()))

        def send(j: int, sched: float):
            return request(session, url, bodies[j], api, stream, sched, in_tokens[j], {})
    return send


async def _open_loop(spec: dict[str, Any], send, records: list[tuple], stop: float,
                     nb: int) -> tuple[list[float], bool]:
    """Start every request at its scheduled time without waiting for answers; returns (the scheduled times never
    sent, whether the in-flight cap held sends back)."""
    t0, off = spec["t0"], spec["body_offset"]
    offsets = spec["offsets"]
    tasks = set()
    loop_now = time.monotonic
    i, n = 0, len(offsets)
    capped = False

    stride = spec["stride"]

    async def one(k: int, sched: float) -> None:
        j = (off + k * stride) % nb
        records.append(await send(j, sched))

    cap = spec["max_connections"]  # requests in flight; beyond it the schedule slips (and is flagged)
    hard_stop = stop + 1.0  # what is still unsent a second after the window is dropped (and flagged)
    while i < n:
        now = loop_now()
        if now > hard_stop:
            break
        if len(tasks) >= cap:
            capped = True
            await asyncio.sleep(0.001)
            continue
        due = t0 + offsets[i]
        if due > now:
            # wake at most every ms: at thousands of req/s one wake-up sends a small batch, which
            # costs <= 1 ms of (measured) lag instead of a timer per request
            await asyncio.sleep(max(due - now, 0.001))
            continue
        while i < n and t0 + offsets[i] <= now and len(tasks) < cap:  # all that is due (or overdue)
            task = asyncio.ensure_future(one(i, t0 + offsets[i]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        await asyncio.sleep(0)
    unsent = [t0 + x for x in offsets[i:]]
    if tasks:
        await asyncio.wait(tasks, timeout=spec["timeout"] + 5)
        for t in tasks:
            t.cancel()
    return unsent, capped


async def _closed_loop(spec: dict[str, Any], send, records: list[tuple], stop: float, nb: int) -> None:
    """--concurrency streams, each sending its next request when the last one is answered, until `stop`."""
    off = spec["body_offset"]
    counter = [0]
    cap = spec["max_requests"]  # measured requests for this worker, or None
    measure_from = spec["t0"] + spec["warmup"]

    async def stream_loop(s: int) -> None:
        k = s
        while True:
            sched = time.monotonic()
            if sched >= stop or (cap is not None and counter[0] >= cap):
                return
            if sched >= measure_from:
                counter[0] += 1
            j = (off + k) % nb
            k += spec["concurrency"]
            records.append(await send(j, sched))

    await asyncio.gather(*(stream_loop(s) for s in range(spec["concurrency"])))


def _install_uvloop() -> str:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return "uvloop"
    except ImportError:
        return "asyncio"


def _worker_main(conn, bodies: list[bytes], in_tokens: list[int]) -> None:
    _raise_nofile()
    # A forked worker inherits its parent's whole heap (inside pytest or a notebook, millions of
    # objects). Nothing of it is freed here, but every full collection would walk it, pausing the send
    # loop for tens of ms. Freezing moves it out of the collector's sight (and spares copy-on-write).
    gc.freeze()
    loop_name = _install_uvloop()
    conn.send({"ready": True, "loop": loop_name, "pid": os.getpid()})
    while True:
        try:
            spec = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if spec is None:
            return
        try:
            conn.send(asyncio.run(run_point(spec, bodies, in_tokens)))
        except Exception as e:  # report, don't hang the parent
            conn.send({"error": f"{type(e).__name__}: {e}"})


class WorkerPool:
    """Long-lived load processes (forked once, so the request bodies are shared, not pickled)."""

    def __init__(self, n: int, bodies: list[bytes], in_tokens: list[int]):
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        self.procs, self.conns = [], []
        for _ in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(child, bodies, in_tokens), daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
        hello = [c.recv() for c in self.conns]
        self.loop = hello[0]["loop"]

    def __len__(self) -> int:
        return len(self.procs)

    def run(self, specs: list[dict[str, Any]], deadline_s: float) -> list[dict[str, Any]]:
        """Send one spec per worker (None = idle) and collect results; bounded by deadline_s."""
        active = [(c, s) for c, s in zip(self.conns, specs, strict=False) if s is not None]
        for c, s in active:
            c.send(s)
        out = []
        end = time.monotonic() + deadline_s
        for c, _ in active:
            if not c.poll(max(0.1, end - time.monotonic())):
                self.close()
                raise RuntimeError(f"a load worker did not finish within {deadline_s:.0f} s")
            out.append(c.recv())
        return out

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.procs, self.conns = [], []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
