"""The confirm stage: the SLO search's answer re-measured with long points, backing off until one
meets the SLO. Fake servers: one whose tail grows with the window above a sustainable load (short points pass
above it, long ones do not), and a FIFO queue past its capacity (it falls behind)."""

from __future__ import annotations

import pytest

from infertune.bench.results import ClientCheck, Offered, Percentiles, Point
from infertune.bench.slo import confirm, parse_slo, search


def _queue_server(capacity: float, service_ms: float = 20.0, warmup: float = 2.0):
    """run(load, window_s) -> Point of a single FIFO queue at a constant rate: below capacity latency is the
    service time; above it the backlog grows by (rate - capacity) per second, so the last request of a
    window waits (rate / capacity - 1) x (warm-up + window). Completions run at capacity."""
    def run(load: float, window: float, calls: list) -> Point:
        calls.append((load, window))
        over = max(0.0, load / capacity - 1)
        p99 = service_ms + 1e3 * over * (warmup + 0.99 * window)
        done = min(load, capacity)
        p50 = service_ms + 1e3 * over * (warmup + window / 2)
        return Point(offered=Offered(rate=load), n=int(load * window), ok=int(load * window),
                     achieved_rps=done, window_s=window, latency_ms=Percentiles(p50=p50, p99=p99),
                     client=ClientCheck(sent_rps=load))
    return run


def _settling_server(sustainable: float):
    """Keeps up at every load, but above `sustainable` its P99 grows with the window (6 ms per req/s over it
    per 5 s): the queue's steady state takes longer than a short point to reach, as MiniLM's on the 2-core
    box."""
    def run(load: float, window: float, calls: list) -> Point:
        calls.append((load, window))
        p99 = 20.0 + max(0.0, load - sustainable) * 6.0 * window / 5.0
        return Point(offered=Offered(rate=load), n=int(load * window), ok=int(load * window),
                     achieved_rps=load, window_s=window, latency_ms=Percentiles(p50=10.0, p99=p99),
                     client=ClientCheck(sent_rps=load))
    return run


def test_short_points_pass_above_the_sustainable_load_and_the_confirm_backs_off_below_it():
    slo = parse_slo("p99_e2e_ms<=200", 0.01, streaming=False, keepup=0.95)
    srv = _settling_server(sustainable=33.0)
    calls: list = []
    short = search(lambda x: srv(x, 5.0, calls), slo, over="rate", start=10, tolerance=0.05, repeats=2)
    assert short.met and short.max_load > 50  # 5 s points: P99 200 ms only at 63 req/s
    long_calls: list = []
    logs: list[str] = []
    c = confirm(lambda x: srv(x, 30.0, long_calls), slo, start=short.max_load, duration=30.0, max_steps=12,
                log=logs.append)
    # 30 s points meet 200 ms up to 33 + 180 / 36 = 38 req/s
    assert c.met and c.load is not None and 0.9 * 38 < c.load <= 38 < short.max_load  # the step above failed
    assert all(w == 30.0 for _, w in long_calls) and [s.load for s in c.steps] == [x for x, _ in long_calls]
    assert [s.passed for s in c.steps] == [False] * (len(c.steps) - 1) + [True]
    assert c.steps[-1].p99_ms <= 200 and all(s.p99_ms > 200 for s in c.steps[:-1])
    assert c.steps[0].load == pytest.approx(short.max_load) and c.start == short.max_load
    assert c.duration_s == 30.0
    assert logs[0].startswith(f"confirm rate={short.max_load:.3g} over 30 s: FAIL")


def test_each_failed_long_point_backs_off_by_the_factor():
    slo = parse_slo("p99_e2e_ms<=200", 0.01, streaming=False, keepup=0.95)
    srv = _queue_server(capacity=38.0)
    calls: list = []
    c = confirm(lambda x: srv(x, 30.0, calls), slo, start=44.45, duration=30.0, backoff=0.9)
    # 44.45 completes 38 of 44.45 req/s sent (< 95%): the next load is at most 0.9 x 38; then 10% steps
    assert [round(s.load, 2) for s in c.steps] == [44.45, 34.2]
    assert c.met and c.load == pytest.approx(34.2)
    calls = []
    # kept up: 10% steps
    c = confirm(lambda x: srv(x, 30.0, calls), slo, start=40.0, duration=30.0, backoff=0.9)
    assert [round(s.load, 2) for s in c.steps] == [40.0, 36.0] and c.met


def test_no_load_holds_within_the_steps():
    slo = parse_slo("p99_e2e_ms<=5", 0.01, streaming=False)  # below the service time: nothing can pass
    srv = _queue_server(capacity=40.0)
    calls: list = []
    c = confirm(lambda x: srv(x, 10.0, calls), slo, start=30.0, duration=10.0, max_steps=4)
    assert not c.met and c.load is None and len(c.steps) == 4
    assert [round(s.load, 2) for s in c.steps] == [30.0, 27.0, 24.3, 21.87]


def test_confirm_over_concurrency_moves_in_whole_streams():
    slo = parse_slo("p99_e2e_ms<=100", 0.01, streaming=False)

    def run(c: float) -> Point:
        return Point(offered=Offered(concurrency=int(c)), n=100, ok=100,
                     latency_ms=Percentiles(p99=30.0 * c))  # 30 ms more per stream in flight

    got = confirm(run, slo, start=5, duration=20.0, over="concurrency")
    assert [s.load for s in got.steps] == [5, 4, 3] and got.load == 3
