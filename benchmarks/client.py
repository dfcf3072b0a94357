"""`infertune bench`'s own accuracy and capacity against the stub server (tests/fixtures/openai_stub.py),
whose timing is known: the figures the bench tests used to assert, which hold on a quiet box and not on a
busy one.

- lean client at 5,000 req/s: answered/s and p99 schedule lag (goal: median >= 4,900/s, lag p99 <= 10 ms)
- lean vs aiohttp on a 10 ms queue at 40 req/s: P50 each, interleaved (goal: both 9.5-15 ms, within 2 ms)
- streams with known timing (TTFT 60 ms, ITL 25 ms, 12 tokens): TTFT/ITL/TPOT/E2E P50 (goal: within
  8 / 5 / 5 ms / 5% of the stub's timing)
- SLO search on a 100 req/s queue (10 ms per request, p99 <= 60 ms): the answer (goal: 85-104 req/s)
"""

from __future__ import annotations

import statistics

from _common import Figure, Report, stub

from infertune.bench.config import BenchConfig
from infertune.bench.runner import bench

NAME = "client"


def lean_5000(rep: Report, n: int) -> None:
    answered, lag, valid = [], [], 0
    with stub("fast") as url:
        for _ in range(n):
            p = bench(BenchConfig(url=url, rates=[5000], duration=3, warmup=0.5, metrics_url="")).points[0]
            answered.append(p.achieved_rps)
            lag.append(p.client.lag_ms.p99 or 0.0)
            valid += p.valid
    rep.add(
        Figure(
            NAME,
            "lean client at 5,000 req/s asked: answered",
            "req/s",
            answered,
            "median >= 4,900",
            statistics.median(answered) >= 4900,
            digits=0,
        )
    )
    rep.add(
        Figure(
            NAME,
            "lean client at 5,000 req/s asked: p99 schedule lag",
            "ms",
            lag,
            "median <= 10 ms",
            statistics.median(lag) <= 10,
            note=f"{valid} of {n} points valid",
        )
    )


def lean_vs_aiohttp(rep: Report, n: int) -> None:
    p50: dict[str, list[float]] = {"lean": [], "aiohttp": []}
    with stub("queue", service_ms=10) as url:
        for _ in range(n):
            for client in ("lean", "aiohttp"):  # interleaved: the box drifts
                p = bench(
                    BenchConfig(
                        url=url, rates=[40], duration=2, warmup=0.3, metrics_url="", http_client=client
                    )
                ).points[0]
                p50[client].append(p.latency_ms.p50)
    for client, v in p50.items():
        rep.add(
            Figure(
                NAME,
                f"{client} P50 on a 10 ms queue at 40 req/s",
                "ms",
                v,
                "median 9.5-15 ms",
                9.5 <= statistics.median(v) <= 15,
                digits=2,
            )
        )
    diff = [abs(a - b) for a, b in zip(p50["lean"], p50["aiohttp"], strict=True)]
    rep.add(
        Figure(
            NAME,
            "|lean - aiohttp| P50, same round",
            "ms",
            diff,
            "median <= 2 ms",
            statistics.median(diff) <= 2,
            digits=2,
        )
    )


def streams(rep: Report, n: int) -> None:
    got: dict[str, list[float]] = {k: [] for k in ("ttft_min", "ttft_p50", "itl_p50", "tpot_p50", "e2e_p50")}
    with stub("fast", ttft_ms=60, itl_ms=25, tokens=12) as url:
        for i in range(n):
            api = ("chat", "completions")[i % 2]
            p = bench(
                BenchConfig(url=url, api=api, concurrency=[2], duration=3, warmup=0.5, metrics_url="")
            ).points[0]
            for k, v in (
                ("ttft_min", p.ttft_ms.min),
                ("ttft_p50", p.ttft_ms.p50),
                ("itl_p50", p.itl_ms.p50),
                ("tpot_p50", p.tpot_ms.p50),
                ("e2e_p50", p.latency_ms.p50),
            ):
                got[k].append(v)
    med = {k: statistics.median(v) for k, v in got.items()}
    e2e = 60 + 11 * 25
    goals = {
        "ttft_min": ("59.5-68 ms (the stub's 60 ms + <= 8 ms)", 59.5 <= med["ttft_min"] <= 68),
        "ttft_p50": ("<= 76 ms", med["ttft_p50"] <= 76),
        "itl_p50": ("25 +- 5 ms", abs(med["itl_p50"] - 25) <= 5),
        "tpot_p50": ("25 +- 5 ms", abs(med["tpot_p50"] - 25) <= 5),
        "e2e_p50": (f"{e2e} ms +- 5%", abs(med["e2e_p50"] - e2e) <= 0.05 * e2e),
    }
    for k, (goal, ok) in goals.items():
        rep.add(
            Figure(
                NAME,
                f"stream (TTFT 60, ITL 25 ms, 12 tokens, c=2) {k.replace('_', ' ')}",
                "ms",
                got[k],
                goal,
                ok,
                digits=2,
            )
        )


def queue_search(rep: Report, n: int) -> None:
    answers = []
    with stub("queue", service_ms=10) as url:
        for _ in range(n):
            res = bench(
                BenchConfig(
                    url=url, slo="p99_e2e_ms<=60", duration=1, warmup=0.5, metrics_url="", slo_tolerance=0.05
                )
            )
            answers.append(res.slo.max_load if res.slo and res.slo.met else 0.0)
    rep.add(
        Figure(
            NAME,
            "SLO search on a 100 req/s queue (p99 <= 60 ms): answer",
            "req/s",
            answers,
            "median 85-104 req/s",
            85 <= statistics.median(answers) <= 104,
        )
    )


def run(rep: Report, repeats: int) -> None:
    lean_5000(rep, repeats)
    lean_vs_aiohttp(rep, repeats)
    streams(rep, max(4, repeats + repeats % 2))  # chat and completions alternate: an even n
    queue_search(rep, repeats)
