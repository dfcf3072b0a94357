"""`infertune bench` against small real servers on loopback (tests/fixtures/openai_stub.py)."""

from __future__ import annotations

import json

from bench_helpers import assert_search_consistent, run_cli

from infertune.bench.config import BenchConfig
from infertune.bench.runner import bench


def test_constant_rate_is_kept_and_outputs_written(stub, tmp_path):
    url = stub("fast")
    res = bench(BenchConfig(url=url, rates=[200], duration=2, warmup=0.5, out=tmp_path, scrape_interval=0.25))
    p = res.points[0]
    assert p.valid, p.invalid_reason
    assert p.n == 400  # 200/s x 2 s, evenly spaced, warm-up excluded
    assert p.errors.total == 0
    assert abs(p.achieved_rps - 200) <= 200 * 0.05
    assert p.latency_ms.p50 is not None and p.latency_ms.n == 400
    doc = json.loads((tmp_path / "bench.json").read_text())
    for key in ("config", "environment", "points"):
        assert key in doc
    pt = doc["points"][0]
    assert pt["offered"]["rate"] == 200
    for key in ("achieved_rps", "n", "errors", "valid", "latency_ms"):
        assert key in pt
    assert set(pt["latency_ms"]) >= {"p50", "p90", "p95", "p99", "p999"}
    assert (tmp_path / "bench.csv").read_text().count("\n") == 2
    assert "<svg" in (tmp_path / "bench.html").read_text()
    # the server's /metrics was scraped during the run, on the same clock as the point
    tel = res.telemetry[0]
    assert "stub_requests_total" in tel.series and len(tel.t) >= 4
    counts = [v for v in tel.series["stub_requests_total"] if v is not None]
    assert counts[-1] - counts[0] >= 300


def test_asked_for_more_than_it_can_send_reports_own_saturation(stub):
    url = stub("fast")
    res = bench(BenchConfig(url=url, rates=[200_000], duration=1, warmup=0, workers=1, metrics_url=""))
    p = res.points[0]
    assert not p.valid
    assert "fell behind" in p.invalid_reason
    assert p.client.sent_rps < 200_000 * 0.5
    assert any("INVALID" in w for w in res.warnings)


def test_stall_shows_in_p99(stub):
    # server freezes 1 s every 5 s; at 100 req/s about 20% of requests are scheduled inside a freeze
    url = stub("stall")
    for attempt in range(2):
        # a point's send lag may reach 100 ms before it counts as invalid: lag that size blurs neither a 1 s
        # freeze in the P99 nor a P50 under 200 ms, and a busy 2-core box lags the client tens of ms (19 ms
        # twice in a row failed points held to the default 10 ms)
        res = bench(BenchConfig(url=url, rates=[100], duration=6, warmup=0.5, metrics_url="", max_lag_ms=100))
        p = res.points[0]
        # bench flags its own lag honestly (invalid point); on a shared 2-core box another tenant can starve
        # the client for half a second (seen in CI), so such a run is repeated once, never accepted
        if p.valid or "fell behind" not in (p.invalid_reason or ""):
            break
        print(f"attempt {attempt + 1} invalid, repeated: {p.invalid_reason}")
    assert p.valid, p.invalid_reason
    print(f"stall 1 s every 5 s at 100 req/s: p50 {p.latency_ms.p50:.1f} ms, p99 {p.latency_ms.p99:.1f} ms, n={p.n}")
    assert p.latency_ms.p99 >= 900
    assert p.latency_ms.p50 < 200


def test_streaming_ttft_and_itl_match_known_timing(stub):
    # The stub sleeps 60 ms before the first token and then sends one every 25 ms (to a schedule: a late chunk
    # does not delay the next), 12 tokens. What bench reports must be those timings: TTFT no shorter than 60
    # ms (less 0.5 ms: two processes' clocks and timers; beside two CPU hogs the minimum read 59.99 ms once)
    # and shorter than 60 + one gap (a clock that read the first chunk late, or TTFT taken at the end of the
    # stream, is past it); ITL and TPOT within half a gap of 25 ms (a gap per byte-chunk, or the TTFT folded
    # into the gaps, is not); end to end no shorter than 60 + 11 x 25 ms (less 0.5) and within one TTFT of it.
    # How close to the stub's timing on a quiet box (TTFT + <= 8 ms, ITL/TPOT +- 5 ms, E2E +- 5%) is
    # benchmarks/client.py's figure: a busy box adds its scheduling delays (the full suite read TTFT p50
    # 66.7-68.1 ms, idle 61-65).
    url = stub("fast", ttft_ms=60, itl_ms=25, tokens=12)
    e2e = 60 + 11 * 25
    for api in ("chat", "completions"):
        res = bench(BenchConfig(url=url, api=api, concurrency=[2], duration=3, warmup=0.5, metrics_url=""))
        p = res.points[0]
        assert p.errors.total == 0 and p.ok > 0, (p.invalid_reason, p.errors)
        print(f"{api} stream, known TTFT 60 / ITL 25 ms: measured P50 TTFT {p.ttft_ms.p50:.2f} (min "
              f"{p.ttft_ms.min:.2f}), ITL {p.itl_ms.p50:.2f}, TPOT {p.tpot_ms.p50:.2f}, "
              f"E2E {p.latency_ms.p50:.2f} ms (n={p.n}, valid {p.valid})")
        assert p.ttft_ms.n == p.tpot_ms.n == p.latency_ms.n == p.ok and p.itl_ms.n >= p.ok
        assert p.ttft_ms.min >= 59.5 and p.ttft_ms.p50 < 60 + 25, p.ttft_ms
        assert abs(p.itl_ms.p50 - 25) <= 12.5, p.itl_ms
        assert abs(p.tpot_ms.p50 - 25) <= 12.5, p.tpot_ms
        assert e2e - 0.5 <= p.latency_ms.min and p.latency_ms.p50 <= e2e + 60, p.latency_ms
        assert p.output_tokens_per_s > 0


def test_slo_search_finds_queue_capacity(stub):
    # one request at a time, 50 ms each: capacity 20 req/s; with evenly spaced arrivals there is no
    # queueing below capacity (latency 50 ms) and a growing queue above it. Above capacity the backlog after
    # the 1.5 s point is (r - 20) x 1.5 requests of 50 ms each, so p99 <= 300 ms still passes up to
    # r = 20 x (1 + 0.25 / 1.5) = 23.3 req/s: no answer can be above that, however fast the box. Below it, a
    # busy box moves the answer: every timer wake-up that waits for a core adds to the tail. The answer must
    # still be a measured, bracketed rate, and at least 4 req/s, where the queue is idle 80% of the time and a
    # P99 of 300 ms would take stalls of 250 ms. 250 ms is room for a starved client below capacity: with 10 ms
    # and 60 ms (50 ms of room) a search beside other tenants' tests answered 56 req/s of 100 once, and failed
    # another when points down to 0.84 of capacity read over 60 ms. Send lag may reach 50 ms (it can hide no
    # more than that from a latency; the default 10 ms made half such a search's points invalid).
    url = stub("queue", service_ms=50)
    res = bench(BenchConfig(url=url, slo="p99_e2e_ms<=300", duration=1, warmup=0.5, metrics_url="",
                            slo_tolerance=0.05, max_lag_ms=50))
    s = res.slo
    print(f"queue capacity 20 req/s: SLO search answered {s and s.max_load} req/s; steps {s and s.steps}")
    assert_search_consistent(res, 0.05)
    assert 4 <= s.max_load <= 23.4, s.steps


def test_unreachable_url_is_a_clear_error():
    # 1 s of refused connections, not the default 5 s: the error is the same (the wait's rules have unit tests)
    r = run_cli("bench", "http://127.0.0.1:9", "--duration", "1", "--wait-ready", "1")
    assert r.returncode == 2
    assert "cannot" in r.stderr and "Traceback" not in r.stderr


def test_wrong_api_kind_is_a_clear_error(stub):
    url = stub("chat-only")
    r = run_cli("bench", url, "--api", "embeddings", "--duration", "1")
    assert r.returncode == 2, r.stderr
    assert "does not serve --api embeddings" in r.stderr and "Traceback" not in r.stderr


def test_http_errors_counted_by_kind(stub):
    url = stub("http500")
    res = bench(BenchConfig(url=url, rates=[100], duration=1, warmup=0, metrics_url=""))
    p = res.points[0]
    assert p.errors.by_kind.get("http_5xx", 0) == p.errors.total
    assert 0.4 <= p.errors.rate <= 0.6
    assert "HTTP 500" in p.errors.examples["http_5xx"]


def test_non_json_counted_and_explained(stub):
    url = stub("nonjson")
    r = run_cli("bench", url, "--rate", "50", "--duration", "1", "--warmup", "0", "--metrics-url", "")
    assert r.returncode == 1, r.stderr
    assert "non_json" in r.stderr and "not JSON" in r.stderr and "Traceback" not in r.stderr


def test_truncated_stream_counted(stub):
    url = stub("truncate", ttft_ms=5, itl_ms=2, tokens=10)
    res = bench(BenchConfig(url=url, api="chat", concurrency=[1], duration=1, warmup=0, metrics_url=""))
    p = res.points[0]
    assert p.n > 5 and p.errors.by_kind == {"truncated_stream": p.n}


def test_sweep_goes_from_one_at_a_time_to_saturation(stub, tmp_path):
    url = stub("fast", ttft_ms=20, itl_ms=5, tokens=8)
    res = bench(BenchConfig(url=url, api="chat", sweep=True, sweep_points=4, sweep_max_concurrency=16, duration=1.5,
                            warmup=0.3, metrics_url="", out=tmp_path))
    pts = res.points
    assert [p.offered.concurrency for p in pts[:2]] == [1, 16]
    rates = [p.offered.rate for p in pts[2:]]
    assert rates and rates == sorted(rates)
    # one stream: a request every 20 + 7 x 5 = 55 ms, about 18 req/s, never more (the stub's sleeps); a busy
    # box only adds to each request. 16 streams on an async server: ~16x on a quiet box, where the client's
    # CPU for 16 streams is what a busy box squeezes; 4x is what a sweep that really ran 16 streams at once
    # cannot miss
    print(f"sweep: c=1 {pts[0].achieved_rps:.1f} req/s, c=16 {pts[1].achieved_rps:.1f} req/s "
          f"({pts[1].achieved_rps / pts[0].achieved_rps:.1f}x)")
    assert 9 <= pts[0].achieved_rps <= 19
    assert pts[1].achieved_rps > 4 * pts[0].achieved_rps
    assert res.knee is not None and res.knee.recommended_max_num_seqs and res.knee.derivation
    assert "Throughput vs" in (tmp_path / "bench.html").read_text()
