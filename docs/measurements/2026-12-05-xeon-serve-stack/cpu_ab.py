"""Old vs new serving stack on this CPU, one process topology, MiniLM (real weights, untuned fp32), interleaved."""
import importlib.util, json, os, statistics, sys, time
spec = importlib.util.spec_from_file_location("b", "scripts/bench_serve_vs_naive.py")  # run from the repo root
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
SRC = {"old": sys.argv[2] if len(sys.argv) > 2 else ".before/src", "new": "src"}  # old: git archive COMMIT src
texts = [t for t in b.sample_texts(2) if len(t) <= 250]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
res = {"old": [], "new": []}
for r in range(rounds):
    for who in (("old", "new") if r % 2 == 0 else ("new", "old")):
        srv = b.ours("minilm", "--drain-s", "0", env={"PYTHONPATH": SRC[who]})
        try:
            srv.wait_ready(240)
            out = {}
            for c, per in ((32, 1), (8, 16)):
                x = b.run_load(srv.url, "minilm", c, 6.0, warmup_s=2.0, texts=texts, items_per_request=per)
                out[f"c{c}x{per}"] = (round(x["items_per_s"], 1), round(x["p99_ms"], 1), x["errors"], x["requests"])
        finally:
            srv.stop()
        res[who].append(out); print(who, out, flush=True)
for who in res:
    for k in res[who][0]:
        v = [o[k][0] for o in res[who]]
        print(f"{who} {k}: items/s median {statistics.median(v):.1f} (n={len(v)}, {min(v):.1f}-{max(v):.1f}); P99 ms {[o[k][1] for o in res[who]]}")
