"""Admission on a real `infertune serve` over sockets: a request expected to wait past its deadline gets 429 at once
with Retry-After (the shared MiniLM server), a stalled engine (SIGSTOP) makes new requests fail at once, never slow,
and --rate-limit holds one API key to its rate while another is unaffected. The last two run on a fake-backend
artifact (serve_helpers) in an engine process: they read only token counts and answer times, and the fake's fixed
forward cost gives them the same ones every run, without loading a second MiniLM."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest
from serve_helpers import bench, embed, metric, write_fake_artifact

KEYS = ("key-one-0123456789", "key-two-0123456789")
TEXT = ("the quick brown fox jumps over the lazy dog while the cat sleeps on the warm windowsill of the old house "
        "by the river, ") * 3  # about 70 tokens (66 words: 67 tokens of the fake backend)
US_PER_TOKEN = 300  # TEXT: 20 ms a request, about what MiniLM takes on a 2-core box


async def _post_all(url: str, bodies: list[dict], headers: dict[str, str]) -> list[tuple[int, float, httpx.Response]]:
    """Every body at once; (status, seconds, response) each."""
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=len(bodies))) as c:

        async def one(body: dict) -> tuple[int, float, httpx.Response]:
            t = time.perf_counter()
            r = await c.post("/v1/embeddings", json=body, headers=headers)
            return r.status_code, time.perf_counter() - t, r

        return await asyncio.gather(*(one(b) for b in bodies))


def test_requests_expected_to_wait_past_their_deadline_get_429_at_once(minilm_server):
    url = minilm_server.url
    for _ in range(10):  # the service rate is measured from what the engine answers (trusted after 2 s busy)
        assert embed(url, [TEXT] * 16).status_code == 200
    before = metric(url, "infertune_rejected_total", reason="expected_wait")
    body = {"model": "minilm", "input": [TEXT] * 16}  # ~1,100 tokens a request
    got = asyncio.run(_post_all(url, [body] * 24, {"X-Infertune-Deadline-Ms": "200"}))
    ok = [g for g in got if g[0] == 200]
    refused = [g for g in got if g[0] == 429]
    print(f"24 requests of 16 texts with a 200 ms deadline: {len(ok)} answered, {len(refused)} refused; refusals took "
          f"{max(s for _, s, _ in refused):.3f} s at most")
    assert len(ok) + len(refused) == 24 and ok and refused
    for _, seconds, r in refused:
        err = r.json()["error"]
        assert err["code"] == "rate_limit_exceeded" and "deadline" in err["message"]
        assert int(r.headers["retry-after"]) >= 1
        # refused at once: sooner than the answered requests were served, not queued behind the work it could not
        # outwait (a bound from this run's own service time, so a loaded box does not fail it)
        assert seconds < max(s for _, s, _ in ok)
    assert metric(url, "infertune_rejected_total", reason="expected_wait") - before == len(refused)
    # the default deadline (--max-wait-s, 10 s here) holds a few such requests without refusing any
    assert all(s == 200 for s, _, _ in asyncio.run(_post_all(url, [body] * 3, {})))
    assert metric(url, "infertune_max_wait_seconds") == 10.0


def test_a_bad_deadline_header_is_a_400(minilm_server):
    r = httpx.post(minilm_server.url + "/v1/embeddings", json={"model": "minilm", "input": "hi"},
                   headers={"X-Infertune-Deadline-Ms": "soon"}, timeout=30)
    assert r.status_code == 400 and "X-Infertune-Deadline-Ms" in r.json()["error"]["message"]


@pytest.fixture(scope="module")
def keyed_worker_server(tmp_path_factory):
    """The fake model in a supervised engine process (so it can be stopped), two API keys, 20 requests/s per key."""
    art = write_fake_artifact(tmp_path_factory.mktemp("keyed"), US_PER_TOKEN)
    srv = bench.ours(str(art), "--worker-process", "--drain-s", "0", "--api-key", ",".join(KEYS),
                     "--rate-limit", "20/s", headers={"Authorization": f"Bearer {KEYS[1]}"})
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _auth(i: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[i]}"}


def _metric(url: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", headers=_auth(1), timeout=10).text
    assert not any(k in text for k in KEYS)  # never a raw key in a label
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_one_key_over_its_rate_gets_429_the_other_is_unaffected(keyed_worker_server):
    url = keyed_worker_server.url
    body = {"model": "fake", "input": "hello"}

    async def both() -> tuple[list, list]:
        over = asyncio.ensure_future(_post_all(url, [body] * 60, _auth(0)))  # 60 at once against 20/s
        calm = []
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            for _ in range(8):  # 8 requests over ~2 s: well within 20/s
                r = await c.post("/v1/embeddings", json=body, headers=_auth(1))
                calm.append(r.status_code)
                await asyncio.sleep(0.25)
        return await over, calm

    over, calm = asyncio.run(both())
    limited = [r for s, _, r in over if s == 429]
    print(f"key 1: 60 requests at once -> {sum(s == 200 for s, _, _ in over)} x 200, {len(limited)} x 429; key 2: "
          f"{calm}")
    assert calm == [200] * 8
    assert 20 <= len(limited) <= 40  # a one-second burst (20) passes, plus what refills while they arrive
    assert all(s in (200, 429) for s, _, _ in over)
    assert all(int(r.headers["retry-after"]) >= 1 and "--rate-limit" in r.json()["error"]["message"]
               for r in limited)
    assert _metric(url, "infertune_api_key_requests_total", key="1", outcome="rate_limited") == len(limited)
    assert _metric(url, "infertune_api_key_requests_total", key="2", outcome="rate_limited") == 0
    assert _metric(url, "infertune_rejected_total", reason="rate_limit") == len(limited)
    assert httpx.post(url + "/v1/embeddings", json=body, timeout=30).status_code == 401


def test_a_stalled_engine_refuses_new_requests_at_once(keyed_worker_server):
    url = keyed_worker_server.url
    headers = {**_auth(1), "X-Infertune-Deadline-Ms": "1000"}
    assert httpx.post(url + "/v1/embeddings", json={"model": "fake", "input": TEXT}, headers=headers,
                      timeout=30).status_code == 200
    pid = httpx.get(url + "/ready", headers=_auth(1), timeout=5).json()["worker"]["pid"]

    async def during_stall() -> list[tuple[int, float, httpx.Response]]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:

            async def one(delay: float) -> tuple[int, float, httpx.Response]:
                await asyncio.sleep(delay)
                t = time.perf_counter()
                r = await c.post("/v1/embeddings", json={"model": "fake", "input": TEXT}, headers=headers)
                return r.status_code, time.perf_counter() - t, r

            async def resume() -> None:
                await asyncio.sleep(3.0)
                os.kill(pid, signal.SIGCONT)

            *got, _ = await asyncio.gather(*(one(0.2 * i) for i in range(15)), resume())  # 5 req/s for 3 s
            return got

    os.kill(pid, signal.SIGSTOP)
    try:
        got = asyncio.run(during_stall())
    finally:
        os.kill(pid, signal.SIGCONT)  # (again, if the load failed)
    codes = [(s, r.json()["error"]["code"] if s != 200 else None) for s, _, r in got]
    refused = [sec for s, sec, _ in got if s != 200]
    print(f"engine stopped 3 s, 15 requests with a 1 s deadline: {codes}; refusals took {max(refused):.3f} s at most")
    # admitted while the silence was short (answered once the engine runs again), then refused: 429 (the silent
    # engine's rate decays, so the wait a request would have grows past its deadline) or 503 (nothing finished for
    # longer than the deadline), at once
    assert all(c in ((200, None), (503, "engine_stalled"), (429, "rate_limit_exceeded")) for c in codes), codes
    # every request sent after the silence passed the deadline (1 s) is refused: 1.4 s on, 8 of them
    assert all(s != 200 for s, _, _ in got[7:]) and max(refused) < 0.5, codes
    assert (503, "engine_stalled") in codes
    assert _metric(url, "infertune_rejected_total", reason="engine_stalled") >= 1
    # going again: answered
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        r = httpx.post(url + "/v1/embeddings", json={"model": "fake", "input": "again"}, headers=headers, timeout=30)
        if r.status_code == 200:
            break
        time.sleep(0.2)
    assert r.status_code == 200, r.text
