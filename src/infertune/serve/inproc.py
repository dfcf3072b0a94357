"""One process: the HTTP app, its engine client and the batch core in a thread of the same process.

    clients --HTTP--> event loop: HTTP, JSON, tokenize, render  --InprocInbox-->  batch core thread
                                                                <--call_soon_threadsafe--  batching + forward

The messages are the ones the engine processes of multi-process serve get (transport.py), so the client
and the core are the same classes in both topologies; only the link differs. The model loads on a
background thread after the socket is bound, so /health answers at once and /ready says when to route
traffic. SIGTERM/SIGINT: uvicorn stops accepting, waits for every accepted request, then the core drains
and the process exits 0.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import sys
import threading
import time
from typing import Any

from infertune.errors import InfertuneError
from infertune.serve.config import ServeConfig, ServeResult, Settings
from infertune.serve.http import State, bind_tcp, capture_loop, create_app, draining_server


class InprocInbox:
    """The batch core's intake in one process: a C queue (put costs the event loop no Python-level lock; a
    Condition's acquire and notify were 6% of the loop's samples with a fake engine at c=64)."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[list[bytes]] = queue.SimpleQueue()

    def put(self, frames: list[bytes]) -> None:
        self._q.put(frames)

    def get(self, timeout_s: float) -> list[list[bytes]]:
        try:
            out = [self._q.get(timeout=timeout_s) if timeout_s > 0 else self._q.get_nowait()]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(self._q.get_nowait())
            except queue.Empty:
                return out


class InprocLink:
    """The engine client's link to a batch core in this process (engine 0)."""

    engines = 1

    def __init__(self, inbox: InprocInbox):
        self.inbox = inbox
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deliver: Any = None

    async def start(self, deliver: Any) -> None:
        self._loop, self._deliver = asyncio.get_running_loop(), deliver

    def send(self, engine: int, frames: list[bytes]) -> None:
        self.inbox.put(frames)

    def answer(self, frontend: int, frames: list[bytes]) -> None:
        """The core's `send` (on its thread): hand the finished requests to the event loop."""
        self._loop.call_soon_threadsafe(self._deliver, frames)

    def close(self) -> None:
        pass


class _Core:
    """The batch core's thread and what it needs to stop."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.core: Any = None


def _load(st: State, loop_box: list, started: threading.Event, core: _Core) -> None:
    """Background: load and warm the model, start the core thread and the client; stop the server on failure."""
    from infertune.serve.batch_core import BatchCore
    from infertune.serve.engine_client import EngineClient
    from infertune.serve.engine_setup import load_engine

    try:
        s = st.settings
        loaded = load_engine(st.cfg.model, s.device, s.model_dump(), threads=s.threads,
                             load_opts=st.cfg.load_options())
        inbox = InprocInbox()
        link = InprocLink(inbox)
        core.core = BatchCore(loaded.emb, s, st.metrics, inbox, link.answer, loaded.seed)
        st.metrics.watch_queue("batch", lambda: float(sum(len(c.lens) for c in list(core.core.pending))))
        core.thread = threading.Thread(target=core.core.loop, args=(core.stop,), name="infertune-batch-core",
                                       daemon=True)
        core.thread.start()
        client = EngineClient(loaded.emb, 0, link, st.metrics, max_queue=st.cfg.max_queue, truncate=st.cfg.truncate,
                              tokenize_threads=s.tokenize_workers, max_wait_s=s.max_wait_s)
        started.wait()
        loop = loop_box[0]
        asyncio.run_coroutine_threadsafe(client.start(), loop).result(30)
        loop.call_soon_threadsafe(client.set_engine, 0, True)
        st.vocab_size, st.embedder, st.load_s = loaded.info["vocab_size"], loaded.emb, loaded.info["load_s"]
        st.topology = {"mode": "thread", "pid": loaded.info["pid"], "restarts": 0,
                       "batch_core": f"{type(core.core).__module__}.{type(core.core).__qualname__}"}
        st.engine = client
        st.metrics.ready.set(1)
        print(f"ready: {st.served[0]} loaded and warmed up in {st.load_s} s", file=sys.stderr, flush=True)
    except BaseException as e:  # noqa: BLE001 - reported by serve() after the server stops
        import logging

        logging.getLogger("infertune.serve").exception("model load failed")
        st.load_error = e
        if st.server is not None:
            st.server.should_exit = True


def serve_in_process(config: ServeConfig, settings: Settings, served: list[str]) -> ServeResult:
    """Serve until SIGTERM/SIGINT with everything in this process; return what was served."""
    import uvicorn

    from infertune.serve.metrics import Metrics, totals

    st = State(config, settings, served, Metrics())
    sock = bind_tcp(config.host, config.port)
    sock.set_inheritable(True)
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    if config.host not in ("127.0.0.1", "localhost", "::1") and not config.api_keys:
        print(f"warning: listening on {config.host} without --api-key: anyone who can reach this port can use "
              "it", file=sys.stderr)
    src = settings.sources
    print(f"listening on {url} (model {served[0]!r}, loading...)\nbatching: {settings.batch_tokens} padded tokens "
          f"({src['batch_tokens']}), growing to {settings.max_batch_tokens} under load ({src['max_batch_tokens']}), "
          f"<= {settings.max_batch_items} items ({src['max_batch_items']}), max wait "
          f"{settings.max_wait_ms} ms ({src['max_wait_ms']}), padding <= "
          f"{settings.max_padding if settings.max_padding else 'any'} ({src['max_padding']}); "
          f"{settings.tokenize_workers} tokenizer thread(s) for big requests; queue {config.max_queue} requests, "
          f"max expected wait {settings.max_wait_s:g} s ({src['max_wait_s']}); "
          "model and batch core in the server process", file=sys.stderr, flush=True)
    server = draining_server(uvicorn.Config(
        create_app(st), log_level=config.log_level, access_log=False, lifespan="on",
        timeout_graceful_shutdown=config.graceful_timeout_s, timeout_keep_alive=30, proxy_headers=False),
        st, config.drain_s)
    st.server = server
    loop_box, started = capture_loop(server)
    core = _Core()
    loader = threading.Thread(target=_load, args=(st, loop_box, started, core), name="infertune-load", daemon=True)
    # uvicorn re-raises the caught SIGTERM/SIGINT after its graceful shutdown; no-op handlers make that
    # re-raise harmless, so a drained server exits 0.
    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    t0 = time.perf_counter()
    try:
        loader.start()
        server.run(sockets=[sock])
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sock.close()
        core.stop.set()  # everything accepted was answered: the core has nothing left
        if core.thread is not None:
            core.thread.join(30)
        if st.engine is not None:
            st.engine.close()
    if st.load_error is not None:
        if isinstance(st.load_error, InfertuneError):
            raise st.load_error
        raise InfertuneError(f"could not load {config.model}: {type(st.load_error).__name__}: {st.load_error}")
    counts, items, batches = totals(st.metrics.registry)
    return ServeResult(model=served[0], url=url, settings=settings, load_s=st.load_s,
                       uptime_s=round(time.perf_counter() - t0, 2), requests=counts, items=items, batches=batches,
                       exit_reason="signal" if server.should_exit else "stopped")
