"""The HTTP face of the server (FastAPI on uvicorn) and `serve()`, the library entry point.

Routes: POST /v1/embeddings (and /embeddings), GET /v1/models, /health (alive), /ready (model loaded and
warmed up), /metrics (Prometheus). Every error is JSON in OpenAI's shape. The model loads in a
background thread after the socket is bound, so /health answers at once and /ready says when to route
traffic. SIGTERM/SIGINT: uvicorn stops accepting, waits for every accepted request, then the engine
drains and the process exits 0.
"""

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.serve.config import ServeConfig, ServeResult, resolve_settings
from infertune.serve.http import ROUTES, State, bind_tcp, create_app, draining_server  # noqa: F401 - re-exported

log = logging.getLogger("infertune.serve")
FAULT_ENV = "INFERTUNE_SERVE_FAULT_MARKER"  # test hook: a forward pass fails if an item holds this text


def _warmup_texts(n: int = 32) -> list[str]:
    from importlib import resources

    lines = resources.files("infertune").joinpath("data/sample_embeddings.jsonl").read_text().splitlines()
    return [json.loads(x)["input"] for x in lines[:n]]


def _load(st: State) -> None:
    """Background: load the model, warm it up, start the engine; stop the server if this fails."""
    from infertune.serve.engine import Engine

    t0 = time.perf_counter()
    try:
        if st.settings.device == "cpu":
            from infertune.serve.memory import bound_cpu_memory

            if done := bound_cpu_memory():
                print(f"memory: {', '.join(done)} (see infertune/serve/memory.py)", file=sys.stderr, flush=True)
        if st.cfg.worker_process:
            from infertune.serve.supervisor import SupervisedModel

            emb = SupervisedModel(st.cfg.model, st.settings.device, st.settings.threads, st.metrics,
                                  _warmup_texts(), forward_timeout_s=st.cfg.worker_timeout_s,
                                  load_opts=st.cfg.load_options()).start()
            st.embedder = emb  # so shutdown closes the worker even if what follows fails
            st.metrics.watch_worker(lambda: emb.worker_pid)
        else:
            if st.settings.threads:
                import torch

                torch.set_num_threads(st.settings.threads)
            from infertune.artifact import load_model

            emb = load_model(st.cfg.model, st.settings.device, **st.cfg.load_options())
            if st.settings.device == "cuda":
                from infertune.backends.graphs import with_graphs

                emb, _ = with_graphs(emb, st.settings.cuda_graphs, st.settings.batch_tokens)
                if hasattr(emb, "precapture"):
                    emb.precapture()
        tok = emb.tokenizer
        st.vocab_size = len(tok) if hasattr(tok, "__len__") else int(getattr(tok, "vocab_size", 2**31 - 1))
        marker = os.environ.get(FAULT_ENV)
        fault = _fault(marker) if marker else None
        engine = Engine(emb, st.settings, st.metrics, max_queue=st.cfg.max_queue, truncate=st.cfg.truncate,
                        fault=fault)
        engine.warmup(_warmup_texts())
        engine.start()
        st.embedder, st.load_s = emb, round(time.perf_counter() - t0, 2)
        st.engine = engine
        st.metrics.ready.set(1)
        print(f"ready: {st.served[0]} loaded and warmed up in {st.load_s} s", file=sys.stderr, flush=True)
    except BaseException as e:  # noqa: BLE001 - reported by serve() after the server stops
        log.exception("model load failed")
        st.load_error = e
        if st.server is not None:
            st.server.should_exit = True


def _fault(marker: str):
    def fault(items: list[Any]) -> None:
        for it in items:
            texts = it.job.req.texts or []
            if it.index < len(texts) and marker in texts[it.index]:
                raise RuntimeError(f"injected fault ({FAULT_ENV})")

    return fault


def _bind(host: str, port: int) -> socket.socket:
    sock = bind_tcp(host, port)
    sock.set_inheritable(True)
    return sock


def _serve_llm(cfg: ServeConfig, manifest: dict[str, Any], path: Any) -> ServeResult:
    """LLM artifacts are served by vLLM (never by a home-made generation server)."""
    import importlib

    try:
        mod = importlib.import_module("infertune.llm.vllm_server")
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("infertune.llm"):
            raise
        mod = None
    fn = getattr(mod, "serve_llm", None)
    if fn is None:
        raise InfertuneError(f"{cfg.model} is a causal-LM artifact; serving it needs infertune.llm.vllm_server"
                             ":serve_llm, which this installation does not have")
    t0 = time.monotonic()
    code = fn(path, host=cfg.host, port=cfg.port)
    if code not in (0, None):
        raise InfertuneError(f"vLLM exited with code {code}; its log above says why (try `infertune doctor explain`)")
    return ServeResult(model=str(cfg.model), url=f"http://{cfg.host}:{cfg.port}",
                       uptime_s=round(time.monotonic() - t0, 1), exit_reason="vLLM stopped cleanly")


def serve(config: ServeConfig) -> ServeResult:
    """Serve an embedding model until SIGTERM/SIGINT; return what was served."""
    import importlib.util

    from infertune.artifact import read_manifest
    from infertune.models.resolve import resolve_model

    ref = resolve_model(config.model)
    manifest = read_manifest(ref.path) if ref.format == "artifact" else None
    if manifest is not None and manifest.get("kind") == "causal-lm":
        return _serve_llm(config, manifest, ref.path)
    if manifest is None:
        from infertune.models.embedding import embedding_spec

        o = config.load_options()  # says clearly when this is not an embedder, or a prompt is unknown
        embedding_spec(ref, o["pooling"], o["task"], o["prompts"], o["default_prompt_name"])
    for mod, pkg in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("prometheus_client", "prometheus-client")):
        if importlib.util.find_spec(mod) is None:
            raise InfertuneError(f"serving needs {pkg}: pip install 'infertune[serve]'")
    import uvicorn

    from infertune.serve.metrics import Metrics

    settings = resolve_settings(config, manifest)
    if manifest is not None:
        from infertune.serve.host_check import check_host

        if line := check_host(manifest, settings.device, config.strict_host):
            print(line, file=sys.stderr, flush=True)
    name = config.served_model_name or (manifest or {}).get("model") or ref.name
    served = list(dict.fromkeys([name, config.model, Path(config.model).name]))
    from infertune.serve.launcher import Launcher, wants_processes

    multi, devices, frontends = wants_processes(config, settings.device,
                                                ((manifest or {}).get("tune") or {}).get("frontends_per_gpu"))
    if multi:
        if importlib.util.find_spec("zmq") is None:
            raise InfertuneError("serving with several frontends or devices needs pyzmq: pip install "
                                 "'infertune[serve]'")
        return Launcher(config, settings, served, devices, frontends, _warmup_texts()).run()
    st = State(config, settings, served, Metrics())
    sock = _bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    if config.host not in ("127.0.0.1", "localhost", "::1") and not config.api_key:
        print(f"warning: listening on {config.host} without --api-key: anyone who can reach this port can use "
              "it", file=sys.stderr)
    src = settings.sources
    print(f"listening on {url} (model {name!r}, loading...)\nbatching: {settings.batch_tokens} padded tokens "
          f"({src['batch_tokens']}), growing to {settings.max_batch_tokens} under load ({src['max_batch_tokens']}), "
          f"<= {settings.max_batch_items} items ({src['max_batch_items']}), max wait "
          f"{settings.max_wait_ms} ms ({src['max_wait_ms']}), padding <= "
          f"{settings.max_padding if settings.max_padding else 'any'} ({src['max_padding']}); "
          f"{settings.tokenize_workers} tokenizer thread(s); "
          f"queue {config.max_queue} requests; model in "
          f"{'a supervised worker process' if config.worker_process else 'the server process'}",
          file=sys.stderr, flush=True)
    server = draining_server(uvicorn.Config(
        create_app(st), log_level=config.log_level, access_log=False, lifespan="on",
        timeout_graceful_shutdown=config.graceful_timeout_s, timeout_keep_alive=30, proxy_headers=False),
        st, config.drain_s)
    st.server = server
    loader = threading.Thread(target=_load, args=(st,), name="infertune-load", daemon=True)
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
        if st.engine is not None:
            st.engine.stop()
        if hasattr(st.embedder, "close"):
            st.embedder.close()
    if st.load_error is not None:
        if isinstance(st.load_error, InfertuneError):
            raise st.load_error
        raise InfertuneError(f"could not load {config.model}: {type(st.load_error).__name__}: {st.load_error}")
    counts: dict[str, int] = {}
    for metric in st.metrics.requests.collect():
        for s in metric.samples:
            if s.name.endswith("_total"):
                counts[s.labels["status"]] = counts.get(s.labels["status"], 0) + int(s.value)
    eng = st.engine
    return ServeResult(model=name, url=url, settings=settings, load_s=st.load_s,
                       uptime_s=round(time.perf_counter() - t0, 2), requests=counts,
                       items=eng.items if eng else 0, batches=eng.batches if eng else 0,
                       exit_reason="signal" if server.should_exit else "stopped")
