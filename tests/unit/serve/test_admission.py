"""Admission by expected wait (serve/admission.py) on made-up clocks: the rate is tokens per second of busy time,
the wait is outstanding tokens over it, a silent engine's rate decays, and the verdicts follow."""

from __future__ import annotations

import math

import pytest

from infertune.serve.admission import TAU_S, ServiceRate, default_max_wait_s, judge


def steady(rate_tok_s: float = 1000.0, batch_tokens: int = 100, batches: int = 200) -> tuple[ServiceRate, float]:
    """An engine kept busy, answering `batch_tokens` every batch_tokens/rate seconds; (its estimate, the clock)."""
    r = ServiceRate()
    t = 0.0
    dt = batch_tokens / rate_tok_s
    r.sent(batch_tokens * 2, t)  # always a batch queued behind the running one
    for _ in range(batches):
        t += dt
        r.finished(batch_tokens, t)
        r.sent(batch_tokens, t)
    return r, t


def test_the_rate_is_what_the_engine_finished_per_busy_second():
    r, t = steady(1000.0)
    assert r.rate == pytest.approx(1000.0, rel=1e-9)
    # 200 tokens outstanding at 1000 tokens/s: 0.2 s of work ahead of a new request
    assert r.outstanding == 200 and r.expected_wait(t) == pytest.approx(0.2)


def test_idle_time_does_not_count_as_slow():
    r = ServiceRate()
    r.sent(100, 0.0)
    r.finished(100, 0.1)  # 1000 tokens/s while busy
    r.sent(100, 10.0)  # 9.9 s idle in between
    r.finished(100, 10.1)
    assert r.rate == pytest.approx(1000.0)
    assert r.silent_for(50.0) == 0.0 and r.expected_wait(50.0) == 0.0


def test_no_estimate_before_a_time_constant_of_busy_time():
    r = ServiceRate()
    r.sent(500, 0.0)
    assert r.expected_wait(5.0) is None
    assert judge([r], 1.0, 0.5).admit  # nothing says it would wait
    r.finished(10, 1.0)  # a slow first answer (a cold start): 10 tokens/s over 1 s of busy time
    assert r.expected_wait(1.0) is None and judge([r], 1.0, 1.0).admit
    r.finished(10, TAU_S)
    assert r.expected_wait(TAU_S) is not None


def test_a_silent_engine_decays_past_its_usual_gap():
    r, t = steady(1000.0)  # answers every 0.1 s
    assert r.current(t + 0.1) == pytest.approx(1000.0)  # within the usual gap: no decay
    later = t + 0.1 + TAU_S  # one time constant past the usual gap
    assert r.current(later) == pytest.approx(1000.0 / math.e, rel=1e-6)
    assert r.expected_wait(later) == pytest.approx(200 / (1000.0 / math.e), rel=1e-6)


def test_verdict_refuses_over_the_deadline_with_the_drain_time_as_retry_after():
    r, t = steady(1000.0)
    r.sent(5000, t)  # 5,200 tokens outstanding: 5.2 s of work
    v = judge([r], 2.0, t)
    assert not v.admit and v.reason == "expected_wait" and v.wait_s == pytest.approx(5.2)
    assert v.retry_after_s == math.ceil(5.2 - 2.0) == 4
    assert judge([r], 6.0, t).admit


def test_the_least_loaded_engine_decides():
    busy, t = steady(1000.0)
    busy.sent(9800, t)  # 10 s of work
    free, _ = steady(1000.0)  # 0.2 s
    assert judge([busy, free], 1.0, t).admit
    assert not judge([busy], 1.0, t).admit


def test_a_stalled_engine_refuses_at_once():
    r, t = steady(1000.0)
    v = judge([r], 3.0, t + 3.5)  # work outstanding, nothing finished for 3.5 s > 3 s
    assert not v.admit and v.reason == "engine_stalled"
    r.progress(t + 3.4)  # a heartbeat: the engine works (for other frontends): not stalled for this request
    assert judge([r], 3.0, t + 3.5).reason != "engine_stalled"


def test_dropped_work_is_no_longer_outstanding():
    r, t = steady(1000.0)
    r.dropped(200, t)
    assert r.outstanding == 0 and r.silent_for(t + 100) == 0.0


def test_a_stall_is_twice_the_usual_gap_and_at_least_a_second():
    fast, _ = steady(1000.0, batch_tokens=100)  # an answer every 0.1 s
    assert fast.stall_s() == 1.0
    slow, _ = steady(1000.0, batch_tokens=2000)  # every 2 s
    assert slow.stall_s() == pytest.approx(4.0)


def test_one_long_batch_is_no_stall_for_a_short_deadline():
    r, t = steady(1000.0)  # answers every 0.1 s
    v = judge([r], 0.2, t + 0.5)  # silent 0.5 s > the 0.2 s deadline, but under the 1 s stall
    assert v.reason == "expected_wait"  # refused by the wait it would have, as a 429


def test_default_deadline_comes_from_the_slo():
    assert default_max_wait_s(None, 60.0) == 10.0
    assert default_max_wait_s(200.0, 60.0) == 2.0  # ten SLOs
    assert default_max_wait_s(50.0, 60.0) == 1.0  # at least a second
    assert default_max_wait_s(10_000.0, 60.0) == 60.0  # never past the request timeout


def test_a_burst_after_quiet_traffic_is_judged_by_the_speed_seen_before():
    r, t = steady(1000.0)  # a busy spell proved 1,000 tokens/s
    t += 0.2
    r.finished(200, t)  # and ended
    for _ in range(200):  # then lone requests: 10 tokens answered 50 ms after they were sent (200 tokens/s)
        t += 1.0
        r.sent(10, t)
        r.finished(10, t + 0.05)
    assert r.rate < 210 and r.capacity == pytest.approx(1000 * math.exp(-10 / 20), rel=0.02)  # 10 s busy: faded
    r.sent(3000, t + 1.0)  # a burst: 5 s of work at the speed seen, 15 s at the lone requests' figure
    assert judge([r], 6.0, t + 1.0).admit
