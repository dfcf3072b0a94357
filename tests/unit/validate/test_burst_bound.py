"""The burst drill's bound on an admitted request's wait: behind at most max_queue others, at the rate the
queue drained at. A busy host drains slower than the peak found earlier; that is not unbounded queueing."""

import pytest

from infertune.bench.records import Record
from infertune.validate.faults import burst_bound_ms, drain_rps


def _recs(ends, err=""):
    return [Record(0.0, 0.0, 0.0, t, err, "", 0, 0, None) for t in ends]


def test_drain_rate_is_answers_per_second_between_the_first_and_last_answer():
    assert drain_rps(_recs([1 + i * 0.05 for i in range(21)])) == pytest.approx(20.0)
    assert drain_rps(_recs([1.0, 2.0])) is None  # too few to say
    assert drain_rps(_recs([1 + i * 0.05 for i in range(21)], err="HTTP 429")) is None  # refusals are not drained


def test_a_slow_drain_widens_the_bound_and_a_fast_one_does_not():
    assert burst_bound_ms(32, 40.0, None, 1000.0, 30.0) == pytest.approx(1.5 * 32 / 40 * 1e3 + 1000.0)
    assert burst_bound_ms(32, 40.0, 20.0, 1000.0, 30.0) == pytest.approx(1.5 * 32 / 20 * 1e3 + 1000.0)
    assert burst_bound_ms(32, 40.0, 80.0, 1000.0, 30.0) == burst_bound_ms(32, 40.0, None, 1000.0, 30.0)
    assert burst_bound_ms(None, 40.0, 20.0, 1000.0, 30.0) == 30_000.0


def test_a_queue_without_a_bound_still_fails_at_the_rate_it_drained():
    # 400 requests admitted into an unbounded queue drained at 20/s: the last waits ~20 s, far past 32 ahead of it
    recs = [Record(0.0, 0.0, 0.0, 0.5 + i / 20, "", "", 0, 0, None) for i in range(400)]
    waits_ms = sorted((r.done - r.sched) * 1e3 for r in recs)
    p99 = waits_ms[int(0.99 * len(waits_ms))]
    assert p99 > burst_bound_ms(32, 40.0, drain_rps(recs), 0.0, 30.0)
