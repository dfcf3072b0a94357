"""One-process serve, old (30b11aa, .before/src) vs new (the src folder given): CPU microseconds per request of
the event-loop thread (the main thread) and of the other threads, fake backend, c=64, interleaved.
Usage: thread_cpu.py ROUNDS NEW_SRC"""
import importlib.util, os, statistics, sys
from pathlib import Path
import psutil
sys.path.insert(0, "/work/main/tests/integration/serve")
spec = importlib.util.spec_from_file_location("b", "/work/main/scripts/bench_serve_vs_naive.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
from serve_helpers import write_fake_artifact
art = write_fake_artifact(Path("/tmp/ab/fakeart"), 2)
SRC = {"old": "/work/main/.before/src", "new": sys.argv[2]}
texts = ["a b c d e f g h"] * 50
res = {"old": [], "new": []}
for r in range(int(sys.argv[1])):
    for who in (("old", "new") if r % 2 == 0 else ("new", "old")):
        srv = b.ours(str(art), "--drain-s", "0", env={"PYTHONPATH": SRC[who]})
        try:
            srv.wait_ready(120)
            b.run_load(srv.url, "fake", 64, 2.0, warmup_s=0.0, texts=texts)
            p = psutil.Process(srv.proc.pid)
            t0 = {t.id: t.user_time + t.system_time for t in p.threads()}
            x = b.run_load(srv.url, "fake", 64, 6.0, warmup_s=0.0, texts=texts)
            t1 = {t.id: t.user_time + t.system_time for t in p.threads()}
        finally:
            srv.stop()
        n = x["requests"]
        main = (t1[srv.proc.pid] - t0.get(srv.proc.pid, 0)) / n * 1e6
        other = sorted(((v - t0.get(k, 0)) / n * 1e6 for k, v in t1.items() if k != srv.proc.pid), reverse=True)
        res[who].append((x["items_per_s"], main, sum(other)))
        print(who, round(x["items_per_s"]), "main us/req", round(main), "other threads", [round(v) for v in other if v >= 1], flush=True)
for who, v in res.items():
    print(who, "req/s", statistics.median([a for a, _, _ in v]), "main", statistics.median([m for _, m, _ in v]), "others", statistics.median([o for _, _, o in v]))
