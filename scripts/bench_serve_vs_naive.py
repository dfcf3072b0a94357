"""Side by side on one box and one model: `infertune serve` vs the naive FastAPI server people write
(one request -> one forward pass, in FastAPI's thread pool), then a soak of `infertune serve`.

    python scripts/bench_serve_vs_naive.py compare --model minilm --concurrency 32 --seconds 20 --rounds 3
    python scripts/bench_serve_vs_naive.py soak --model minilm --concurrency 64 --seconds 60
    python scripts/bench_serve_vs_naive.py naive-server --model minilm --port 8001   # the baseline alone

Requests carry one text each, drawn in a fixed shuffled order from the built-in sample workload
(src/infertune/data/sample_embeddings.jsonl: mixed lengths, 3-256 tokens). Each round runs the two
servers one after the other (never at the same time), alternating which goes first; the figures are the
median over rounds with min-max. Tests in tests/integration/ import this file for the same load
generator and baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "infertune" / "data" / "sample_embeddings.jsonl"


def sample_texts(seed: int = 0) -> list[str]:
    texts = [json.loads(x)["input"] for x in SAMPLE.read_text().splitlines() if x.strip()]
    random.Random(seed).shuffle(texts)
    return texts


# --- the baseline: what users write -----------------------------------------------------------------
def naive_server(model: str, host: str, port: int) -> None:
    """One request -> one forward pass. A plain `def` route runs in FastAPI's thread pool, so concurrent
    requests run concurrent forward passes of batch size 1: the usual hand-written embedding server."""
    import uvicorn
    from fastapi import FastAPI

    from infertune.tasks.embedding.artifact import load_model

    emb = load_model(model, "cpu")
    emb.embed(["warm up"])
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/v1/embeddings")
    def embeddings(body: dict) -> dict:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vecs = emb.embed(texts)
        n = sum(len(x) for x in emb.token_ids(texts))
        return {"object": "list", "model": body.get("model"), "usage": {"prompt_tokens": n, "total_tokens": n},
                "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)]}

    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


# --- processes ------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess on a free loopback port; `ready_path` says when it can take traffic."""

    def __init__(self, argv: list[str], ready_path: str, env: dict[str, str] | None = None, port: int | None = None,
                 capture: bool = False, headers: dict[str, str] | None = None):
        self.headers = headers or {}
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.ready_path = ready_path
        e = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        src = str(ROOT / "src")
        e["PYTHONPATH"] = src + os.pathsep + e.get("PYTHONPATH", "") if e.get("PYTHONPATH") else src
        e.update(env or {})
        self.log = open(os.devnull, "w") if os.environ.get("INFERTUNE_QUIET") else None  # noqa: SIM115
        out = subprocess.PIPE if capture else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.argv, env=e, stdout=out, stderr=self.log, text=True)

    def wait_ready(self, timeout: float = 240) -> Server:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {' '.join(self.argv)}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2, headers=self.headers).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"server not ready after {timeout} s: {' '.join(self.argv)}")

    def rss_mb(self) -> float:
        import psutil

        return psutil.Process(self.proc.pid).memory_info().rss / 2**20

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
        return self.proc.returncode


def ours(model: str, *flags: str, env: dict[str, str] | None = None, capture: bool = False,
         headers: dict[str, str] | None = None) -> Server:
    return Server([sys.executable, "-m", "infertune.cli.main", "serve", model, "--port", "{port}", *flags], "/ready",
                  env=env, capture=capture, headers=headers)


def naive(model: str) -> Server:
    return Server([sys.executable, str(Path(__file__).resolve()), "naive-server", "--model", model,
                   "--port", "{port}"], "/health")


# --- load ------------------------------------------------------------------------------------------------
async def _load(url: str, model: str, texts: list[str], concurrency: int, seconds: float, warmup_s: float,
                items_per_request: int = 1) -> dict:
    """Closed loop: `concurrency` clients, each sending its next request as soon as the last is answered.
    aiohttp, not httpx: on a 2-core box the client shares the CPU with the server under test, and httpx
    spent about 5x the CPU per request (MiniLM c=32: 2.5 s vs 0.4 s of client CPU per 7.5 s run)."""
    import aiohttp

    lat: list[float] = []
    statuses: dict[str, int] = {}
    items = 0
    nxt = 0
    t_start = time.perf_counter()
    t_measure = t_start + warmup_s
    t_end = t_measure + seconds
    headers = {"Content-Type": "application/json"}
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as client:

        async def worker() -> None:
            nonlocal nxt, items
            while (now := time.perf_counter()) < t_end:
                batch = [texts[(nxt + k) % len(texts)] for k in range(items_per_request)]
                nxt += items_per_request
                body = json.dumps({"model": model, "input": batch}).encode()
                try:
                    async with client.post("/v1/embeddings", data=body, headers=headers) as r:
                        await r.read()
                        code = str(r.status)
                except (TimeoutError, aiohttp.ClientError) as e:
                    code = type(e).__name__
                done = time.perf_counter()
                if t_measure <= done <= t_end:  # completions inside the window (throughput), with their latency
                    statuses[code] = statuses.get(code, 0) + 1
                    lat.append((done - now) * 1000)
                    if code == "200":
                        items += items_per_request

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    lat.sort()
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) >= 2 else [float("nan")] * 99
    errors = sum(v for k, v in statuses.items() if k != "200")
    return {"items_per_s": items / seconds, "requests": len(lat), "errors": errors, "statuses": statuses,
            "p50_ms": q[49], "p99_ms": q[98], "max_ms": lat[-1] if lat else float("nan"), "seconds": seconds,
            "concurrency": concurrency}


def run_load(url: str, model: str, concurrency: int, seconds: float, warmup_s: float = 2.0, seed: int = 0,
             items_per_request: int = 1, texts: list[str] | None = None) -> dict:
    texts = texts or sample_texts(seed)
    return asyncio.run(_load(url, model, texts, concurrency, seconds, warmup_s, items_per_request))


def _spread(vals: list[float]) -> str:
    return f"{statistics.median(vals):.1f} (min {min(vals):.1f}, max {max(vals):.1f}, n={len(vals)})"


def compare(args: argparse.Namespace) -> dict:
    a = ours(args.model, "--truncate").wait_ready()  # the naive server truncates too
    b = naive(args.naive_model or args.model).wait_ready()
    runs: dict[str, list[dict]] = {"infertune": [], "naive": []}
    try:
        for r in range(args.rounds):
            order = [("infertune", a), ("naive", b)] if r % 2 == 0 else [("naive", b), ("infertune", a)]
            for name, srv in order:
                res = run_load(srv.url, args.model, args.concurrency, args.seconds, args.warmup, seed=r)
                runs[name].append(res)
                print(f"round {r + 1} {name:9s} {res['items_per_s']:7.1f} items/s  p50 {res['p50_ms']:7.1f} ms  "
                      f"p99 {res['p99_ms']:7.1f} ms  n={res['requests']} errors={res['errors']}", file=sys.stderr)
    finally:
        a.stop()
        b.stop()
    summary = {k: {m: [x[m] for x in v] for m in ("items_per_s", "p50_ms", "p99_ms", "errors")}
               for k, v in runs.items()}
    ratios = [x["items_per_s"] / max(y["items_per_s"], 1e-9)
              for x, y in zip(runs["infertune"], runs["naive"], strict=True)]
    out = {"model": args.model, "naive_model": args.naive_model or args.model, "concurrency": args.concurrency,
           "seconds": args.seconds, "rounds": args.rounds,
           "runs": runs, "summary": summary, "speedup": ratios, "speedup_median": statistics.median(ratios)}
    print(f"\n{'server':10s} {'items/s':>34s} {'P99 ms':>34s}")
    for k in ("infertune", "naive"):
        print(f"{k:10s} {_spread(summary[k]['items_per_s']):>34s} {_spread(summary[k]['p99_ms']):>34s}")
    print(f"speedup infertune/naive: {_spread(ratios)} x  (concurrency {args.concurrency}, {args.seconds:g} s per run, "
          "1 mixed-length text per request)")
    return out


def soak(args: argparse.Namespace) -> dict:
    srv = ours(args.model, "--truncate").wait_ready()
    try:
        run_load(srv.url, args.model, args.concurrency, 3.0, 0.0)  # settle allocator pools first
        rss0 = srv.rss_mb()
        res = run_load(srv.url, args.model, args.concurrency, args.seconds, 0.0)
        rss1 = srv.rss_mb()
    finally:
        code = srv.stop()
    res.update(rss_start_mb=round(rss0, 1), rss_end_mb=round(rss1, 1), rss_growth_mb=round(rss1 - rss0, 1),
               exit_code=code)
    print(f"\nsoak {args.seconds:g} s at concurrency {args.concurrency}: {res['requests']} requests, "
          f"{res['errors']} errors, {res['items_per_s']:.1f} items/s, P50 {res['p50_ms']:.1f} ms, "
          f"P99 {res['p99_ms']:.1f} ms, max {res['max_ms']:.1f} ms; RSS {rss0:.0f} -> {rss1:.0f} MiB "
          f"({rss1 - rss0:+.1f} MiB); exit code {code}")
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("compare", "soak", "naive-server"):
        s = sub.add_parser(name)
        s.add_argument("--model", default="minilm")
        s.add_argument("--concurrency", type=int, default=32 if name == "compare" else 64)
        s.add_argument("--seconds", type=float, default=20 if name == "compare" else 60)
        s.add_argument("--warmup", type=float, default=3.0)
        s.add_argument("--rounds", type=int, default=3)
        s.add_argument("--port", type=int, default=8001)
        s.add_argument("--naive-model", default=None,
                       help="model for the naive server (default: --model); e.g. --model runs/X/artifact "
                            "--naive-model minilm compares the tuned artifact with what users write")
        s.add_argument("--json", dest="json_out", type=Path, default=None, help="write the figures here")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.cmd == "naive-server":
        naive_server(args.model, "127.0.0.1", args.port)
        return
    out = compare(args) if args.cmd == "compare" else soak(args)
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
