"""The arithmetic and parsing behind validate's verdicts, on made-up series whose answers are known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infertune.errors import InfertuneError
from infertune.validate import analysis
from infertune.validate.config import Drill, ValidateConfig, ValidateResult, parse_duration
from infertune.validate.longtail import buckets
from infertune.workloads.bodies import Requests


def _series(slope_mb_h: float, seconds: float = 600, every: float = 1.0, noise_mb: float = 0.5, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = np.arange(0, seconds, every)
    y = 500 + slope_mb_h * t / 3600 + rng.normal(0, noise_mb, t.size)
    return t.tolist(), y.tolist()


def test_slope_recovers_a_known_leak_and_flags_it():
    t, y = _series(360.0)  # 0.1 MB/s
    fit = analysis.rss_slope(t, y)
    lo, hi = fit["ci95_mb_per_h"]
    assert lo <= 360.0 <= hi and abs(fit["slope_mb_per_h"] - 360) < 20
    leak, why = analysis.leak_verdict(fit, threshold_mb_h=100)
    assert leak and "climbs" in why


def test_flat_noisy_memory_is_not_a_leak():
    for seed in range(5):
        t, y = _series(0.0, noise_mb=2.0, seed=seed)
        leak, _ = analysis.leak_verdict(analysis.rss_slope(t, y), threshold_mb_h=100)
        assert not leak


def test_warmup_growth_then_flat_is_not_a_leak():
    t = np.arange(0, 600.0)
    y = 500 + 40 * (1 - np.exp(-t / 30))  # +40 MB in the first two minutes, then flat
    fit = analysis.rss_slope(t.tolist(), y.tolist())
    assert not analysis.leak_verdict(fit, threshold_mb_h=100)[0], fit


def test_small_rise_of_a_short_soak_is_under_the_growth_floor():
    t, y = _series(1000.0, seconds=8, every=0.5, noise_mb=0.05)  # ~2 MB in 8 s: steep, but tiny
    fit = analysis.rss_slope(t, y)
    assert fit["slope_mb_per_h"] > 100
    leak, why = analysis.leak_verdict(fit, threshold_mb_h=100, min_growth_mb=10)
    assert not leak and "under 10 MB" in why


def test_p99_drift_and_knee():
    d = analysis.p99_drift([10, 11, 10, 12, 20, 21, 22, 19, 20])
    # thirds of 9 windows: median(10, 11, 10) = 10 first, median(22, 19, 20) = 20 last
    assert (d["first_third_p99_ms"], d["last_third_p99_ms"], d["windows_per_third"]) == (10, 20, 3)
    assert d["ratio"] == 2.0
    assert analysis.p99_drift([10, 10, 10, 10])["ratio"] == 1.0
    assert analysis.p99_drift([5, 5])["ratio"] is None
    k = analysis.knee([10, 20, 40, 80], [5, 6, 9, 30])
    assert k["rate"] == 80 and k["base_p99_ms"] == 5
    assert analysis.knee([10, 20], [5, 6])["rate"] is None
    assert analysis.knee([10, 20, 40], [5, 10, 10.1])["rate"] == 40  # exactly 2x the base is not over it


def test_durations_and_config():
    assert parse_duration("10m") == 600 and parse_duration("1h") == 3600 and parse_duration("500ms") == 0.5
    assert parse_duration("45") == 45
    with pytest.raises(InfertuneError):
        parse_duration("ten minutes")
    cfg = ValidateConfig(target="http://x:1", soak_s="2m", burst_s="3s")
    assert cfg.soak_s == 120 and cfg.burst_s == 3 and cfg.is_url
    assert ValidateConfig(target="runs/a").faults == ["kill-worker", "stall", "burst", "oom-guard", "finite-output"]


def test_cli_rejects_unknown_fault():
    from infertune.cli.validate import _faults

    assert _faults("burst, stall") == ["burst", "stall"] and _faults("none") == []
    with pytest.raises(InfertuneError, match="unknown fault"):
        _faults("kill-worker,reboot")


def test_long_tail_buckets_pick_lengths_and_go_past_the_limit():
    lengths = list(range(1, 101))
    bodies = [json.dumps({"model": "m", "input": " ".join(["w"] * n)}).encode() for n in lengths]
    req = Requests(bodies, lengths, [None] * 100, "test")
    b = buckets(req, max_tokens=64, per_bucket=3)
    assert set(b) == {"p50", "p90", "p99", "over_limit"}
    assert all(abs(n - b["p90"]["tokens_est"]) <= 2 for n in b["p90"]["in_tokens"])
    over = json.loads(b["over_limit"]["bodies"][0])
    assert len(over["input"].split()) == 96 and over["model"] == "m"
    assert "over_limit" not in buckets(req, max_tokens=None)


def test_report_writes_contract_and_html(tmp_path):
    from infertune.hardware.fingerprint import fingerprint
    from infertune.validate.report import write_outputs

    res = ValidateResult(config={"target": "x"}, environment=fingerprint(), target={"url": "http://x"},
                         peak={"rps": 10, "source": "flag"},
                         drills=[Drill(name="soak", passed=False, reason="memory climbs", evidence={"a_ms": 1},
                                       series={"window_t_s": [1, 2, 3], "window_p50_ms": [1, 1, 1],
                                               "window_p99_ms": [2, 2, 2], "t_s": [0, 1, 2], "rss_mb": [1, 2, 3],
                                               "queue_depth": [0, 1, 0]}),
                                 Drill(name="stall", reason="no worker")])
    write_outputs(res, tmp_path)
    data = json.loads((tmp_path / "validate.json").read_text())
    assert {"drills", "environment", "config"} <= set(data)
    assert [(d["name"], d["passed"]) for d in data["drills"]] == [("soak", False), ("stall", None)]
    page = (tmp_path / "validate.html").read_text()
    assert "FAIL" in page and "skipped" in page and "memory climbs" in page
