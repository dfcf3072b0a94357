"""Before the first point: wait until the server answers the workload's first request, not with a refused
connection or an HTTP 503 (infertune serve answers 503 until its model is loaded and warm; vLLM and TEI
refuse connections until then). Without the wait, a bench started with its server measured a loading
server: 695,031 of 736,024 requests answered 503, and the point read 2,716 req/s "ok".

The loop (`wait_until`) is pure, with the probe, clock and sleep passed in, so it is tested with fakes;
`Probe` is the real one (GET /v1/models for the model name, then POST the first request)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

READY = "ready"  # answered 200
LOADING = "loading"  # answered, but 503 (not ready yet)
REFUSED = "refused"  # nothing accepts connections (yet)
ANSWERED = "answered"  # answered something else (a 4xx, a 500, not JSON): preflight judges it

# a connection refused this long, with nothing ever answering, is a wrong URL rather than a server starting
# (`infertune serve` listens ~0.6 s after it starts on the 2-core box); --wait-ready raises it
REFUSED_S = 5.0
# how long a server that answers 503 is waited for when --wait-ready is not given (MiniLM on the 2-core box
# loads and warms up in ~8 s; a bigger model on CPU in a minute or two)
LOADING_S = 120.0


def patience(wait_ready: float | None) -> tuple[float, float]:
    """(seconds to wait for a server answering 503, for one refusing connections). Not given: LOADING_S and
    REFUSED_S; given: that long for both (a server started in the same command may not listen yet)."""
    if wait_ready is None:
        return LOADING_S, REFUSED_S
    return wait_ready, wait_ready


def wait_until(probe: Callable[[], tuple[str, str, Any]], *, loading_s: float, refused_s: float,
               log: Callable[[str], None], what: str = "the server", every_s: float = 5.0,
               poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Probe until READY or ANSWERED, or until the patience for the current state runs out. `probe()` ->
    (state, what it answered in words, the probe's record). Refused connections get `refused_s` while the
    server has never answered; once it has (a 503), `loading_s` applies to both. Says what it waits for
    at the first wait and then every `every_s`. Returns {ready, state, waited_s, polls, last, record}."""
    t0 = clock()
    polls, answered = 0, False
    next_line = t0 + every_s
    while True:
        state, detail, record = probe()
        polls += 1
        now = clock()
        waited = now - t0
        if state in (READY, ANSWERED):
            if polls > 1:
                done = "is ready" if state == READY else "answered"
                log(f"{what} {done} after {waited:.1f} s ({polls} probes): {detail}")
            return {"ready": state == READY, "state": state, "waited_s": round(waited, 2), "polls": polls,
                    "last": detail, "record": record}
        answered = answered or state == LOADING
        limit = loading_s if answered else min(loading_s, refused_s)
        if waited >= limit:
            if limit > 0:
                log(f"{what} is still not ready after {waited:.1f} s: {detail}")
            return {"ready": False, "state": state, "waited_s": round(waited, 2), "polls": polls,
                    "last": detail, "record": record, "limit_s": limit}
        if polls == 1:
            log(f"waiting for {what} to be ready (up to {limit:g} s; --wait-ready): {detail}")
        elif now >= next_line:
            next_line = now + every_s
            log(f"still waiting for {what}: {waited:.0f} s of at most {limit:g} s; {detail}")
        sleep(poll_s)


async def _post(cfg, body: bytes, in_tokens: int) -> tuple:
    import aiohttp

    from infertune.bench.client import request

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=cfg.timeout, sock_connect=10)) as s:
        return await request(s, cfg.url + cfg.endpoint, body, cfg.api, cfg.streaming, time.monotonic(),
                             in_tokens, {"Content-Type": "application/json"})


def _models(url: str) -> tuple[str, str, str | None]:
    """GET /v1/models -> (state, words, the first model's id or None)."""
    import httpx

    try:
        r = httpx.get(url + "/v1/models", timeout=10)
    except httpx.ConnectError as e:
        return REFUSED, f"GET /v1/models: connection refused ({e})", None
    except httpx.HTTPError as e:  # accepted but no answer in time: it is there, busy loading
        return LOADING, f"GET /v1/models: {type(e).__name__}", None
    if r.status_code == 503:
        return LOADING, f"GET /v1/models answered 503: {r.text[:120]}", None
    try:
        data = r.json().get("data") or []
        return READY, "", data[0]["id"] if data else None
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        return READY, "", None  # no model list (not an OpenAI server?): the POST will tell


class Probe:
    """The real probe: the model name from GET /v1/models (unless given), then the workload's first request,
    POSTed as the load will send it. `build(model)` makes the requests once the model is known."""

    def __init__(self, cfg, build: Callable[[str | None], Any]):
        self.cfg, self.build = cfg, build
        self.model: str | None = cfg.model
        self.req = None

    def __call__(self) -> tuple[str, str, Any]:
        cfg = self.cfg
        if self.req is None:
            if cfg.model is None:
                state, words, model = _models(cfg.url)
                if state != READY:
                    return state, words, None
                self.model = model
            self.req = self.build(self.model)
        rec = asyncio.run(_post(cfg, self.req.bodies[0], self.req.input_tokens[0]))
        kind, msg = rec.error, str(rec.detail)
        where = f"POST {cfg.endpoint}"
        if not kind:
            return READY, f"{where} answered in {(rec.done - rec.sent) * 1e3:.0f} ms", rec
        if kind == "connect":
            return REFUSED, f"{where}: connection refused ({msg})", rec
        if msg.startswith("HTTP 503"):
            return LOADING, f"{where} answered {msg[:160]}", rec
        return ANSWERED, f"{where}: {kind}: {msg[:160]}", rec
