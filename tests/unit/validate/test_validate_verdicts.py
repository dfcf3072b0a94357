"""validate's verdicts are honest: a soak whose P99 breaks the SLO is not a PASS (exit 4), a peak
that passed once is soaked only at a rate the long confirm points held, a long soak says where it is at least once a
minute."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from infertune.bench.results import Offered, Percentiles, Point
from infertune.errors import InfertuneError
from infertune.results import EnvFingerprint
from infertune.validate import runner
from infertune.validate.analysis import confirmed_rates, slo_terms_verdict
from infertune.validate.config import Drill, ValidateConfig, ValidateResult
from infertune.validate.soak import Sampler, progress_every


def _pt(rate: float, ok: bool | None = None, p99: float = 100.0) -> Point:
    return Point(offered=Offered(rate=rate), n=100, ok=100, latency_ms=Percentiles(p50=p99 / 2, p99=p99),
                 slo_pass=ok)


def test_soak_p99_over_the_slo_is_missed():
    # the case: P99 505.6 ms against p99_e2e_ms<=200
    v = slo_terms_verdict("p99_e2e_ms<=200", _pt(40, p99=505.6))
    assert v["met"] is False and v["missed"] == ["p99_e2e_ms 505.6 > 200"]
    assert slo_terms_verdict("p99_e2e_ms<=200,p50_e2e_ms<=100", _pt(40, p99=180))["met"] is True
    # a term the soak did not measure (TTFT without streaming) is listed, not judged
    v = slo_terms_verdict("p99_ttft_ms<=50", _pt(40))
    assert v["met"] is True and v["terms"][0]["met"] is None


def _result(*drills: Drill) -> ValidateResult:
    return ValidateResult(config={}, environment=EnvFingerprint(), drills=list(drills))


def _soak(passed: bool, slo_only: bool) -> Drill:
    ev = {"slo": {"slo": "p99_e2e_ms<=200", "met": not slo_only, "missed": ["p99_e2e_ms 505.6 > 200"] if slo_only
                  else []}, "slo_only_failure": slo_only, "rate_rps": 32.0}
    return Drill(name="soak", passed=passed, reason="", evidence=ev)


def test_exit_codes():
    ok = Drill(name="burst", passed=True)
    assert runner.final_verdict(_result(_soak(True, False), ok))[0] == 0
    code, line = runner.final_verdict(_result(_soak(False, True), ok))
    assert code == runner.SLO_MISSED_EXIT == 4 and line.startswith("SLO NOT MET") and "505.6 > 200" in line
    assert "PASS" not in line
    # a real failure wins over an SLO miss
    assert runner.final_verdict(_result(_soak(False, True), Drill(name="burst", passed=False)))[0] == 1
    assert runner.final_verdict(_result(Drill(name="soak", passed=None)))[0] == 1  # nothing ran


def test_confirmed_rates():
    pts = [_pt(10, True), _pt(20, True), _pt(40, False), _pt(28, True), _pt(28, False), _pt(20, True)]
    r = confirmed_rates(pts)
    assert r["confirmed"] == 20 and r["passed_once"] == 28
    assert r["runs"]["28"] == {"pass": 1, "fail": 1}


def _fake_bench(points, met=False, max_load=None):
    slo = SimpleNamespace(steps=["..."], met=met, max_load=max_load, bracket=[None, None])
    return lambda cfg, log=None: SimpleNamespace(slo=slo, points=points)


def _find_peak(monkeypatch, tmp_path, res, **kw):
    import infertune.bench.runner

    monkeypatch.setattr(infertune.bench.runner, "bench", res)
    req = SimpleNamespace(bodies=[b'{"input": "x"}'])
    cfg = ValidateConfig(target="http://127.0.0.1:9", search_duration_s=1, **kw)
    logs: list[str] = []
    target = SimpleNamespace(url="http://127.0.0.1:9")
    return runner.find_peak(target, "embeddings", None, req, cfg, tmp_path, logs.append), logs


def test_unconfirmed_peak_soaks_at_the_highest_confirmed_rate(monkeypatch, tmp_path):
    pts = [_pt(10, True), _pt(20, True), _pt(20, True), _pt(28, True), _pt(28, False)]
    peak, logs = _find_peak(monkeypatch, tmp_path, _fake_bench(pts))
    assert peak["rps"] == 20 and peak["unconfirmed_rps"] == 28 and peak["confirmed"] is True
    assert "highest confirmed" in peak["basis"] and any("highest confirmed rate 20" in s for s in logs)


def test_a_peak_that_passed_only_once_goes_to_the_long_confirm_points_or_is_refused_without_them(monkeypatch,
                                                                                                 tmp_path):
    pts = [_pt(10, True), _pt(20, True), _pt(20, False)]
    # the soak's confirm step (long points, backing off until the SLO holds with margin) decides from it
    peak, logs = _find_peak(monkeypatch, tmp_path, _fake_bench(pts))
    assert peak["rps"] == 20 and peak["confirmed"] is False and peak["basis"].startswith("passed once")
    assert any("confirm step's" in s for s in logs)
    # without that step nothing would check it: refused
    with pytest.raises(InfertuneError, match=r"confirmed no peak.*--peak"):
        _find_peak(monkeypatch, tmp_path, _fake_bench(pts), soak_confirm_s=0)
    with pytest.raises(InfertuneError, match=r"no rate passed"):
        _find_peak(monkeypatch, tmp_path, _fake_bench([_pt(10, False), _pt(5, False)]))


def test_confirmed_search_answer_is_used_as_is(monkeypatch, tmp_path):
    peak, _ = _find_peak(monkeypatch, tmp_path, _fake_bench([_pt(30, True), _pt(30, True)], met=True, max_load=30))
    assert peak["rps"] == 30 and peak["basis"].startswith("confirmed")


def test_progress_at_least_once_a_minute():
    assert progress_every(3600 + 10) == 60 and progress_every(60) == 10 and progress_every(300) == 50


def test_sampler_reports_progress_while_sampling():
    target = SimpleNamespace(url="http://127.0.0.1:9", rss_mb=lambda: 123.0)  # /metrics: nothing listens
    seen: list[float] = []
    s = Sampler(target, 0.05, progress=seen.append, every_s=0.2)
    s.start(time.monotonic())
    deadline = time.monotonic() + 30  # three lines are due within 0.6 s: a busy box delays them, not more
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    s.stop()
    # the k-th line comes once k x every_s have passed, never before: as often as asked, not more
    assert len(seen) >= 3 and all(t >= 0.2 * (k + 1) for k, t in enumerate(seen)), seen
    assert seen == sorted(seen)
