"""Old vs new serving stack, processes topology (--frontends 2), fake backend (tiny forward cost), interleaved."""
import importlib.util, statistics, sys
from pathlib import Path
sys.path.insert(0, "/work/main/tests/integration/serve")
spec = importlib.util.spec_from_file_location("b", "/work/main/scripts/bench_serve_vs_naive.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
from serve_helpers import write_fake_artifact
art = write_fake_artifact(Path("/tmp/ab/fakeart"), 2)
SRC = {"old": "/tmp/before/src", "new": "/work/main/src"}
texts = ["a b c d e f g h"] * 50
flags = sys.argv[2:] or ["--frontends", "2"]
res = {"old": [], "new": []}
for r in range(int(sys.argv[1])):
    for who in (("old", "new") if r % 2 == 0 else ("new", "old")):
        srv = b.ours(str(art), *flags, "--drain-s", "0", env={"PYTHONPATH": SRC[who]})
        try:
            srv.wait_ready(120)
            x = b.run_load(srv.url, "fake", 64, 6.0, warmup_s=2.0, texts=texts)
        finally:
            srv.stop()
        res[who].append((round(x["items_per_s"], 1), round(x["p99_ms"], 1), x["errors"]))
        print(who, res[who][-1], flush=True)
for who, v in res.items():
    s = [a for a, _, _ in v]
    print(f"{who}: req/s median {statistics.median(s):.1f} (n={len(s)}, {min(s):.1f}-{max(s):.1f}); P99 {[p for _, p, _ in v]}")
