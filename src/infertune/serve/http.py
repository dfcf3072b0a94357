"""The HTTP face of the server: the FastAPI app (routes, OpenAI-shaped errors, the API-key and metrics
middleware), the State the routes share, and a uvicorn server that drains on SIGTERM. Used by the
single-process server (inproc.py) and by every frontend process of multi-process serve (frontend.py).
The one place where the serving stack's domain errors (serve/errors.py) become HTTP statuses (`api_error`).

Routes: POST /v1/embeddings (and /embeddings), GET /v1/models, /health (alive), /ready (model loaded and
warmed up; 503 while draining), /metrics (Prometheus). Every error is JSON in OpenAI's shape.
"""

import asyncio
import json
import logging
import signal
import socket
import sys
import threading
import time
from typing import Any

from infertune.errors import InfertuneError
from infertune.serve.config import ServeConfig, Settings
from infertune.serve.errors import (
    BatchFailed,
    EngineDown,
    EngineStalled,
    InputTooLong,
    NonFinite,
    Overloaded,
    ServeError,
    TimedOut,
)
from infertune.serve.schema import ApiError

log = logging.getLogger("infertune.serve")
ROUTES = ("/v1/embeddings", "/embeddings", "/v1/models", "/health", "/ready", "/metrics")
FAST = ("/v1/embeddings", "/embeddings")
DEADLINE_HEADER = b"x-infertune-deadline-ms"  # a request's own deadline (ms), instead of --max-wait-s


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
        self.draining = False  # SIGTERM seen: /ready answers 503 while requests are still accepted
        self.topology: dict[str, Any] | None = None  # how the model is served: /ready's "worker"


def api_error(e: ServeError) -> ApiError:
    """The HTTP answer to a domain error of the serving stack."""
    retry = {"Retry-After": "1"}
    if isinstance(e, Overloaded):
        return ApiError(429, e.message, type="rate_limit_error", code="rate_limit_exceeded",
                        headers={"Retry-After": str(e.retry_after_s)})
    if isinstance(e, EngineStalled):
        return ApiError(503, e.message, type="server_error", code="engine_stalled", headers=retry)
    if isinstance(e, InputTooLong):
        return ApiError(400, e.message, param=e.param or "input", code="context_length_exceeded")
    if isinstance(e, EngineDown):
        return ApiError(503, e.message, type="server_error", code="worker_unavailable", headers=retry)
    if isinstance(e, TimedOut):
        return ApiError(504, e.message, type="timeout", code="timeout")
    if isinstance(e, BatchFailed):
        return ApiError(500, e.message, type="server_error")
    if isinstance(e, NonFinite):
        return ApiError(500, e.message, type="server_error", param="input", code="nonfinite_embedding")
    return ApiError(500, e.message, type="server_error")


def capture_loop(server: Any) -> tuple[list[asyncio.AbstractEventLoop], threading.Event]:
    """The uvicorn server's event loop, once it starts: (a box that will hold it, the event set then). Threads
    that attach the engine client after the model loads need it."""
    box: list[asyncio.AbstractEventLoop] = []
    started = threading.Event()
    orig = server.startup

    async def startup(sockets: Any = None) -> None:
        box.append(asyncio.get_running_loop())
        started.set()
        await orig(sockets=sockets)

    server.startup = startup
    return box, started


def draining_server(config: Any, st: State, drain_s: float):
    """A uvicorn.Server that, on the first SIGTERM/SIGINT, fails /ready and keeps accepting for
    `drain_s` seconds before its graceful shutdown (answer everything accepted, then exit): a load
    balancer polling /ready stops routing here, and connections already in the listen backlog are
    accepted and answered instead of reset. A second signal stops at once."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if st.draining or drain_s <= 0 or self.should_exit:
                return super().handle_exit(sig, frame)
            self.drain(sig)

        def drain(self, sig: int = signal.SIGTERM) -> None:
            """Start the drain (once; later calls do nothing)."""
            if st.draining or self.should_exit:
                return
            st.draining = True
            print(f"draining: /ready answers 503; still accepting for {drain_s:g} s (--drain-s), then "
                  "answering what was accepted and exiting", file=sys.stderr, flush=True)
            timer = threading.Timer(drain_s, super().handle_exit, args=(sig, None))
            timer.daemon = True
            timer.start()

    return DrainingServer(config)


def _error_response(st: State, e: ApiError):
    from fastapi.responses import JSONResponse

    st.metrics.errors.labels(str(e.status), e.type).inc()
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


class Gate:
    """Pure ASGI middleware: Bearer auth (all routes but /health), per-key rate limits (the embedding routes) and
    per-request metrics."""

    def __init__(self, app: Any, st: State):
        from infertune.serve.limits import Access

        self.app = app
        self.st = st
        self.access = Access(st.cfg.api_keys, st.cfg.rate_limit, st.metrics)
        self._kids: dict[tuple[str, int], tuple[Any, Any]] = {}
        # multi-process serve: which frontend answered (debugging a spread, and the tests' proof of one)
        self.tag = (b"x-infertune-frontend", str(st.topology["frontend"]).encode()) if st.topology else None

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
                if self.tag is not None:
                    msg["headers"] = [*msg.get("headers", ()), self.tag]
            await send(msg)

        try:
            fast = path in FAST and scope["method"] == "POST"
            if self.access.on and path != "/health" and (err := self._refuse(scope, fast)) is not None:
                return await _error_response(self.st, err)(scope, receive, send_status)
            if fast:
                await _embed_asgi(self.st, scope, receive, send_status)
            else:
                await self.app(scope, receive, send_status)
        finally:
            # label children cached: a labels() lookup, and in multi-process mode each metric write,
            # showed in a frontend's CPU profile
            key = (route, status[0])
            if (kids := self._kids.get(key)) is None:
                m = self.st.metrics
                kids = self._kids[key] = (m.requests.labels(route, str(status[0])), m.latency.labels(route))
            kids[0].inc()
            kids[1].observe(time.perf_counter() - t0)


    def _refuse(self, scope: dict, fast: bool) -> ApiError | None:
        """401 without one of the keys; 429 for an embedding request over its key's --rate-limit."""
        index = self.access.key_index(dict(scope["headers"]).get(b"authorization", b""))
        if index is None:
            return ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                            type="authentication_error", code="invalid_api_key")
        if fast and (retry := self.access.admit(index)):
            return ApiError(429, f"rate limit of this API key exceeded ({self.st.cfg.rate_limit:g} requests/s, "
                            f"--rate-limit); retry after {retry} s", type="rate_limit_error",
                            code="rate_limit_exceeded", headers={"Retry-After": str(retry)})
        return None


def create_app(st: State):
    """The FastAPI application for a State (the engine is attached later by the loader)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import Response
    from prometheus_client import CONTENT_TYPE_LATEST

    app = FastAPI(title="infertune serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.st = st

    _add_error_handlers(app, st)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        from infertune.serve.readiness import ready_answer

        return ready_answer(st)

    @app.get("/metrics")
    async def metrics():
        return Response(st.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models():
        spec = st.embedder.spec if st.embedder is not None else None
        return {"object": "list", "data": [{
            "id": st.served[0], "object": "model", "created": int(st.started), "owned_by": "infertune",
            "max_input_tokens": spec.max_length if spec else None, "dimensions": spec.dim if spec else None,
            "pooling": spec.pooling if spec else None,
            "prompts": dict(getattr(spec, "prompts", {}) or {}) if spec else None,
            "default_prompt_name": getattr(spec, "default_prompt_name", None) if spec else None}]}

    async def embeddings(request: Request):  # POSTs normally take Gate's fast path; this is the same code
        return Response(await embed(st, dict(request.scope["headers"]), request.stream()),
                        media_type="application/json")

    app.post("/v1/embeddings")(embeddings)
    app.post("/embeddings")(embeddings)
    app.add_middleware(Gate, st=st)
    return app


def _add_error_handlers(app: Any, st: State) -> None:
    """Every error as OpenAI's error JSON: ApiError as raised, unknown routes and methods, invalid bodies (400),
    and anything unexpected (500, logged with its traceback)."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

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


async def embed(st: State, headers: dict[bytes, bytes], chunks: Any) -> bytes:
    """POST /v1/embeddings: headers (raw ASGI), the body's chunks -> the response body; raises ApiError."""
    import anyio

    from infertune.serve.schema import parse_request

    cfg, engine = st.cfg, st.engine
    if engine is None:
        raise ApiError(503, "model is still loading; poll GET /ready", type="server_error",
                       headers={"Retry-After": "1"})
    ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(415, f"Content-Type must be application/json, got {ctype or 'nothing'!r}")
    raw = await _read_body(headers.get(b"content-length"), chunks, cfg.max_body_bytes)
    spec = st.embedder.spec
    kw = dict(served=st.served, dim=spec.dim, vocab_size=st.vocab_size, max_length=spec.max_length,
              max_items=cfg.max_items_per_request, truncate=cfg.truncate, prompts=spec.prompts,
              default_prompt=spec.default_prompt_name)
    deadline = _deadline_s(headers.get(DEADLINE_HEADER))
    if len(raw) > 256 * 1024:  # keep the event loop free while a big body is parsed
        req = await anyio.to_thread.run_sync(lambda: parse_request(raw, **kw))
    else:
        req = parse_request(raw, **kw)
    try:
        return await engine.submit(req, st.served[0], cfg.request_timeout_s, deadline)
    except ServeError as e:
        if reason := getattr(e, "reason", None):
            st.metrics.rejected.labels(reason).inc()
        raise api_error(e) from None


def _deadline_s(value: bytes | None) -> float | None:
    """X-Infertune-Deadline-Ms -> seconds (None: not sent); 400 unless a positive number."""
    if value is None:
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = float("nan")
    if not ms > 0 or ms == float("inf"):
        raise ApiError(400, f"X-Infertune-Deadline-Ms must be a positive number of milliseconds, got "
                       f"{value.decode('latin-1')!r}", param="X-Infertune-Deadline-Ms")
    return ms / 1e3


async def _read_body(length: bytes | None, chunks: Any, limit: int) -> bytes:
    if length is not None:
        if not length.isdigit():
            raise ApiError(400, f"invalid Content-Length header {length.decode('latin-1')!r}")
        if int(length) > limit:
            raise ApiError(413, f"request body is {int(length)} bytes; the limit is {limit} bytes "
                           "(--max-body-mb); split the input over several requests")
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        if len(buf) > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes (--max-body-mb); "
                           "split the input over several requests")
    return bytes(buf)


async def _asgi_chunks(receive: Any) -> Any:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return
        yield msg.get("body", b"")
        if not msg.get("more_body", False):
            return


async def _embed_asgi(st: State, scope: dict, receive: Any, send: Any) -> None:
    """Gate's fast path for POST /v1/embeddings: plain ASGI, past FastAPI's routing and middleware stack
    (which cost more CPU per request than the endpoint itself in a frontend's profile)."""
    extra: list[tuple[bytes, bytes]] = []
    try:
        body, status = await embed(st, dict(scope["headers"]), _asgi_chunks(receive)), 200
    except ApiError as e:
        st.metrics.errors.labels(str(e.status), e.type).inc()
        body, status = json.dumps(e.body()).encode(), e.status
        extra = [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in e.headers.items()]
    except Exception as e:  # noqa: BLE001 - answered as 500 like FastAPI's handler does
        log.exception("unhandled error")
        st.metrics.errors.labels("500", "server_error").inc()
        body, status = json.dumps(ApiError(500, f"internal error: {type(e).__name__}: {e}",
                                           type="server_error").body()).encode(), 500
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *extra]})
    await send({"type": "http.response.body", "body": body})


def bind_tcp(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """The server's TCP socket, with a clear error when the port is taken. `reuse_port`: several processes
    bind the same port (multi-process serve); `listen=False` only reserves it (the launcher)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InfertuneError(f"cannot listen on {host}:{port}: {e.strerror}; pick another --port "
                             "(or --port 0 for any free one)") from None
    if listen:
        sock.listen(2048)
    return sock
