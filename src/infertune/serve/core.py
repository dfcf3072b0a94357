"""An engine process of multi-process `serve`: one per device, it owns the model and runs the batch core.

It loads and warms the model (engine_setup.load_engine, as the in-process server does), reports
("ready", info) to the launcher over a pipe (the info carries the tokenizer, so frontends never load
weights), then takes tokenized requests from every frontend on one
ZeroMQ PULL socket into `batch_core.BatchCore`: one thread that gathers a window of requests, runs its
batches and sends each frontend its finished requests as float32 rows (the frontend renders the JSON).

The launcher stops an engine by sending None on the pipe (or closing it): the engine answers everything it
took, then exits. SIGINT/SIGTERM are ignored here: a Ctrl-C reaches the whole process group, and the
launcher, not the terminal, decides when the engines stop (after the frontends have drained).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

log = logging.getLogger("infertune.serve")


def engine_main(conn: Any, index: int, model: str, device: str, threads: int | None, warmup: list[str],
                run_dir: str, settings: dict[str, Any], restarts: int, load_opts: dict[str, Any] | None = None,
                restart_t0: float | None = None) -> None:
    """The engine process (a multiprocessing target). `restart_t0`: when the launcher saw the previous engine
    die (time.time()), so the restart's duration is a metric."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    if device.startswith("cuda:"):  # one GPU per engine: it sees only its own, as cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
        device = "cuda"
    try:
        import zmq

        from infertune.serve.batch_core import BatchCore
        from infertune.serve.config import Settings
        from infertune.serve.engine_setup import load_engine
        from infertune.serve.metrics import Metrics
        from infertune.serve.transport import ZmqInbox, engine_addr

        metrics = Metrics()
        if restarts:
            metrics.worker_restarts.inc()
        loaded = load_engine(model, device, settings, threads=threads, warmup=warmup, load_opts=load_opts,
                             own_process=True, who=f"engine {index}")
        ctx = zmq.Context()
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.bind(engine_addr(run_dir, index))
        out = _Outbox(ctx, run_dir)
        core = BatchCore(loaded.emb, Settings(**settings), metrics, ZmqInbox(pull), out.send, loaded.seed,
                         index=index)
        conn.send(("ready", {**loaded.info, "batch_core": f"{type(core).__module__}.{type(core).__qualname__}"}))
        metrics.ready.set(1)
        metrics.worker_up.set(1)
        metrics.watch_worker(os.getpid)
        if restart_t0 is not None:
            metrics.worker_restart_seconds.set(round(time.time() - restart_t0, 3))
    except BaseException as e:  # noqa: BLE001 - reported to the launcher, which decides
        try:
            conn.send(("load_error", f"{type(e).__name__}: {e}"))
        except (OSError, ValueError):
            pass
        return
    _serve_loop(conn, core, metrics)
    out.close()
    pull.close()
    ctx.term()
    sys.stdout.flush()


class _Outbox:
    """PUSH sockets to the frontends, opened on first use."""

    def __init__(self, ctx: Any, run_dir: str):
        self.ctx, self.run_dir = ctx, run_dir
        self.socks: dict[int, Any] = {}

    def send(self, fe: int, frames: list[bytes]) -> None:
        sock = self.socks.get(fe)
        if sock is None:
            sock = self.socks[fe] = self._connect(fe)
        sock.send_multipart(frames, copy=False)

    def _connect(self, fe: int) -> Any:
        import zmq

        from infertune.serve.transport import frontend_addr

        sock = self.ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(frontend_addr(self.run_dir, fe))
        return sock

    def close(self) -> None:
        for s in self.socks.values():
            s.close()


def _serve_loop(conn: Any, core: Any, metrics: Any) -> None:
    """Run the core until the launcher says stop (None on the pipe, or the pipe closes)."""
    stop = threading.Event()

    def watch_launcher() -> None:
        try:
            while conn.recv() is not None:
                pass
        except (EOFError, OSError):
            pass
        stop.set()

    threading.Thread(target=watch_launcher, name="infertune-engine-control", daemon=True).start()
    if core.wait_s() != core.s.max_wait_ms / 1000:
        print(f"engine: packed batches start as soon as the device is free (no {core.s.max_wait_ms} ms "
              "batching wait; --max-wait-ms sets one)", file=sys.stderr, flush=True)
    metrics.watch_queue("batch", lambda: float(sum(len(c.lens) for c in list(core.pending))))
    core.loop(stop)
    if getattr(core.emb, "stats", None):  # CUDA graphs: how many shapes were captured and how batches ran
        print(f"engine: {core.batches} batches; CUDA graphs {core.emb.stats}", file=sys.stderr, flush=True)
