"""On the lent H200: serve the tuned MiniLM on CUDA and measure items/s at concurrency 256 with ~128-token inputs.

Two figures, each over --seconds after --warmup, repeated --rounds times (median, min-max, n):
  engine  the batching engine in-process (asyncio submit, no HTTP): what the GPU + engine sustain;
  http    the real `infertune serve MODEL --device cuda` subprocess on a loopback port, driven by
          --clients client processes (httpx, keep-alive) sharing the 256 concurrent requests, so the
          Python client is not the bottleneck. Needs fastapi/starlette/uvicorn/pydantic wheels (below).
Plus the forward-only ceiling (pre-tokenized batches at the server's token budget) for context.

Run there (wheels from .whl: fastapi, starlette, uvicorn, pydantic, pydantic_core, annotated_types,
typing_inspection, typer; the image already has httpx, h11, anyio, prometheus-client, psutil, rich):
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 && python3 scripts/gpu/serve_h200.py /tmp/tunerun/artifact
MODEL defaults to /tmp/tunerun/artifact (from scripts/gpu/tune_h200.sh), else /tmp/minilm (untuned).
On a CPU box `--device cpu --concurrency 32 --seconds 5` checks the script end to end.
Prints a table last; writes $OUT/serve_h200.json when OUT is set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def make_texts(tokenizer, n: int, target: int) -> list[str]:
    """n distinct texts of about `target` tokens (special tokens included), cut from the sample workload."""
    lines = [json.loads(x)["input"] for x in (ROOT / "src/infertune/data/sample_embeddings.jsonl").read_text().splitlines()]
    out, i = [], 0
    while len(out) < n:
        ids: list[int] = []
        while len(ids) < target:
            ids += tokenizer(lines[i % len(lines)], add_special_tokens=False)["input_ids"]
            i += 1
        out.append(tokenizer.decode(ids[: target - 2]))
    return out


def pct(v: list[float], q: float) -> float:
    return statistics.quantiles(v, n=100, method="inclusive")[int(q) - 1] if len(v) > 1 else float("nan")


# --- in-process engine ------------------------------------------------------------------------------------------
def engine_runs(model: str, device: str, texts: list[str], conc: int, seconds: float, warmup: float, rounds: int):
    from infertune.artifact import load_model, read_manifest
    from infertune.serve.config import ServeConfig, resolve_settings
    from infertune.serve.engine import Engine
    from infertune.serve.metrics import Metrics
    from infertune.serve.schema import EmbeddingRequest

    manifest = read_manifest(model) if (Path(model) / "manifest.json").exists() else None
    settings = resolve_settings(ServeConfig(model=model, device=device, max_queue=4 * conc), manifest)
    emb = load_model(model, device)
    eng = Engine(emb, settings, Metrics(), max_queue=4 * conc, truncate=True)
    eng.warmup(texts[:64])
    eng.start()
    # forward-only ceiling at the same budget: pre-tokenized, collated, synchronised
    ids = emb.token_ids(texts[:2048])
    per = max(1, min(settings.max_batch_items, settings.batch_tokens // max(len(x) for x in ids)))
    batches = [emb.collate(ids[i:i + per]) for i in range(0, len(ids) - per + 1, per)]
    for b in batches[:3]:
        emb.forward(b)
    emb.synchronize()
    t = time.perf_counter()
    for b in batches:
        emb.forward(b)
    emb.synchronize()
    ceiling = per * len(batches) / (time.perf_counter() - t)

    async def one_round() -> dict:
        lat: list[float] = []
        done = 0
        t0 = time.perf_counter()
        t_meas, t_end = t0 + warmup, t0 + warmup + seconds
        k = 0

        async def worker() -> None:
            nonlocal done, k
            while (s := time.perf_counter()) < t_end:
                k += 1
                await eng.submit(EmbeddingRequest([texts[k % len(texts)]], None, "m", "float"), "m", 60)
                e = time.perf_counter()
                if t_meas <= e <= t_end:
                    done += 1
                    lat.append((e - s) * 1000)

        await asyncio.gather(*(worker() for _ in range(conc)))
        return {"items_per_s": done / seconds, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "n": done}

    runs = [asyncio.run(one_round()) for _ in range(rounds)]
    eng.stop()
    return runs, ceiling, settings.model_dump(), per


# --- over HTTP ------------------------------------------------------------------------------------------------------
def _client(url: str, texts: list[str], conc: int, seconds: float, warmup: float, q) -> None:
    import httpx

    async def main() -> None:
        lat: list[float] = []
        errors = 0
        t0 = time.perf_counter()
        t_meas, t_end = t0 + warmup, t0 + warmup + seconds
        limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as c:
            async def worker(w: int) -> None:
                nonlocal errors
                k = w
                while (s := time.perf_counter()) < t_end:
                    k += conc
                    r = await c.post("/v1/embeddings", json={"model": "m", "input": texts[k % len(texts)]})
                    e = time.perf_counter()
                    if t_meas <= e <= t_end:
                        if r.status_code == 200:
                            lat.append((e - s) * 1000)
                        else:
                            errors += 1

            await asyncio.gather(*(worker(w) for w in range(conc)))
        q.put((lat, errors))

    asyncio.run(main())


def http_runs(model: str, device: str, texts: list[str], conc: int, clients: int, seconds: float, warmup: float,
              rounds: int) -> list[dict]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "infertune.cli.main", "serve", model, "--device", device,
                             "--port", str(port), "--served-model-name", "m", "--truncate",
                             "--max-queue", str(4 * conc)], env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                 [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])))
    runs = []
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"infertune serve exited with {proc.returncode}")
            try:
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("server not ready in 300 s")
            time.sleep(0.5)
        ctx = mp.get_context("spawn")
        for _ in range(rounds):
            q = ctx.Queue()
            ps = [ctx.Process(target=_client, args=(url, texts[i::clients], conc // clients, seconds, warmup, q))
                  for i in range(clients)]
            for p in ps:
                p.start()
            got = [q.get(timeout=seconds + warmup + 120) for _ in ps]
            for p in ps:
                p.join()
            lat = [x for g in got for x in g[0]]
            runs.append({"items_per_s": len(lat) / seconds, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
                         "n": len(lat), "errors": sum(g[1] for g in got)})
        metrics = httpx.get(url + "/metrics").text
        runs[-1]["server_metrics_excerpt"] = [ln for ln in metrics.splitlines()
                                              if ln.startswith(("infertune_batch_size_items_sum",
                                                                "infertune_batch_size_items_count",
                                                                "infertune_batch_padding_ratio_sum"))]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    runs[-1]["server_exit_code"] = rc
    return runs


def spread(runs: list[dict], key: str) -> str:
    v = [r[key] for r in runs]
    return f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f}, n={len(v)})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default=None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--warmup", type=float, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--skip-http", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    model = a.model or next((m for m in ("/tmp/tunerun/artifact", "/tmp/minilm") if Path(m).exists()), "minilm")
    from infertune.artifact import load_model

    tok = load_model(model, "cpu").tokenizer if a.device == "cpu" else None
    if tok is None:
        from transformers import AutoTokenizer

        from infertune.artifact import read_manifest

        m = Path(model)
        if (m / "manifest.json").exists():
            files = read_manifest(m)["files"]
            m = m / files.get("tokenizer", files.get("weights", "model"))
        tok = AutoTokenizer.from_pretrained(str(m))
    texts = make_texts(tok, 4096, a.tokens)
    out: dict = {"model": model, "device": a.device, "concurrency": a.concurrency, "tokens_per_input": a.tokens,
                 "seconds": a.seconds, "rounds": a.rounds}
    try:
        import torch

        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        pass
    eng, ceiling, settings, per = engine_runs(model, a.device, texts, a.concurrency, a.seconds, a.warmup, a.rounds)
    out.update(engine=eng, forward_ceiling_items_per_s=ceiling, forward_batch_items=per, settings=settings)
    if not a.skip_http:
        try:
            out["http"] = http_runs(model, a.device, texts, a.concurrency, a.clients, a.seconds, a.warmup, a.rounds)
        except Exception as e:  # noqa: BLE001 - report, keep the engine figures
            out["http_error"] = f"{type(e).__name__}: {e}"
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "serve_h200.json").write_text(json.dumps(out, indent=2, default=str))
    print(f"\nMiniLM serve on {out.get('gpu') or a.device}: concurrency {a.concurrency}, ~{a.tokens}-token inputs, "
          f"1 input/request, {a.seconds:g} s x {a.rounds} rounds; budget {settings['batch_tokens']} tokens "
          f"({settings['sources']['batch_tokens']})")
    print(f"{'path':28s} {'items/s':>24s} {'P50 ms':>20s} {'P99 ms':>20s}")
    print(f"{'forward only (ceiling)':28s} {ceiling:24.0f} {'-':>20s} {'-':>20s}")
    print(f"{'engine in-process':28s} {spread(eng, 'items_per_s'):>24s} {spread(eng, 'p50_ms'):>20s} "
          f"{spread(eng, 'p99_ms'):>20s}")
    if "http" in out:
        h = out["http"]
        print(f"{'HTTP infertune serve':28s} {spread(h, 'items_per_s'):>24s} {spread(h, 'p50_ms'):>20s} "
              f"{spread(h, 'p99_ms'):>20s}   errors {sum(r['errors'] for r in h)}, exit {h[-1].get('server_exit_code')}")
    elif "http_error" in out:
        print(f"HTTP run failed: {out['http_error']}")


if __name__ == "__main__":
    main()
