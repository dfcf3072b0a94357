"""The soak's trend tests (validate/trend.py) on synthetic series: Theil-Sen slopes, the permutation check, and
"degrades" said only for a trend beyond the confirm point's spread, in P99, queue depth or memory."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.validate.trend import P_MAX, degradation, rising, spread, theil_sen, trends

CONFIRM = {"rate_rps": 30.0, "duration_s": 30.0, "p50_ms": 50.0, "p99_ms": 120.0,
           "spread": {"p99_ms": 40.0, "queue_depth": 5.0, "rss_mb": 8.0}}
MET = {"met": True, "terms": [{"term": "p99_e2e_ms", "value": 150.0, "limit": 200.0, "met": True}]}
MISSED = {"met": False, "terms": [{"term": "p99_e2e_ms", "value": 260.0, "limit": 200.0, "met": False}]}
T20 = [3.0 + 6.0 * i for i in range(20)]  # 20 windows of 6 s: a 2-minute soak


def noisy(level: float, slope_per_s: float, sd: float, n: int = 20, seed: int = 1) -> list[float]:
    rng = np.random.default_rng(seed)
    return [level + slope_per_s * t + rng.normal(0, sd) for t in T20[:n]]


def test_theil_sen_is_not_moved_by_one_outlier():
    x = np.arange(10.0)
    y = 2.0 * x + 1.0
    y[7] = 500.0
    assert theil_sen(x, y) == pytest.approx(2.0)


def test_a_flat_noisy_series_is_no_trend():
    r = rising(T20, noisy(150, 0.0, 20))
    assert r["p"] > P_MAX


def test_a_steady_climb_is_a_trend_with_its_rise():
    r = rising(T20, noisy(150, 1.0, 5))  # +1 ms per second, 114 s of windows
    assert r["p"] < 0.01
    assert r["slope_per_min"] == pytest.approx(60.0, rel=0.2) and r["rise"] == pytest.approx(114, rel=0.2)


def test_a_falling_series_is_no_rising_trend():
    assert rising(T20, noisy(300, -1.0, 5))["p"] > 0.5


def test_too_few_values_say_so():
    assert rising([0, 1, 2], [1, 2, 3])["slope_per_min"] is None


def test_long_series_are_binned_before_the_permutations():
    t = list(np.arange(3600.0))
    r = rising(t, [400.0 + 0.01 * x for x in t])  # an hour of RSS samples, +36 MB
    assert r["points_tested"] == 60 and r["rise"] == pytest.approx(36.0, rel=0.05) and r["p"] < 0.01


def test_spread_is_max_minus_min():
    assert spread([100.0, 140.0, None, 120.0]) == 40.0
    assert spread([None, 3.0]) is None


def test_a_significant_trend_within_the_confirm_spread_is_not_beyond_it():
    small = noisy(150, 0.25, 2)  # +28 ms over the soak: significant, but under the confirm's 40 ms spread
    t = trends({"p99_ms": (T20, small)}, CONFIRM["spread"])["p99_ms"]
    assert t["p"] < P_MAX and t["rise"] < 40 and not t["beyond"]
    assert not trends({"p99_ms": (T20, small)}, {})["p99_ms"]["beyond"]  # no spread known: never beyond


@pytest.mark.parametrize("name,series,words", [
    ("p99_ms", noisy(120, 1.2, 8), "window P99"),
    ("queue_depth", [0.5 * t for t in T20], "queue depth"),
    ("rss_mb", [500 + 0.3 * t for t in T20], "memory"),
])
def test_each_series_can_say_degrades(name, series, words):
    tested = trends({name: (T20, series)}, CONFIRM["spread"], floors={"rss_mb": 10.0})
    deg = degradation(CONFIRM, noisy(150, 0.0, 10), MISSED, False, 210.0, tested=tested)
    assert deg["degraded"] and deg["kind"] == "degrades over time" and deg["rising"] == [name]
    assert deg["verdict"].startswith(f"the server degrades over time: {words} +") and "Theil-Sen" in deg["verdict"]


def test_memory_under_its_floor_is_allocator_noise_not_a_trend():
    creep = [196.70 + 0.02 * i for i in range(8)]  # a 4 s soak: +0.14 MB, steadily, vs a 0.04 MB confirm spread
    t = trends({"rss_mb": (list(range(8)), creep)}, {"rss_mb": 0.04}, floors={"rss_mb": 10.0})["rss_mb"]
    assert t["p"] < P_MAX and t["rise"] > 0.04 and not t["beyond"]
    assert trends({"queue_depth": (T20, [0.005 * t for t in T20])}, {"queue_depth": 0.0})["queue_depth"]["beyond"] \
        is False  # under one request of queue
    # a 4 s soak sampled every 0.5 s that read one request waiting at its last instants (seen beside a busy host)
    step = trends({"queue_depth": ([0.5 * i for i in range(8)], [0, 0, 0, 0, 1, 1, 1, 1])}, {"queue_depth": 0.0})
    assert step["queue_depth"]["p"] < P_MAX and 1 < step["queue_depth"]["rise"] < 2
    assert step["queue_depth"]["beyond"] is False
    # a queue that keeps growing passes the floor
    assert trends({"queue_depth": (T20, [0.5 * t for t in T20])}, {"queue_depth": 0.0})["queue_depth"]["beyond"]


def test_no_trend_names_the_measured_cause_instead():
    flat_high = noisy(260, 0.0, 10)
    tested = trends({"p99_ms": (T20, flat_high)}, CONFIRM["spread"])
    deg = degradation(CONFIRM, flat_high, MISSED, False, 265.0, tested=tested)
    assert not deg["degraded"] and deg["kind"] == "slower from the start"
    assert "no trend beyond the confirm point's spread (window P99" in deg["verdict"]
    spell = [120.0] * 7 + [400.0] * 6 + [120.0] * 7
    deg = degradation(CONFIRM, spell, MISSED, True, 380.0, tested=trends({"p99_ms": (T20, spell)},
                                                                      CONFIRM["spread"]))
    assert not deg["degraded"] and deg["kind"] == "slow spell"


def test_a_soak_that_held_says_nothing_more():
    steady = noisy(120, 0.0, 10)
    deg = degradation(CONFIRM, steady, MET, False, 150.0, tested=trends({"p99_ms": (T20, steady)},
                                                                        CONFIRM["spread"]))
    assert deg["degraded"] is False and "verdict" not in deg
    assert degradation(None, steady, MISSED, True, 300.0) is None
