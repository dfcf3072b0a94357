"""Against the loopback stub (tests/fixtures/openai_stub.py): bench waits for a server that answers
503 while it loads, a point against a server that never got ready is error-laden and never quoted, and
--slo-confirm's long points find a load the queue holds where short points passed above it. ~50 s."""

from __future__ import annotations

import json

import pytest
from bench_helpers import run_cli

from infertune.bench.config import BenchConfig
from infertune.bench.report import best_point
from infertune.bench.runner import bench


def test_bench_waits_for_a_loading_server_before_its_first_point(stub):
    url = stub("fast", loading_s=3)  # 503 for 3 s from bench's first poll
    logs: list[str] = []
    res = bench(BenchConfig(url=url, rates=[50], duration=1, warmup=0.5, metrics_url=""), log=logs.append)
    ready = res.target["ready"]
    assert ready["ready"] and ready["polls"] > 1 and ready["waited_s"] > 1, ready
    assert any(s.startswith(f"waiting for {url} to be ready") and "503" in s for s in logs), logs
    p = res.points[0]
    assert p.errors.total == 0 and p.valid and not p.error_laden and best_point(res) is p


def test_a_server_that_never_got_ready_gives_error_laden_points_nobody_quotes(stub):
    url = stub("fast", loading_s=600)
    r = run_cli("bench", url, "--rate", "100", "--duration", "1", "--warmup", "0", "--wait-ready", "1",
                "--metrics-url", "", "--json")
    assert r.returncode == 1, r.stderr[-2000:]  # every request failed
    data = json.loads(r.stdout)
    p = data["points"][0]
    assert p["error_laden"] is True and p["valid"] is False and p["errors"]["rate"] == 1.0
    assert "answered HTTP 503" in p["invalid_reason"]
    assert data["target"]["ready"]["ready"] is False and data["target"]["ready"]["waited_s"] >= 1
    assert any("still answered 503" in w for w in data["warnings"])
    assert "NO: errors" in r.stderr and "max throughput: none to quote" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_slo_confirm_backs_off_to_a_load_the_queue_holds(stub):
    # one request at a time, 10 ms each: capacity 100 req/s. Above it the backlog after T s is (r - 100) x T
    # requests of 10 ms: with 1 s points (+0.5 s warm-up) p99 <= 60 ms passes up to r = 104 req/s, with the
    # 6 s confirm points (+1 s warm-up) only up to 100 + 6 / 7 = 100.9 req/s
    url = stub("queue", service_ms=10)
    res = bench(BenchConfig(url=url, slo="p99_e2e_ms<=60", duration=1, warmup=0.5, metrics_url="",
                            slo_confirm=6))
    s = res.slo
    assert s is not None and s.met and s.confirm is not None, s
    c = s.confirm
    print(f"queue capacity 100 req/s: short points {s.max_load:.1f}, sustainable {s.sustainable_load} req/s; "
          f"confirm steps {[(round(x.load, 1), x.passed, x.p99_ms) for x in c.steps]}")
    assert c.met and s.sustainable_load == c.load and c.load <= 101, c.steps
    assert c.start == s.max_load and c.steps[-1].p99_ms <= 60
    long = [p for p in res.points if p.phase == "confirm"]
    assert len(long) == len(c.steps) and all(p.window_s == 6 and p.label.endswith("(6 s)") for p in long)
