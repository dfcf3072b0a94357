"""Loads that hold: before the soak, validate confirms its rate with a long point and backs off until one meets
the SLO with margin; the soak runs there, and a soak that then misses the SLO is told apart (degrades over time
only with a trend beyond the confirm point's spread; else slower from the start, a slow spell, a busy host) with
the confirm point's figures beside it. Fake servers, no I/O."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from infertune.bench.results import ClientCheck, Offered, Percentiles, Point
from infertune.errors import InfertuneError
from infertune.results import EnvFingerprint
from infertune.validate import confirm as vconfirm
from infertune.validate import runner
from infertune.validate.config import Drill, ValidateConfig, ValidateResult
from infertune.validate.host import busy_spell
from infertune.validate.trend import degradation, trends


def test_confirm_duration_is_a_quarter_of_the_soak_within_5_to_60_s():
    assert ValidateConfig(target="m", soak_s="2m").confirm_s == 30
    assert ValidateConfig(target="m", soak_s="10s").confirm_s == 5
    assert ValidateConfig(target="m", soak_s="1h").confirm_s == 60
    assert ValidateConfig(target="m", soak_s="2m", peak=40).confirm_s == 0  # the user chose the rate
    assert ValidateConfig(target="m", soak_s="2m", peak=40, soak_confirm_s="20s").confirm_s == 20
    assert ValidateConfig(target="m", soak_s="2m", soak_confirm_s=0).confirm_s == 0
    assert ValidateConfig(target="m", soak_s=0).confirm_s == 0


def _fake_load(monkeypatch, sustainable: float, calls: list):
    """validate.confirm's load replaced by a server that keeps up but whose P99 over a window grows with the
    rate above `sustainable` (7 ms per req/s over it)."""
    def run_streams(url, api, streams, warmup, duration, timeout, seed=0, on_start=None):
        calls.append((streams[0].rate, warmup, duration))
        return SimpleNamespace(rate=streams[0].rate, duration=duration)

    def point(run, url, api, timeout, rate=None, error_budget=None, **kw):
        p99 = 40.0 + 7.0 * max(0.0, rate - sustainable) * run.duration / 5
        return Point(offered=Offered(rate=rate), n=int(rate * run.duration), ok=int(rate * run.duration),
                     achieved_rps=rate, window_s=run.duration, latency_ms=Percentiles(p50=20.0, p99=p99),
                     client=ClientCheck(sent_rps=rate))

    monkeypatch.setattr(vconfirm, "run_streams", run_streams)
    monkeypatch.setattr(vconfirm, "point", point)


def test_the_soak_rate_is_confirmed_with_long_points_and_backed_off_until_one_holds(monkeypatch):
    calls: list = []
    _fake_load(monkeypatch, sustainable=30.0, calls=calls)
    cfg = ValidateConfig(target="http://127.0.0.1:9", soak_s="2m")
    result = ValidateResult(config=cfg.model_dump(mode="json"), environment=EnvFingerprint(),
                            peak={"rps": 44.45, "source": "slo-search", "slo": cfg.slo})
    logs: list[str] = []
    target = SimpleNamespace(url="http://127.0.0.1:9")
    req = SimpleNamespace(bodies=[b"{}"], input_tokens=[1])
    rate, ev = runner.confirm_soak(target, "embeddings", req, 44.45, cfg, result, logs.append)
    # 0.8 x 44.45 = 35.56: P99 40 + 7 x 5.56 x 6 = 273 ms > 200; 32.0: 124 ms
    assert [round(r, 2) for r, _, _ in calls] == [35.56, 32.0] and all(d == 30 for _, _, d in calls)
    assert all(w == 5 for _, w, _ in calls)  # a warm-up of a sixth of the point: the queue settles first
    assert rate == pytest.approx(32.004) and ev["rate_rps"] == pytest.approx(32.004)
    assert ev["duration_s"] == 30
    assert result.peak["sustainable_rps"] == pytest.approx(32.004) and result.peak["rps"] == 44.45
    assert [s["passed"] for s in result.peak["confirm"]["steps"]] == [False, True]
    assert any("sustainable 32 req/s" in s and "the soak runs at it" in s for s in logs), logs
    # --peak without --soak-confirm: no confirm, the soak runs at fraction x peak as before
    flag = ValidateConfig(target="http://127.0.0.1:9", soak_s="2m", peak=40)
    assert runner.confirm_soak(target, "embeddings", None, 40, flag, result, logs.append) == (None, None)


def test_no_rate_that_holds_is_refused_with_every_steps_figures(monkeypatch):
    _fake_load(monkeypatch, sustainable=1.0, calls=[])
    # below the fake's 40 ms floor: no rate can meet it
    cfg = ValidateConfig(target="http://127.0.0.1:9", soak_s="20s", slo="p99_e2e_ms<=30")
    with pytest.raises(InfertuneError, match=r"no rate from 35.56 down to .* met p99_e2e_ms<=24 \(p99_e2e_ms<=30 "
                                             r"with --soak-margin 0.8\) for 5 s \(35.56 req/s: P99 .*--soak-confirm 0"):
        vconfirm.confirm_soak_rate(SimpleNamespace(url="u"), "embeddings",
                                   SimpleNamespace(bodies=[b"{}"], input_tokens=[1]), 35.56, cfg, print)


CONFIRM = {"rate_rps": 32.0, "duration_s": 30.0, "p50_ms": 60.0, "p99_ms": 150.0,
           "spread": {"p99_ms": 30.0, "queue_depth": 4.0, "rss_mb": 3.0}}
SLO_MISSED = {"met": False, "terms": [{"term": "p99_e2e_ms", "value": 260.0, "limit": 200.0, "met": False}]}
RISING = [140, 150, 190, 230, 270, 290]


def _judged(p99s: list[float], **kw):
    """degradation() of 6 s windows with their P99 trend tested against CONFIRM's spread."""
    t = [3.0 + 6 * i for i in range(len(p99s))]
    return degradation(CONFIRM, p99s, kw.pop("slo", SLO_MISSED), kw.pop("drifted", False), kw.pop("soak_p99", 260.0),
                       tested=trends({"p99_ms": (t, p99s)}, CONFIRM["spread"]), **kw)


def test_degradation_is_told_apart_from_a_slow_start_and_a_slow_spell():
    steady = [150, 160, 150, 165, 155, 160]
    held = _judged(steady, slo={"met": True, "terms": []}, soak_p99=170.0)
    assert held["degraded"] is False and "verdict" not in held
    assert degradation(None, steady, SLO_MISSED, True, 500.0) is None  # no confirm point to compare
    rising = _judged(RISING)
    assert rising["degraded"] and rising["kind"] == "degrades over time" and rising["rising"] == ["p99_ms"]
    assert "30 s confirm point at 32 req/s met the SLO (P50 60.0 ms, P99 150.0 ms)" in rising["verdict"]
    assert "window P99 +" in rising["verdict"] and "Theil-Sen" in rising["verdict"]
    assert "vs the confirm point's spread 30 ms" in rising["verdict"]
    start = _judged([255, 250, 260, 240, 250, 250])
    assert not start["degraded"] and start["kind"] == "slower from the start"
    assert "from its first third on" in start["verdict"] and "no trend beyond" in start["verdict"]
    # the recorded 2-min soak of 2026-12-02: fine, a spell of 350-680 ms in the middle, then back near 150
    recorded = [115, 138, 96, 97, 74, 84, 80, 346, 682, 383, 204, 198, 362, 194, 147, 169, 114, 110, 181, 193]
    spell = _judged(recorded, drifted=True, soak_p99=338.5)
    assert not spell["degraded"] and spell["kind"] == "slow spell" and "not a trend" in spell["verdict"], spell
    # drift alone (the SLO met) with a rising P99 beyond the confirm point's spread: degrades
    within = {"met": True, "terms": SLO_MISSED["terms"]}
    drift = _judged([80, 85, 110, 120, 140, 150], slo=within, drifted=True, soak_p99=150.0)
    assert drift["kind"] == "degrades over time"


def _soak_drill(slo_only: bool, deg: dict) -> Drill:
    ev = {"slo": {"slo": "p99_e2e_ms<=200", "met": False, "missed": ["p99_e2e_ms 260.0 > 200"]},
          "slo_only_failure": slo_only, "rate_rps": 32.0, "degradation": deg}
    return Drill(name="soak", passed=False, reason="...", evidence=ev)


def test_the_verdict_says_the_server_degrades_with_the_confirm_points_figures():
    deg = _judged(RISING)
    res = ValidateResult(config={}, environment=EnvFingerprint(), drills=[_soak_drill(True, deg)])
    code, line = runner.final_verdict(res)
    assert code == 4 and line.startswith("SLO NOT MET: the soak held up but p99_e2e_ms 260.0 > 200")
    assert "at 32.0 req/s; the server degrades over time: window P99 +" in line
    assert "the 30 s confirm point at 32 req/s met the SLO" in line
    # drift past --max-p99-drift is a failure of its own (exit 1): the same sentence follows
    res = ValidateResult(config={}, environment=EnvFingerprint(), drills=[_soak_drill(False, deg)])
    code, line = runner.final_verdict(res)
    assert code == 1 and line.startswith("FAILED: soak; the server degrades over time")
    held = ValidateResult(config={}, environment=EnvFingerprint(),
                          drills=[_soak_drill(True, {"degraded": False, "confirm": CONFIRM})])
    assert "degrades" not in runner.final_verdict(held)[1]
    # no trend: the verdict names the measured cause instead, never "degrades"
    start = _judged([255, 250, 260, 240, 250, 250])
    res = ValidateResult(config={}, environment=EnvFingerprint(), drills=[_soak_drill(True, start)])
    line = runner.final_verdict(res)[1]
    assert "degrades" not in line and "over the SLO from its first third on" in line


def test_report_shows_the_sustainable_rate_beside_the_peak(tmp_path):
    from infertune.validate.report import sustainable_line, write_outputs

    steps = [{"load": 35.56, "passed": False, "window_s": 30, "p50_ms": 90.0, "p99_ms": 316.0},
             {"load": 32.0, "passed": True, "window_s": 30, "p50_ms": 60.0, "p99_ms": 150.0}]
    peak = {"rps": 44.45, "source": "slo-search", "slo": "p99_e2e_ms<=200", "confirmed": True,
            "sustainable_rps": 32.0, "confirm": {"duration_s": 30.0, "start": 35.56, "steps": steps}}
    ev = {"rate_rps": 32.0, "latency_ms": {"p99": 170.0}}
    soak = Drill(name="soak", passed=True, reason="ok", evidence=ev)
    config = {"soak_fraction": 0.8, "search_duration_s": 5.0}
    res = ValidateResult(config=config, environment=EnvFingerprint(), target={"url": "http://x"}, peak=peak,
                         drills=[soak], passed=True)
    line = sustainable_line(res)
    assert line.startswith("Sustainable 32 req/s: a 30 s point met p99_e2e_ms<=200 there (P50 60.0 ms, "
                           "P99 150.0 ms)")
    assert "failed first: 35.56 (P99 316.0 ms) req/s" in line
    write_outputs(res, tmp_path)
    page = (tmp_path / "validate.html").read_text()
    assert "Peak 44.45 req/s" in page and "Sustainable 32 req/s" in page


def test_a_busy_host_is_named_whatever_the_shape_of_the_slowdown():
    # without a trend beyond the confirm point's spread, a busy host is named whatever the shape
    deg = degradation(CONFIRM, RISING, SLO_MISSED, False, 260.0, others_cpu=[0.05, 1.2, 1.4])
    assert deg["kind"] == "host busy"
    assert "other processes on this host: 0.1 / 1.2 / 1.4 cores" in deg["verdict"]
    assert "not necessarily the server's" in deg["verdict"]
    quiet = degradation(CONFIRM, RISING, SLO_MISSED, False, 260.0, others_cpu=[0.05, 0.1, 0.2])
    assert quiet["kind"] == "over the SLO" and "0.1 / 0.1 / 0.2 cores" in quiet["verdict"]
    # a measured trend beyond the spread is said first (the busy host is in the figures the soak keeps)
    assert _judged(RISING, others_cpu=[0.05, 1.2, 1.4])["kind"] == "degrades over time"


def _with_clocks(sample, clock, busy, own):
    """Run OtherCPU.sample with time.monotonic, psutil.cpu_times and the process-tree CPU read from iterators."""
    from types import SimpleNamespace
    from unittest import mock

    from infertune.validate import host

    def run():
        with mock.patch.object(host.time, "monotonic", lambda: next(clock)), \
                mock.patch("psutil.cpu_times", lambda: SimpleNamespace(user=next(busy), nice=0.0, system=0.0)), \
                mock.patch.object(host, "_tree_cpu_s", lambda _p: next(own)):
            return sample()
    return run


def test_other_cpu_and_its_thirds():
    from infertune.validate.host import OtherCPU, by_third

    o = OtherCPU()
    assert o.sample() is None  # the first sample has nothing to compare with
    # the next: (host busy seconds - this process tree's seconds) / wall seconds, from stand-in clocks
    clock, busy, own = iter([10.0, 12.0, 12.0]), iter([100.0, 103.0, 103.5]), iter([5.0, 6.0, 9.0])
    o._last = None
    o.sample = _with_clocks(o.sample, clock, busy, own)
    assert o.sample() is None
    assert o.sample() == 1.0           # (3 busy - 1 own) / 2 s
    assert o.sample() is None          # the clock did not move: no rate
    t = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert by_third(t, [0.0] * 3 + [1.0] * 3 + [None, 2.0, 2.0, 2.0], 0, 9) == [0.0, 1.0, 2.0]
    assert by_third(t, [None] * 10, 0, 9) == [None, None, None]


# a recorded 2-min soak on the 2-core box (2026-12-02): another process took ~1 core from 46 to 59 s, and
# the windows there broke the SLO; the thirds' means (0.1 / 0.4 / 0.1 cores) hid it
SPELL_T = [-0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5, 16.5,
           17.5, 18.5, 19.5, 20.5, 21.5, 22.5, 23.5, 24.5, 25.5, 26.5, 27.5, 28.5, 29.5, 30.5, 31.5, 32.5, 33.5,
           34.5, 35.5, 36.5, 37.5, 38.5, 39.5, 40.5, 41.5, 42.5, 43.5, 44.5, 45.5, 46.5, 47.5, 48.5, 49.5, 50.5,
           51.5, 52.5, 53.5, 54.5, 55.5, 56.5, 57.5, 58.5, 59.5, 60.5, 61.5, 62.5, 63.5, 64.5, 65.5, 66.5, 67.5,
           68.5, 69.5, 70.5, 71.5, 72.5, 73.5, 74.5, 75.5, 76.5, 77.5, 78.5, 79.5, 80.5, 81.5, 82.5, 83.5, 84.5,
           85.5, 86.5, 87.5, 88.5, 89.5, 90.5, 91.5, 92.5, 93.5, 94.5, 95.5, 96.5, 97.5, 98.5, 99.5, 100.5,
           101.5, 102.5, 103.5, 104.5, 105.5, 106.5, 107.5, 108.5, 109.5, 110.5, 111.5, 112.5, 113.5, 114.5,
           115.5, 116.5, 117.5, 118.5, 119.5, 120.5, 121.5, 122.5, 123.5, 124.5, 125.5]
SPELL_CORES = [None, 0.03, 0.0, 0.02, 0.019, 0.051, 0.0, 0.021, 0.01, 0.02, 0.062, 0.245, 0.049, 0.0, 0.0, 0.033,
               0.0, 0.05, 0.198, 0.04, 0.02, 0.0, 0.01, 0.021, 0.0, 0.02, 0.01, 0.362, 0.02, 0.0, 0.0, 0.01, 0.0,
               0.03, 0.48, 0.854, 0.021, 0.03, 0.039, 0.242, 0.847, 0.049, 0.01, 0.0, 0.0, 0.02, 0.02, 0.847,
               0.867, 0.87, 0.906, 0.92, 0.96, 0.91, 0.808, 1.008, 1.18, 0.99, 0.885, 0.805, 0.228, 0.152, 0.439,
               0.011, 0.04, 0.124, 0.734, 0.03, 0.031, 0.02, 0.0, 0.02, 0.0, 0.0, 0.049, 0.021, 0.039, 0.276,
               0.085, 0.02, 0.0, 0.052, 0.0, 0.156, 0.104, 0.807, 0.028, 0.0, 0.01, 0.01, 0.081, 0.029, 0.01,
               0.021, 0.0, 0.039, 0.031, 0.01, 0.244, 0.051, 0.059, 0.059, 0.0, 0.02, 0.01, 0.01, 0.0, 0.03,
               0.03, 0.019, 0.307, 0.265, 0.0, 0.02, 0.058, 0.04, 0.05, 0.021, 0.0, 0.01, 0.051, 0.03, 0.202,
               0.043, 0.041, 0.029, 0.03]
SPELL_WINDOW_P99 = [138.6, 204.7, 137.6, 337.9, 1347.2, 1062.0, 5467.4, 9542.5, 5321.1, 2144.0, 126.3, 415.9,
                    1153.1, 900.5, 190.0, 184.1, 124.6, 243.8, 134.5, 142.5]
SPELL_WINDOW_T = [9.0, 15.0, 21.0, 27.0, 33.0, 39.0, 45.0, 51.0, 57.0, 63.0, 69.0, 75.0, 81.0, 87.0, 93.0, 99.0,
                  105.0, 111.0, 117.0, 123.0]


def test_a_busy_spell_over_the_slow_windows_is_named_and_a_quiet_host_is_not_blamed():
    spell = busy_spell(SPELL_T, SPELL_CORES, SPELL_WINDOW_T, SPELL_WINDOW_P99, 6.0, 200.0)
    assert spell is not None and 45 <= spell["from_s"] <= 47 and 58 <= spell["to_s"] <= 61, spell
    assert 0.8 <= spell["mean_cores"] <= 1.1
    thirds = [0.1, 0.39, 0.05]
    deg = degradation(CONFIRM, SPELL_WINDOW_P99, SLO_MISSED, False, 7649.9, thirds, spell)
    assert deg["kind"] == "host busy" and f"from {spell['from_s']:g} s to {spell['to_s']:g} s" in deg["verdict"]
    # without the spell the thirds alone do not reach HOST_BUSY_CORES: the verdict falls to the shape
    assert degradation(CONFIRM, SPELL_WINDOW_P99, SLO_MISSED, False, 7649.9, thirds)["kind"] != "host busy"
    quiet = [0.0 if c is not None else None for c in SPELL_CORES]
    assert busy_spell(SPELL_T, quiet, SPELL_WINDOW_T, SPELL_WINDOW_P99, 6.0, 200.0) is None
    # a busy spell where every window met the SLO is no excuse
    fast = [100.0] * len(SPELL_WINDOW_P99)
    assert busy_spell(SPELL_T, SPELL_CORES, SPELL_WINDOW_T, fast, 6.0, 200.0) is None


def test_the_refusal_says_whether_p99_falls_with_the_rate():
    from infertune.bench.results import ConfirmStep

    def steps(p99s):
        return [ConfirmStep(load=24.06 * 0.9**i, passed=False, window_s=30, p99_ms=p) for i, p in enumerate(p99s)]

    # a quiet 2-core box's MiniLM: 24 down to 14 req/s, P99 272.9 ... 165.6 ms against a 160 ms limit
    flat = vconfirm.rate_trend(steps([272.9, 203.4, 185.9, 224.7, 264.4, 165.6]))
    assert flat.startswith("P99 does not fall steadily with the rate (P99 272.9, 203.4, 185.9, 224.7, 264.4, 165.6 ms "
                           "from 24.06 down to 14.21 req/s; rank correlation with the rate 0.49; the lowest 165.6 ms)")
    assert "a lower rate is unlikely to meet the SLO" in flat
    falling = vconfirm.rate_trend(steps([900.0, 600.0, 400.0, 250.0]))
    assert falling.startswith("P99 falls with the rate") and "a lower rate may hold" in falling
    assert vconfirm.rate_trend(steps([300.0, 250.0])) == "the SLO search's short points do not hold here"
