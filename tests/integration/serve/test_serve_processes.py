"""`infertune serve --frontends 2`: two frontend processes share the port (SO_REUSEPORT) and one engine
process owns the model. Over real sockets: both frontends answer, identically; /metrics on any frontend
counts the requests of every frontend; 500 requests sent at once and then SIGTERM are all answered (no
connection reset) and the server exits 0; a killed engine fails only its outstanding requests (503) and is
restarted. Fake backend: no torch, a fixed forward cost, so this holds on a busy 2-core box."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter

import httpx
import numpy as np
import pytest
from serve_helpers import embed, metric


def _post_new_connection(url: str, text: str) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=30) as c:  # a fresh connection each time: a new 4-tuple to hash
        return c.post("/v1/embeddings", json={"model": "fake", "input": [text]})


def test_frontends_share_the_port_and_metrics_add_up(fake_server):
    srv = fake_server("--frontends", "2", us_per_token=50)
    ready = httpx.get(srv.url + "/ready", timeout=5).json()["worker"]
    assert ready["mode"] == "processes" and ready["frontends"] == 2 and len(ready["engines"]) == 1
    by_frontend: dict[str, list] = {}
    n = 0
    while n < 60 and len(by_frontend) < 2 or n < 12:
        r = _post_new_connection(srv.url, "a b c d")
        assert r.status_code == 200, r.text
        by_frontend.setdefault(r.headers["x-infertune-frontend"], []).append(r.json()["data"][0]["embedding"])
        n += 1
    print(f"{n} requests on fresh connections, by frontend: { {k: len(v) for k, v in by_frontend.items()} }",
          file=sys.stderr)
    assert set(by_frontend) == {"0", "1"}, by_frontend.keys()
    assert by_frontend["0"][0] == by_frontend["1"][0]  # same engine, same answer, whichever frontend
    # every frontend's count shows up in /metrics, whichever frontend answers the scrape
    for _ in range(4):
        assert metric(srv.url, "infertune_requests_total", route="/v1/embeddings", status="200") == n
    assert metric(srv.url, "infertune_items_total") == n


async def _burst(port: int, n: int, body: bytes, sent: list) -> list[str]:
    async def one() -> str:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            await w.drain()
            sent.append(1)
            data = await r.read()
            w.close()
            return data.split(b" ", 2)[1].decode() if data else "closed without an answer"
        except OSError as e:
            return type(e).__name__

    return await asyncio.gather(*(one() for _ in range(n)))


def test_sigterm_with_500_requests_across_frontends_answers_all(fake_server):
    n = 500
    srv = fake_server("--frontends", "2", "--max-queue", "1024", "--drain-s", "2", us_per_token=40)
    port = int(srv.url.rsplit(":", 1)[1])
    body = b'{"model": "fake", "input": "a b c d e f g h"}'

    async def main() -> list[str]:
        sent: list = []
        task = asyncio.ensure_future(_burst(port, n, body, sent))
        while len(sent) < n and not task.done():
            await asyncio.sleep(0.001)
        srv.proc.send_signal(signal.SIGTERM)  # every request is written; most are not answered yet
        return await task

    t0 = time.monotonic()
    got = Counter(asyncio.run(main()))
    code = srv.proc.wait(60)
    print(f"SIGTERM after {n} requests sent at once to 2 frontends: {dict(got)}, exit code {code}, "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr)
    assert got == {"200": n}
    assert code == 0


def test_killed_engine_fails_its_requests_and_is_restarted(fake_server):
    # 400 tokens -> 0.8 s in forward; --batch-tokens 256 keeps the engine's start and restart short (test_serve_worker)
    srv = fake_server("--frontends", "2", "--batch-tokens", "256", us_per_token=2000)
    ok = embed(srv.url, ["a b c", "d e"], "fake")
    assert ok.status_code == 200
    eng = httpx.get(srv.url + "/ready", timeout=5).json()["worker"]["engines"][0]
    assert eng["up"] and eng["restarts"] == 0
    got: dict = {}

    async def slow() -> None:
        async with httpx.AsyncClient(timeout=30) as c:
            t = time.perf_counter()
            got["r"] = await c.post(srv.url + "/v1/embeddings", json={"model": "fake", "input": ["a " * 399]})
            got["s"] = time.perf_counter() - t

    async def main() -> None:
        task = asyncio.ensure_future(slow())
        await asyncio.sleep(0.4)  # inside the 0.8 s forward pass
        os.kill(eng["pid"], signal.SIGKILL)
        await task

    asyncio.run(main())
    r = got["r"]
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "worker_unavailable" and r.headers["retry-after"] == "1"
    # failed when the engine died, not after a timeout: the server's request timeout is 60 s, the client's
    # 30 s; a busy box may take seconds to notice and answer, never a quarter of the server's timeout
    assert got["s"] < 15, got["s"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        w = httpx.get(srv.url + "/ready", timeout=5)
        if w.status_code == 200 and w.json()["worker"]["engines"][0]["pid"] not in (None, eng["pid"]):
            break
        time.sleep(0.1)
    new = httpx.get(srv.url + "/ready", timeout=5).json()["worker"]["engines"][0]
    assert new["up"] and new["restarts"] == 1 and new["last_exit"] == "killed by SIGKILL"
    assert metric(srv.url, "infertune_worker_restarts_total") == 1
    again = embed(srv.url, ["a b c", "d e"], "fake")
    assert again.status_code == 200 and again.json()["data"] == ok.json()["data"]
    assert srv.proc.poll() is None


@pytest.mark.slow
def test_minilm_frontends_tokenize_big_requests_with_the_checked_fast_tokenizer():
    """Real MiniLM behind 2 frontends: /ready names the tokenizer the frontends use (tokie where installed: it holds
    the GIL, so a big request is tokenized on the loop in slices of 256), a 280-text request (two slices) gets the
    vectors of the same texts sent 8 at a time, in order, and an over-long text in the second slice is named by its
    index in the whole request."""
    from serve_helpers import bench, cos_rows

    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"]
    texts = [f"sentence {i}: {words[i % 11]} {words[i * 7 % 11]} and {words[i * 3 % 11]}" for i in range(280)]
    srv = bench.ours("minilm", "--frontends", "2", "--drain-s", "0", capture=True).wait_ready(240)
    try:
        # every frontend opens together: once one /ready says 200, a new connection to any of them does too
        seen = set()
        for _ in range(24):  # the kernel spreads new connections over both (all on one: 2 in 2**24)
            r = httpx.get(srv.url + "/ready", timeout=10)
            assert r.status_code == 200, r.text
            seen.add(r.json()["worker"]["frontend"])
        assert seen == {0, 1}, seen
        tok = r.json()["tokenizer"]
        try:
            import tokie  # noqa: F401
            assert tok["tokenizer"] == "tokie", tok
        except ImportError:
            assert tok["tokenizer"] == "tokenizers", tok
        r = embed(srv.url, texts)
        assert r.status_code == 200, r.text
        got = np.array([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
        small = [d["embedding"] for i in range(0, 280, 8) for d in embed(srv.url, texts[i:i + 8]).json()["data"]]
        assert got.shape == (280, 384) and cos_rows(got, np.array(small, dtype=np.float32)).min() >= 0.9999
        bad = embed(srv.url, [*texts[:270], "token " * 600, *texts[270:]])
        assert bad.status_code == 400 and "input[270] has" in bad.json()["error"]["message"], bad.text
    finally:
        srv.stop()


def test_both_topologies_run_the_same_batch_core(fake_server):
    """One serving stack: the one-process server (batch core in a thread) and the processes topology (an engine
    process per device, as on a GPU) report the same batch core class behind /ready, and answer alike."""
    one = fake_server(us_per_token=50)
    two = fake_server("--frontends", "2", us_per_token=50)
    w1 = httpx.get(one.url + "/ready", timeout=5).json()["worker"]
    w2 = httpx.get(two.url + "/ready", timeout=5).json()["worker"]
    assert (w1["mode"], w2["mode"]) == ("thread", "processes")
    assert w1["batch_core"] == w2["batch_core"] == "infertune.serve.batch_core.BatchCore"
    assert w1["pid"] == one.proc.pid and w2["engines"][0]["pid"] != two.proc.pid
    a, b = embed(one.url, ["a b c", "d"], "fake"), embed(two.url, ["a b c", "d"], "fake")
    assert a.status_code == b.status_code == 200 and a.json()["data"] == b.json()["data"]
