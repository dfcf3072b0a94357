"""Old vs new serving stack: CPU seconds each server process spends per request (processes topology, fake
backend whose forward sleeps with the GIL released), interleaved. CPU per request does not depend on how
many cores the box has, so it says what a 16-core GPU host's engine process would pay per message, which a
2-core box's req/s cannot (there the load client shares the cores). Usage: [C=clients ITEMS=texts/request] cpu_per_request.py ROUNDS [serve flags]"""
import importlib.util, os, statistics, sys, time
from pathlib import Path
import psutil
sys.path.insert(0, "/work/main/tests/integration/serve")
spec = importlib.util.spec_from_file_location("b", "/work/main/scripts/bench_serve_vs_naive.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
from serve_helpers import write_fake_artifact
art = write_fake_artifact(Path("/tmp/ab/fakeart"), 2)
SRC = {"old": os.environ.get("OLD", "/work/main/.before/src"), "new": os.environ.get("NEW", "/work/main/src")}
texts = ["a b c d e f g h"] * 50
rounds = int(sys.argv[1]); flags = sys.argv[2:] or ["--frontends", "2"]
import os
C, SECS, ITEMS = int(os.environ.get("C", 64)), 6.0, int(os.environ.get("ITEMS", 1))  # clients, window, texts/request


def procs(pid):
    root = psutil.Process(pid)
    return [root] + root.children(recursive=True)


def label(p, root):
    """launcher (the root), frontend (listens on TCP: the HTTP port), tracker (multiprocessing's), or engine."""
    if p.pid == root:
        return "launcher"
    if "resource_tracker" in " ".join(p.cmdline()):
        return "tracker"
    return "frontend" if any(c.status == "LISTEN" for c in p.net_connections("tcp")) else "engine"


res = {"old": [], "new": []}
for r in range(rounds):
    for who in (("old", "new") if r % 2 == 0 else ("new", "old")):
        srv = b.ours(str(art), *flags, "--drain-s", "0", env={"PYTHONPATH": SRC[who]})
        try:
            srv.wait_ready(120)
            b.run_load(srv.url, "fake", C, 2.0, warmup_s=0.0, texts=texts, items_per_request=ITEMS)  # warm-up, not counted
            ps = procs(srv.proc.pid)
            t0 = {p.pid: sum(p.cpu_times()[:4]) for p in ps}
            x = b.run_load(srv.url, "fake", C, SECS, warmup_s=0.0, texts=texts, items_per_request=ITEMS)
            t1 = {p.pid: sum(p.cpu_times()[:4]) for p in ps}
            roles = {p.pid: label(p, srv.proc.pid) for p in ps}
        finally:
            srv.stop()
        n = x["requests"]
        per = {}  # us of CPU per request, by role (frontends summed)
        for p in ps:
            k = roles[p.pid]
            per[k] = per.get(k, 0.0) + (t1[p.pid] - t0[p.pid]) / n * 1e6
        res[who].append((x["items_per_s"], sum(per.values()), per))
        print(who, f"{x['items_per_s']:.0f} items/s, n={n} requests, errors={x['errors']}, total {sum(per.values()):.0f} us/req, "
              f"{ {k: round(v) for k, v in sorted(per.items())} }", flush=True)
print()
for who, v in res.items():
    rps = [a for a, _, _ in v]
    roles = {"all": [t for _, t, _ in v]} | {k: [p.get(k, 0.0) for _, _, p in v] for k in ("engine", "frontend", "launcher")}
    print(f"{who} (n={len(v)}): CPU us/request " + "; ".join(
        f"{k} {statistics.median(x):.0f} ({min(x):.0f}-{max(x):.0f})" for k, x in roles.items())
        + f"; items/s {statistics.median(rps):.0f} ({min(rps):.0f}-{max(rps):.0f})")
