"""An engine process of multi-process `serve`: one per device, it owns the model and the batching.

It loads and warms the model, reports ("ready", info) to the launcher over a pipe (the info carries the
tokenizer, so frontends never load weights), then takes tokenized requests from every frontend on one
ZeroMQ PULL socket and feeds them to the same `Engine` the single-process server runs (batcher, forward,
post-process threads), raw: finished requests go back as float32 rows, and the frontend that sent them
renders the JSON. A sender thread owns the PUSH sockets back to the frontends (ZeroMQ sockets are not
thread-safe) and sends every request finished since its last send in one message per frontend.

The launcher stops an engine by sending None on the pipe (or closing it): the engine answers everything it
took, then exits. SIGINT/SIGTERM are ignored here: a Ctrl-C reaches the whole process group, and the
launcher, not the terminal, decides when the engines stop (after the frontends have drained).
"""

from __future__ import annotations

import logging
import os
import queue
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
                run_dir: str, settings: dict[str, Any], restarts: int) -> None:
    """The engine process (a multiprocessing target)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    if device.startswith("cuda:"):  # one GPU per engine: it sees only its own, as cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
        device = "cuda"
    try:
        import zmq

        from infertune.serve.config import Settings
        from infertune.serve.engine import Engine
        from infertune.serve.metrics import Metrics
        from infertune.serve.transport import engine_addr

        t0 = time.perf_counter()
        if device == "cpu":
            from infertune.serve.memory import bound_cpu_memory

            bound_cpu_memory()
        if threads:
            import torch

            torch.set_num_threads(threads)
        from infertune.artifact import load_model

        emb = load_model(model, device)
        metrics = Metrics()
        if restarts:
            metrics.worker_restarts.inc()
        engine = Engine(emb, Settings(**settings), metrics, max_queue=1 << 20, truncate=True, raw=True)
        engine.warmup(warmup)
        engine.start()
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
    _serve_loop(conn, ctx, pull, engine, run_dir)


def _serve_loop(conn: Any, ctx: Any, pull: Any, engine: Any, run_dir: str) -> None:
    import zmq

    from infertune.serve.schema import EmbeddingRequest
    from infertune.serve.transport import frontend_addr, pack_results, unpack_requests

    out: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()

    def done(job: Any, result: Any, error: BaseException | None) -> None:
        out.put((job.tag, result, None if error is None else _error(error)))

    def send_loop() -> None:
        socks: dict[int, Any] = {}
        while (first := out.get()) is not None:
            got = [first]
            while True:
                try:
                    nxt = out.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    out.put(None)
                    break
                got.append(nxt)
            by_fe: dict[int, list] = {}
            for (fe, rid), rows, err in got:
                by_fe.setdefault(fe, []).append((rid, rows, err))
            for fe, res in by_fe.items():
                sock = socks.get(fe)
                if sock is None:
                    sock = socks[fe] = ctx.socket(zmq.PUSH)
                    sock.setsockopt(zmq.LINGER, 1000)
                    sock.setsockopt(zmq.SNDHWM, 0)
                    sock.connect(frontend_addr(run_dir, fe))
                sock.send_multipart(pack_results(res), copy=False)
        for s in socks.values():
            s.close()

    def watch_launcher() -> None:
        try:
            while conn.recv() is not None:
                pass
        except (EOFError, OSError):
            pass
        stop.set()

    sender = threading.Thread(target=send_loop, name="infertune-engine-send", daemon=True)
    sender.start()
    threading.Thread(target=watch_launcher, name="infertune-engine-control", daemon=True).start()
    while not stop.is_set():
        if not pull.poll(100):
            continue
        try:
            fe, reqs = unpack_requests(pull.recv_multipart())
        except Exception:  # noqa: BLE001 - a malformed message is logged, the engine goes on
            log.exception("could not read a message from a frontend")
            continue
        for rid, rows in reqs:
            engine.submit_nowait(EmbeddingRequest(None, rows, "", "float"), done, tag=(fe, rid))
    engine.stop()  # answers everything already taken
    out.put(None)
    sender.join(10)
    pull.close()
    ctx.term()
    sys.stdout.flush()
