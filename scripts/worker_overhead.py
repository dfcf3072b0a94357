"""What `infertune serve --worker-process` costs: the same model served in-process and with the forward pass in
a supervised child, one after the other, alternating which goes first, under the same closed-loop load
(bench's load generator). Prints items/s and P50/P99 per mode as the median over rounds with min-max.

    python scripts/worker_overhead.py --model minilm --concurrency 16 --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from bench_serve_vs_naive import ours

    from infertune.bench.config import BenchConfig
    from infertune.bench.runner import bench

    rows: dict[str, list[dict]] = {"in-process": [], "worker-process": []}
    for r in range(a.rounds):
        order = ["in-process", "worker-process"] if r % 2 == 0 else ["worker-process", "in-process"]
        for mode in order:
            srv = ours(a.model, *(["--worker-process"] if mode == "worker-process" else []))
            try:
                srv.wait_ready()
                res = bench(BenchConfig(url=srv.url, concurrency=[a.concurrency], duration=a.seconds, warmup=2.0,
                                        metrics_url=""))
                p = res.points[0]
                rows[mode].append({"rps": p.achieved_rps, "p50": p.latency_ms.p50, "p99": p.latency_ms.p99,
                                   "errors": p.errors.total, "n": p.n})
                print(f"round {r + 1} {mode}: {p.achieved_rps:.1f} req/s, p50 {p.latency_ms.p50:.0f} ms, p99 "
                      f"{p.latency_ms.p99:.0f} ms, n={p.n}, errors {p.errors.total}", file=sys.stderr)
            finally:
                srv.stop()
    print(f"\n{a.model}, closed loop c={a.concurrency}, {a.seconds:g} s per run, {a.rounds} rounds; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'mode':16} {'req/s median (min-max)':>26} {'P50 ms':>8} {'P99 ms':>8}")
    out = {}
    for mode, rs in rows.items():
        v = [x["rps"] for x in rs]
        out[mode] = {"rps_median": statistics.median(v), "rps_min": min(v), "rps_max": max(v),
                     "p50_ms": statistics.median(x["p50"] for x in rs),
                     "p99_ms": statistics.median(x["p99"] for x in rs),
                     "rounds": rs}
        print(f"{mode:16} {statistics.median(v):12.1f} ({min(v):.1f}-{max(v):.1f}) {out[mode]['p50_ms']:8.0f} "
              f"{out[mode]['p99_ms']:8.0f}")
    ratio = out["worker-process"]["rps_median"] / out["in-process"]["rps_median"]
    print(f"worker-process / in-process throughput: {ratio:.3f}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "worker_overhead.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
