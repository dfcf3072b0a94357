"""`infertune serve --worker-process`: the model runs in a supervised engine process (the processes topology with
one frontend). SIGKILL it mid-request: that request gets a clean 503 at once (not a hang), the launcher restarts
the engine by itself, /metrics counts the restart, and answers are right again. An engine that holds a request
and stops answering (SIGSTOP) past --worker-timeout-s is killed and replaced the same way. Fake backend: no torch,
fixed forward cost."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
from serve_helpers import embed, metric


def _worker(url: str) -> dict:
    return httpx.get(url + "/ready", timeout=5).json()["worker"]


def _wait_new_worker(url: str, old_pid: int, timeout: float = 30) -> tuple[dict, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = httpx.get(url + "/ready", timeout=5)
        if r.status_code == 200 and r.json()["worker"]["pid"] != old_pid:
            return r.json()["worker"], time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"no new worker within {timeout} s")


def test_killed_worker_fails_its_batch_cleanly_and_is_restarted(fake_server):
    # 400 tokens -> 0.8 s in forward. --batch-tokens 256: the engine's start (and its restart) times one-text batches,
    # not batches of up to 4,000 padded tokens (8 s each start at this cost per token); that request still runs alone
    srv = fake_server("--worker-process", "--batch-tokens", "256", us_per_token=2000)
    w = _worker(srv.url)
    assert w["mode"] == "processes" and w["pid"] != srv.proc.pid and w["restarts"] == 0
    ok = embed(srv.url, ["a b c", "d e"], "fake")
    assert ok.status_code == 200
    got: dict = {}

    def slow() -> None:
        t = time.perf_counter()
        got["r"] = embed(srv.url, ["a " * 399], "fake")
        got["s"] = time.perf_counter() - t

    th = threading.Thread(target=slow)
    th.start()
    time.sleep(0.4)  # inside the 0.8 s forward pass
    os.kill(w["pid"], signal.SIGKILL)
    th.join(30)
    r = got["r"]
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "worker_unavailable" and "SIGKILL" in err["message"] and r.headers["retry-after"] == "1"
    # failed at once, not after a timeout (--worker-timeout-s and --request-timeout-s are 60 s by default);
    # a busy box may take seconds to notice and answer, never a quarter of either
    assert got["s"] < 15, got["s"]
    new, took = _wait_new_worker(srv.url, w["pid"])
    assert new["restarts"] == 1 and new["last_exit"] == "killed by SIGKILL"
    assert metric(srv.url, "infertune_worker_restarts_total") == 1
    assert metric(srv.url, "infertune_worker_up") == 1
    again = embed(srv.url, ["a b c", "d e"], "fake")
    assert again.status_code == 200 and again.json()["data"] == ok.json()["data"]
    assert srv.proc.poll() is None


def test_stalled_worker_is_killed_after_the_timeout(fake_server):
    srv = fake_server("--worker-process", "--worker-timeout-s", "1")
    w = _worker(srv.url)
    os.kill(w["pid"], signal.SIGSTOP)
    try:
        t = time.perf_counter()
        r = embed(srv.url, "a b c", "fake")
        took = time.perf_counter() - t
    finally:
        try:
            os.kill(w["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert r.status_code == 503 and "stalled" in r.json()["error"]["message"], r.text
    # after the 1 s worker timeout, and from it: not from the 60 s request timeout (seconds on a busy box)
    assert 0.9 < took < 15, took
    _wait_new_worker(srv.url, w["pid"])
    assert embed(srv.url, "a b c", "fake").status_code == 200
    assert metric(srv.url, "infertune_worker_restarts_total") == 1


def test_a_request_longer_than_the_timeout_is_not_a_stall(fake_server):
    """One request of 200 texts runs as several batches of about 0.4 s, 2 s or more in all: longer than
    --worker-timeout-s 1, with the engine answering nothing for that request until its last batch. The engine
    sends heartbeats while it makes progress, so its client does not take it for stalled: 200, no restart."""
    srv = fake_server("--worker-process", "--worker-timeout-s", "1", us_per_token=200)
    pid = _worker(srv.url)["pid"]
    t = time.perf_counter()
    r = embed(srv.url, ["a " * 50] * 200, "fake")
    took = time.perf_counter() - t
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == 200 and took > 1.0, took  # it did outlast the stall limit
    w = _worker(srv.url)
    assert w["pid"] == pid and w["restarts"] == 0
    assert metric(srv.url, "infertune_worker_restarts_total") == 0
