"""Errors are never throughput: a point with more than 1% failed requests is error-laden, not
valid, shown as such in the table, bench.json and bench.html, and never quoted as max throughput; bench
waits for a server that refuses connections or answers 503 before its first point (bench.ready, with a
fake probe)."""

from __future__ import annotations

import json

from infertune.bench.config import BenchConfig
from infertune.bench.ready import ANSWERED, LOADING, READY, REFUSED, patience, wait_until
from infertune.bench.records import Record
from infertune.bench.results import BenchResult, Offered, Percentiles, Point
from infertune.bench.slo import parse_slo
from infertune.bench.stats import build_point
from infertune.results import EnvFingerprint


def _rec(sched: float, kind: str = "", msg: str = "usage", lat: float = 0.01) -> tuple:
    return Record(sched, sched, float("nan"), sched + lat, kind, msg, 0, 5, None)


def _loading_point(n: int = 1000, ok: int = 60, budget: float | None = 0.01) -> Point:
    """A server that is still loading: most requests answered 503 in microseconds, a few succeeded."""
    msg = 'HTTP 503: {"error": "model is still loading"}'
    recs = [_rec(i / n, "http_5xx", msg, 0.0002) for i in range(n - ok)]
    recs += [_rec((n - ok + i) / n) for i in range(ok)]
    res = [{"records": recs, "beats": [0.001] * 10, "cpu": 0.1, "wall": 1.0}]
    return build_point(res, offered=Offered(rate=n), t0=0.0, warmup=0.0, duration=1.0, streaming=False,
                       bench_t0=0.0, cfg=BenchConfig(url="http://h"), mode="rate", error_budget=budget)


def test_a_point_with_more_than_1_percent_errors_is_error_laden_and_not_valid():
    p = _loading_point()
    assert p.error_laden and not p.valid and p.errors.rate == 0.94
    assert "94.0% of 1,000 requests failed (940 x http_5xx" in p.invalid_reason
    assert "not the server's throughput" in p.invalid_reason
    assert "940 answered HTTP 503" in p.invalid_reason and "--wait-ready" in p.invalid_reason
    # exactly at the budget is within it; without a budget (validate's fault drills) there is no such rule
    at = _loading_point(n=1000, ok=990)
    assert at.errors.rate == 0.01 and at.valid and not at.error_laden
    assert _loading_point(budget=None).valid


def test_an_slo_never_passes_an_error_laden_point_even_with_fast_answers():
    slo = parse_slo("p99_e2e_ms<=200", 0.01, streaming=False)
    p = _loading_point()
    assert p.latency_ms.p99 < 200  # the few that succeeded were fast
    ok, notes = slo.check(p)
    assert not ok and "94.0% of 1,000 requests failed" in notes[0]


def _result(points: list[Point]) -> BenchResult:
    return BenchResult(config={"duration": 10.0}, environment=EnvFingerprint(),
                       target={"url": "http://h", "api": "embeddings"}, points=points)


def test_max_throughput_never_quotes_an_error_laden_point(tmp_path, capsys):
    from infertune.bench.report import best_point, print_summary, write_outputs

    laden = _loading_point()
    laden.label = "rate=1000/s"
    good = Point(offered=Offered(rate=30), label="rate=30/s", n=300, ok=300, achieved_rps=30.0,
                 latency_ms=Percentiles(p50=20, p99=40, n=300))
    res = _result([laden, good])
    assert laden.achieved_rps > good.achieved_rps  # the 503s were quick: more "ok req/s" than the real point
    assert best_point(res) is good
    # every point error-laden: nothing is quoted, and the summary says why
    only = _result([laden])
    assert best_point(only) is None
    print_summary(only)
    err = capsys.readouterr().err
    assert "max throughput: none to quote" in err and "940 x http_5xx" in err
    assert "NO: errors" in err and "ERROR-LADEN (not valid) rate=1000/s" in err
    write_outputs(only, tmp_path)
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["points"][0]["error_laden"] is True and data["points"][0]["valid"] is False
    assert "error_laden" in (tmp_path / "bench.csv").read_text().splitlines()[0]
    page = (tmp_path / "bench.html").read_text()
    assert "No throughput to quote" in page and "NO: errors" in page
    assert "1 of 1 load points error-laden" in page
    assert "Max throughput" not in page


class _Fake:
    """A probe answering from a script of states, on a fake clock that sleep() advances."""

    def __init__(self, states: list[str]):
        self.states, self.t, self.calls = states, 0.0, 0

    def probe(self):
        s = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        return s, f"answer {self.calls}: {s}", ("rec", self.calls)

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _wait(fake: _Fake, loading_s: float, refused_s: float, logs: list[str]) -> dict:
    return wait_until(fake.probe, loading_s=loading_s, refused_s=refused_s, log=logs.append, every_s=5.0,
                      poll_s=0.5, clock=fake.clock, sleep=fake.sleep)


def test_bench_waits_through_refused_and_503_until_the_server_answers():
    fake = _Fake([REFUSED] * 2 + [LOADING] * 30 + [READY])
    logs: list[str] = []
    got = _wait(fake, loading_s=120, refused_s=5, logs=logs)
    assert got["ready"] and got["state"] == READY and got["polls"] == 33 and got["record"] == ("rec", 33)
    assert got["waited_s"] == 16.0  # 32 polls, 0.5 s apart
    assert logs[0].startswith("waiting for the server to be ready (up to 5 s")  # only refused so far
    assert sum("still waiting" in s for s in logs) == 3  # a progress line every 5 s
    assert logs[-1].startswith("the server is ready after 16.0 s (33 probes)")


def test_nothing_listening_is_given_up_quickly_a_loading_server_is_not():
    logs: list[str] = []
    got = _wait(_Fake([REFUSED]), loading_s=120, refused_s=5, logs=logs)
    assert not got["ready"] and got["state"] == REFUSED and 5 <= got["waited_s"] <= 5.5
    got = _wait(_Fake([LOADING]), loading_s=30, refused_s=5, logs=logs)
    assert got["state"] == LOADING and 30 <= got["waited_s"] <= 30.5
    assert "still not ready after 30.0 s" in logs[-1]
    # a server that answered once (503) and then refuses (restarting) gets the loading patience
    got = _wait(_Fake([LOADING] + [REFUSED] * 100 + [READY]), loading_s=120, refused_s=5, logs=logs)
    assert got["ready"] and got["waited_s"] > 5


def test_any_other_answer_ends_the_wait_and_wait_ready_0_does_not_wait():
    logs: list[str] = []
    got = _wait(_Fake([LOADING, ANSWERED]), loading_s=120, refused_s=5, logs=logs)
    assert got["state"] == ANSWERED and not got["ready"] and got["polls"] == 2  # preflight judges a 404
    logs = []
    got = _wait(_Fake([LOADING]), loading_s=0, refused_s=0, logs=logs)
    assert got["polls"] == 1 and got["state"] == LOADING and logs == []
    assert patience(None) == (120.0, 5.0) and patience(300) == (300, 300) and patience(0) == (0, 0)
