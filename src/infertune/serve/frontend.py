"""A frontend process of multi-process `serve`: HTTP, validation, tokenization and rendering.

Every frontend binds its own listening socket to the same port with SO_REUSEPORT (the kernel spreads new
connections over them), runs the same FastAPI app as the single-process server, and talks to the engine
processes through an `EngineClient`. The launcher tells it, over a pipe, when the engines are ready (with
the tokenizer and the model's spec, so no frontend loads weights) and when one goes down or comes back.

SIGTERM/SIGINT start the drain (app.draining_server): /ready fails, connections are still accepted for
--drain-s, then everything accepted is answered and the process exits. The launcher forwards its own
SIGTERM here; if the launcher dies (its pipe closes) the frontend stops the same way.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import Any


def frontend_main(conn: Any, index: int, cfg_json: str, settings_json: str, served: list[str], port: int,
                  run_dir: str, engines: int) -> None:
    """The frontend process (a multiprocessing target)."""
    import os

    # N frontends each with a tokenizer thread pool the size of the machine oversubscribe the cores;
    # a frontend tokenizes one request's texts at a time, and the frontends are the parallelism
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import uvicorn

    from infertune.serve.config import ServeConfig, Settings
    from infertune.serve.http import State, bind_tcp, capture_loop, create_app, draining_server
    from infertune.serve.metrics import Metrics

    cfg = ServeConfig.model_validate_json(cfg_json)
    st = State(cfg, Settings.model_validate_json(settings_json), served, Metrics())
    st.topology = {"mode": "processes", "frontend": index, "frontends": cfg.frontends, "engines": []}
    sock = bind_tcp(cfg.host, port, reuse_port=True)
    server = draining_server(uvicorn.Config(
        create_app(st), log_level=cfg.log_level, access_log=False, lifespan="on",
        timeout_graceful_shutdown=cfg.graceful_timeout_s, timeout_keep_alive=30, proxy_headers=False), st, cfg.drain_s)
    st.server = server
    loop_box, started = capture_loop(server)
    threading.Thread(target=_control, args=(conn, st, server, loop_box, started, index, run_dir, engines),
                     name="infertune-frontend-control", daemon=True).start()
    for s in (signal.SIGTERM, signal.SIGINT):  # uvicorn re-raises the caught signal after its shutdown
        signal.signal(s, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if st.engine is not None:
            st.engine.close()


def _control(conn: Any, st: Any, server: Any, loop_box: list, started: threading.Event, index: int,
             run_dir: str, engines: int) -> None:
    """Apply what the launcher says: engines ready (with the tokenizer), an engine down or up, drain."""
    from infertune.engines.base import Embedder
    from infertune.serve.engine_client import EngineClient
    from infertune.serve.transport import ZmqLink

    started.wait()
    loop = loop_box[0]
    pending: tuple[Any, Any, dict[str, Any]] | None = None
    try:
        while True:
            msg = conn.recv()
            kind = msg[0]
            if kind == "ready":  # make the client, then wait for "open": every frontend opens at once
                info = msg[1]
                emb = Embedder(info["spec"], info["tokenizer"], "cpu")
                emb.describe = lambda d=info["describe"]: d  # type: ignore[method-assign]
                client = EngineClient(emb, index, ZmqLink(run_dir, index, engines), st.metrics,
                                      max_queue=st.cfg.max_queue, truncate=st.cfg.truncate,
                                      stall_s=st.cfg.worker_timeout_s, max_wait_s=st.settings.max_wait_s)
                asyncio.run_coroutine_threadsafe(client.start(), loop).result(30)
                pending = (emb, client, info)
                conn.send(("armed", index))
            elif kind == "open" and pending is not None:
                emb, client, info = pending
                st.topology = {**st.topology, "batch_core": info.get("batch_core")}
                st.vocab_size = info["vocab_size"]
                st.embedder, st.load_s = emb, info["load_s"]
                st.engine = client
                st.metrics.ready.set(1)
            elif kind == "engines":
                st.topology = topology(st.topology, msg[1])
                if st.engine is not None:
                    for i, e in enumerate(msg[1]):
                        loop.call_soon_threadsafe(st.engine.set_engine, i, e["up"], e.get("last_exit") or "",
                                                  e.get("pid"))
            elif kind == "load_error":
                st.load_error = RuntimeError(msg[1])
            elif kind == "drain":
                server.drain()
    except (EOFError, OSError):  # the launcher is gone: stop the way SIGTERM does
        print(f"frontend {index}: the launcher went away; draining", file=sys.stderr, flush=True)
        server.drain()


def topology(old: dict[str, Any], engines: list[dict[str, Any]]) -> dict[str, Any]:
    """/ready's "worker" for this frontend: the engines, whether any is up, and their restarts; with one
    engine also its pid and last exit at the top (what `infertune validate` kills and watches)."""
    out = {**old, "engines": engines, "up": any(e["up"] for e in engines),
           "restarts": sum(e["restarts"] for e in engines)}
    if len(engines) == 1:
        e = engines[0]
        out.update(pid=e["pid"], last_exit=e.get("last_exit"), last_restart_s=e.get("last_restart_s"))
    return out
