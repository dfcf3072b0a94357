"""On the CPU build box: `infertune serve minilm` with tokie (the default) against the same server with
INFERTUNE_TOKENIZER=tokenizers (the Rust tokenizer) and the naive one-forward-per-request server, at concurrency 32,
interleaved rounds (issue 13's CPU point: no regression, still >= 2x naive). Prints a table last.
Run: .venv/bin/python scripts/cpu_tokenizer_side_by_side.py [ROUNDS] [SECONDS] [MODEL or ARTIFACT]
(texts of <= 250 characters from the sample workload, as tests/integration/serve/test_serve_load.py uses)"""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_serve_vs_naive as bench  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
model = sys.argv[3] if len(sys.argv) > 3 else "minilm"
texts = [t for t in bench.sample_texts(2) if len(t) <= 250]
servers = {"tokie": bench.ours(model, "--truncate", "--drain-s", "0"),
           "rust-tokenizer": bench.ours(model, "--truncate", "--drain-s", "0",
                                        env={"INFERTUNE_TOKENIZER": "tokenizers"}),
           "naive": bench.naive("minilm")}
runs: dict[str, list[dict]] = {k: [] for k in servers}
try:
    for s in servers.values():
        s.wait_ready()
    for r in range(rounds):
        names = list(servers)[r % 3:] + list(servers)[:r % 3]  # a different one goes first each round
        for name in names:
            runs[name].append(bench.run_load(servers[name].url, "minilm", 32, seconds, warmup_s=1.5, seed=r,
                                             texts=texts))
finally:
    for s in servers.values():
        s.stop()
print(f"\n{model}, c=32, 1 text per request, {rounds} interleaved rounds of {seconds:g} s each")
print("| server | items/s median (min-max, n) | P99 ms (max) | errors | x naive (medians) |\n|---|---|---|---:|---:|")
base = statistics.median(x["items_per_s"] for x in runs["naive"])
for name, xs in runs.items():
    v = [x["items_per_s"] for x in xs]
    print(f"| {name} | {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f}, n={len(v)}) | "
          f"{max(x['p99_ms'] for x in xs):.0f} | {sum(x['errors'] for x in xs)} | {statistics.median(v) / base:.2f} |")
