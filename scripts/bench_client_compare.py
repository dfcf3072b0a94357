"""Side by side: bench's two HTTP clients (aiohttp, lean) against the trivial stub, interleaved.

    .venv/bin/python scripts/bench_client_compare.py [--rates 2000,5000,8000] [--repeats 3] [--workers 1]

Each cell: answered req/s, valid, p99 schedule lag, and the client's CPU per request (one worker: its
CPU share / the rate it sent). The stub and the client share the box, as they do in the tests.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "integration" / "bench"))

from bench_helpers import STUB, free_port, stop, wait_port  # noqa: E402

from infertune.bench.config import BenchConfig  # noqa: E402
from infertune.bench.runner import bench  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="2000,5000,8000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="1")
    ap.add_argument("--duration", type=float, default=4.0)
    a = ap.parse_args()
    port = free_port()
    srv = subprocess.Popen([sys.executable, str(STUB), "--port", str(port)], stdout=subprocess.DEVNULL)
    wait_port(port, srv, 15)
    url = f"http://127.0.0.1:{port}"
    workers = a.workers if a.workers == "auto" else int(a.workers)
    rows: dict[tuple[float, str], list] = {}
    try:
        for rep in range(a.repeats):
            for rate in (float(r) for r in a.rates.split(",")):
                for client in ("aiohttp", "lean"):
                    p = bench(BenchConfig(url=url, rates=[rate], duration=a.duration, warmup=1, metrics_url="",
                                          workers=workers, http_client=client)).points[0]
                    us = p.client.cpu_util * p.client.workers / max(p.client.sent_rps, 1) * 1e6
                    rows.setdefault((rate, client), []).append((p.achieved_rps, p.valid, p.client.lag_ms.p99, us))
                    print(f"rep {rep + 1} rate {rate:.0f} {client:8s}: {p.achieved_rps:8.0f}/s valid={p.valid} "
                          f"lag p99 {p.client.lag_ms.p99:7.1f} ms  ~{us:4.0f} us CPU/req", flush=True)
    finally:
        stop(srv)
    print(f"\nmedian of n={a.repeats} (range), workers={a.workers}, {a.duration:g} s points")
    print(f"{'rate':>6} {'client':8} {'answered/s':>18} {'valid':>6} {'lag p99 ms':>18} {'CPU us/req':>16}")
    for (rate, client), v in rows.items():
        def col(i):
            xs = [x[i] for x in v]  # noqa: B023 (called in this iteration)
            return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"
        def colf(i):
            xs = [x[i] for x in v]  # noqa: B023 (called in this iteration)
            return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
        print(f"{rate:6.0f} {client:8} {col(0):>18} {sum(x[1] for x in v)}/{len(v):<4} {colf(2):>18} {col(3):>16}")


if __name__ == "__main__":
    main()
