"""An engine process of multi-process `serve`: one per device, it owns the model and the batching.

It loads and warms the model, reports ("ready", info) to the launcher over a pipe (the info carries the
tokenizer, so frontends never load weights), then takes tokenized requests from every frontend on one
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


def _error(e: BaseException) -> tuple[int, str, str, str | None]:
    status = getattr(e, "status", 500)
    return (status, getattr(e, "message", None) or str(e), getattr(e, "type", "server_error"),
            getattr(e, "code", None))


def engine_main(conn: Any, index: int, model: str, device: str, threads: int | None, warmup: list[str],
                run_dir: str, settings: dict[str, Any], restarts: int, load_opts: dict[str, Any] | None = None) -> None:
    """The engine process (a multiprocessing target)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    if device.startswith("cuda:"):  # one GPU per engine: it sees only its own, as cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
        device = "cuda"
    try:
        import zmq

        from infertune.serve.config import Settings
        from infertune.serve.engine import warm_shapes
        from infertune.serve.metrics import Metrics
        from infertune.serve.transport import engine_addr

        t0 = time.perf_counter()
        if device == "cpu":
            from infertune.serve.memory import bound_cpu_memory

            bound_cpu_memory()
        if threads or device == "cuda":  # a GPU engine launches kernels: one CPU thread (launcher.ONE_THREAD)
            import torch

            torch.set_num_threads(threads or 1)
        from infertune.artifact import load_model

        emb = load_model(model, device, **(load_opts or {}))
        if device == "cuda":
            from infertune.backends.graphs import with_graphs

            emb, graphs = with_graphs(emb, settings.get("cuda_graphs", "auto"),
                                      int(settings.get("batch_tokens") or 16384))
            print(f"engine {index}: {graphs}", file=sys.stderr, flush=True)
        metrics = Metrics()
        if restarts:
            metrics.worker_restarts.inc()
        warm = sorted(emb.token_ids(warmup), key=len)
        for rows in (warm[:4], warm[-2:], warm[:1]):
            emb.postprocess(emb.forward(emb.collate(rows)))
        emb.synchronize()
        if emb.compiles_per_shape:
            warm_shapes(emb, warm)
        if hasattr(emb, "precapture"):
            got = emb.precapture()
            print(f"engine {index}: captured {got['captured']} of {got['shapes']} usual batch shapes "
                  f"in {got['seconds']} s", file=sys.stderr, flush=True)
        seed = _time_batches(emb, warm, int(settings.get("max_batch_tokens") or settings.get("batch_tokens") or 4096))
        settings = Settings(**settings)
        ctx = zmq.Context()
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.bind(engine_addr(run_dir, index))
        try:
            desc = {k: v for k, v in emb.describe().items() if k != "leaf_modules"}
        except Exception:  # noqa: BLE001
            desc = {}
        tok = emb.tokenizer
        conn.send(("ready", {"pid": os.getpid(), "spec": emb.spec, "tokenizer": tok, "pad_id": emb.pad_id,
                             "needs_token_types": emb.needs_token_types, "describe": desc, "device": device,
                             "load_s": round(time.perf_counter() - t0, 2),
                             "vocab_size": len(tok) if hasattr(tok, "__len__") else
                             int(getattr(tok, "vocab_size", 2**31 - 1))}))
        metrics.ready.set(1)
        metrics.worker_up.set(1)
    except BaseException as e:  # noqa: BLE001 - reported to the launcher, which decides
        try:
            conn.send(("load_error", f"{type(e).__name__}: {e}"))
        except (OSError, ValueError):
            pass
        return
    _serve_loop(conn, ctx, pull, emb, settings, metrics, run_dir, seed)


def _time_batches(emb: Any, rows: list[list[int]], budget: int, max_s: float = 3.0) -> list[tuple[float, float]]:
    """(padded tokens, seconds) of a few warm batches of different sizes: the first cost line. Batches stay
    within the engine's token budget (it never runs a bigger one), and timing stops after `max_s` once three
    sizes are measured: a slow model (or device) starts in seconds, not the half minute that every warm
    text in one batch cost a slow fake engine."""
    longest = max(len(r) for r in rows)
    most = max(1, min(len(rows), budget // max(1, longest)))
    sizes = sorted({1, max(1, most // 4), most})
    out: list[tuple[float, float]] = []
    start = time.perf_counter()
    for _ in range(2):
        for k in sizes:
            batch = emb.collate(rows[-k:])
            t0 = time.perf_counter()
            emb.postprocess(emb.forward(batch))
            emb.synchronize()
            out.append((float(batch["input_ids"].size), time.perf_counter() - t0))
            if len(out) >= max(4, len(sizes)) and time.perf_counter() - start > max_s:
                return out
    return out


def _serve_loop(conn: Any, ctx: Any, pull: Any, emb: Any, settings: Any, metrics: Any, run_dir: str,
                seed: list[tuple[float, float]]) -> None:
    import zmq

    from infertune.serve.batch_core import BatchCore
    from infertune.serve.transport import frontend_addr

    socks: dict[int, Any] = {}
    stop = threading.Event()

    def send(fe: int, frames: list[bytes]) -> None:
        sock = socks.get(fe)
        if sock is None:
            sock = socks[fe] = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.connect(frontend_addr(run_dir, fe))
        sock.send_multipart(frames, copy=False)

    def watch_launcher() -> None:
        try:
            while conn.recv() is not None:
                pass
        except (EOFError, OSError):
            pass
        stop.set()

    threading.Thread(target=watch_launcher, name="infertune-engine-control", daemon=True).start()
    core = BatchCore(emb, settings, metrics, pull, send, seed)
    if core.wait_s() != settings.max_wait_ms / 1000:
        print(f"engine: packed batches start as soon as the device is free (no {settings.max_wait_ms} ms "
              "batching wait; --max-wait-ms sets one)", file=sys.stderr, flush=True)
    metrics.watch_queue("batch", lambda: float(sum(len(c.lens) for c in list(core.pending))))
    core.loop(stop)
    if getattr(emb, "stats", None):  # CUDA graphs: how many shapes were captured and how batches ran
        print(f"engine: {core.batches} batches; CUDA graphs {emb.stats}", file=sys.stderr, flush=True)
    for s in socks.values():
        s.close()
    pull.close()
    ctx.term()
    sys.stdout.flush()
