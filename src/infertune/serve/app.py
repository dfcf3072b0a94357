"""The HTTP face of the server (FastAPI on uvicorn) and `serve()`, the library entry point.

Routes: POST /v1/embeddings (and /embeddings), GET /v1/models, /health (alive), /ready (model loaded and
warmed up), /metrics (Prometheus). Every error is JSON in OpenAI's shape. The model loads in a
background thread after the socket is bound, so /health answers at once and /ready says when to route
traffic. SIGTERM/SIGINT: uvicorn stops accepting, waits for every accepted request, then the engine
drains and the process exits 0.
"""

import hmac
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
from infertune.serve.config import ServeConfig, ServeResult, Settings, resolve_settings
from infertune.serve.schema import ApiError

log = logging.getLogger("infertune.serve")
ROUTES = ("/v1/embeddings", "/embeddings", "/v1/models", "/health", "/ready", "/metrics")
FAULT_ENV = "INFERTUNE_SERVE_FAULT_MARKER"  # test hook: a forward pass fails if an item holds this text


class State:
    """What the routes share: config, settings, metrics and (once loaded) the engine."""

    def __init__(self, cfg: ServeConfig, settings: Settings, served: list[str], metrics: Any):
        self.cfg = cfg
        self.settings = settings
        self.served = served
        self.metrics = metrics
        self.engine: Any = None
        self.embedder: Any = None
        self.vocab_size = 0
        self.load_error: BaseException | None = None
        self.load_s: float | None = None
        self.server: Any = None  # uvicorn.Server, to stop it when loading fails
        self.started = time.time()


def _error_response(st: State, e: ApiError):
    from fastapi.responses import JSONResponse

    st.metrics.errors.labels(str(e.status), e.type).inc()
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


class Gate:
    """Pure ASGI middleware: Bearer auth (all routes but /health) and per-request metrics."""

    def __init__(self, app: Any, st: State):
        self.app = app
        self.st = st
        self.key = f"Bearer {st.cfg.api_key}".encode() if st.cfg.api_key else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = path if path in ROUTES else "other"
        t0 = time.perf_counter()
        status = [500]

        async def send_status(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            if self.key and path != "/health":
                got = dict(scope["headers"]).get(b"authorization", b"")
                if not hmac.compare_digest(got, self.key):
                    err = ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                   type="authentication_error", code="invalid_api_key")
                    return await _error_response(self.st, err)(scope, receive, send_status)
            await self.app(scope, receive, send_status)
        finally:
            m = self.st.metrics
            m.requests.labels(route, str(status[0])).inc()
            m.latency.labels(route).observe(time.perf_counter() - t0)


def create_app(st: State):
    """The FastAPI application for a State (the engine is attached later by the loader)."""
    import anyio
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import Response
    from prometheus_client import CONTENT_TYPE_LATEST
    from starlette.exceptions import HTTPException

    from infertune.serve.engine import Overloaded
    from infertune.serve.schema import parse_request

    cfg = st.cfg
    app = FastAPI(title="infertune serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.st = st

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return _error_response(st, e)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, e: HTTPException):
        if e.status_code == 404:
            msg = f"no route {request.method} {request.url.path}; routes: {', '.join(ROUTES)}"
        elif e.status_code == 405:
            msg = f"{request.method} is not allowed on {request.url.path}"
        else:
            msg = str(e.detail)
        return _error_response(st, ApiError(e.status_code, msg, code="not_found" if e.status_code == 404 else None,
                                            headers=dict(e.headers or {})))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, e: RequestValidationError):
        return _error_response(st, ApiError(400, f"invalid request: {e.errors()}"))

    @app.exception_handler(Exception)
    async def _crash(request: Request, e: Exception):
        log.exception("unhandled error")
        return _error_response(st, ApiError(500, f"internal error: {type(e).__name__}: {e}", type="server_error"))

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if st.load_error is not None:
            raise ApiError(503, f"model failed to load: {st.load_error}", type="server_error")
        if st.engine is None:
            raise ApiError(503, "model is loading and warming up; poll GET /ready", type="server_error",
                           headers={"Retry-After": "1"})
        worker = _worker(st)
        if worker.get("up") is False:
            raise ApiError(503, f"the model worker is restarting (restart {worker['restarts']}); poll GET /ready",
                           type="server_error", headers={"Retry-After": "1"})
        return {"status": "ready", "model": st.served[0], "load_s": st.load_s,
                "settings": st.settings.model_dump(), "backend": _describe(st.embedder), "worker": worker,
                "limits": {"max_queue": cfg.max_queue, "max_items_per_request": cfg.max_items_per_request,
                           "max_body_bytes": cfg.max_body_bytes, "request_timeout_s": cfg.request_timeout_s,
                           "max_input_tokens": st.embedder.spec.max_length, "truncate": cfg.truncate}}

    @app.get("/metrics")
    async def metrics():
        return Response(st.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models():
        spec = st.embedder.spec if st.embedder is not None else None
        return {"object": "list", "data": [{
            "id": st.served[0], "object": "model", "created": int(st.started), "owned_by": "infertune",
            "max_input_tokens": spec.max_length if spec else None, "dimensions": spec.dim if spec else None}]}

    async def embeddings(request: Request):
        engine = st.engine
        if engine is None:
            raise ApiError(503, "model is still loading; poll GET /ready", type="server_error",
                           headers={"Retry-After": "1"})
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise ApiError(415, f"Content-Type must be application/json, got {ctype or 'nothing'!r}")
        raw = await _read_body(request, cfg.max_body_bytes)
        spec = st.embedder.spec
        kw = dict(served=st.served, dim=spec.dim, vocab_size=st.vocab_size, max_length=spec.max_length,
                  max_items=cfg.max_items_per_request, truncate=cfg.truncate)
        if len(raw) > 256 * 1024:  # keep the event loop free while a big body is parsed
            req = await anyio.to_thread.run_sync(lambda: parse_request(raw, **kw))
        else:
            req = parse_request(raw, **kw)
        try:
            body = await engine.submit(req, st.served[0], cfg.request_timeout_s)
        except Overloaded:
            raise ApiError(429, f"server is at capacity ({engine.max_queue} requests queued); retry after 1 s",
                           type="rate_limit_error", code="rate_limit_exceeded",
                           headers={"Retry-After": "1"}) from None
        return Response(body, media_type="application/json")

    app.post("/v1/embeddings")(embeddings)
    app.post("/embeddings")(embeddings)
    app.add_middleware(Gate, st=st)
    return app


async def _read_body(request: Any, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ApiError(400, f"invalid Content-Length header {length!r}")
        if int(length) > limit:
            raise ApiError(413, f"request body is {int(length)} bytes; the limit is {limit} bytes "
                           "(--max-body-mb); split the input over several requests")
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes (--max-body-mb); "
                           "split the input over several requests")
    return bytes(buf)


def _worker(st: State) -> dict[str, Any]:
    emb = st.embedder
    if not hasattr(emb, "worker_pid"):
        return {"mode": "thread", "pid": os.getpid(), "restarts": 0}
    return {"mode": "process", "pid": emb.worker_pid, "up": emb.up, "restarts": emb.restarts,
            "last_exit": emb.last_exit or None, "last_restart_s": emb.last_restart_s}


def _describe(emb: Any) -> dict[str, Any]:
    try:
        d = emb.describe()
        return {k: v for k, v in d.items() if k != "leaf_modules"}
    except Exception:  # noqa: BLE001
        return {}


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
                                  _warmup_texts(), forward_timeout_s=st.cfg.worker_timeout_s).start()
            st.embedder = emb  # so shutdown closes the worker even if what follows fails
            st.metrics.watch_worker(lambda: emb.worker_pid)
        else:
            if st.settings.threads:
                import torch

                torch.set_num_threads(st.settings.threads)
            from infertune.artifact import load_model

            emb = load_model(st.cfg.model, st.settings.device)
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
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InfertuneError(f"cannot listen on {host}:{port}: {e.strerror}; pick another --port "
                             "(or --port 0 for any free one)") from None
    sock.listen(2048)
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
    return ServeResult(model=str(cfg.model), url=f"http://{cfg.host}:{cfg.port}", uptime_s=round(time.monotonic() - t0, 1),
                       exit_reason="vLLM stopped cleanly")


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

        embedding_spec(ref)  # says clearly when this is not an encoder
    for mod, pkg in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("prometheus_client", "prometheus-client")):
        if importlib.util.find_spec(mod) is None:
            raise InfertuneError(f"serving needs {pkg}: pip install 'infertune[serve]'")
    import uvicorn

    from infertune.serve.metrics import Metrics

    settings = resolve_settings(config, manifest)
    name = config.served_model_name or (manifest or {}).get("model") or ref.name
    served = list(dict.fromkeys([name, config.model, Path(config.model).name]))
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
          f"{settings.max_padding if settings.max_padding else 'any'} ({src['max_padding']}); {settings.tokenize_workers} tokenizer thread(s); "
          f"queue {config.max_queue} requests; model in "
          f"{'a supervised worker process' if config.worker_process else 'the server process'}",
          file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(
        create_app(st), log_level=config.log_level, access_log=False, lifespan="on",
        timeout_graceful_shutdown=config.graceful_timeout_s, timeout_keep_alive=30))
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
