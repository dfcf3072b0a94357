"""`infertune verify` of a causal-LM artifact served by vLLM: start vLLM on it exactly as `serve` does, ask for the
greedy continuations tune recorded (token for token, one request at a time), ask for them again all at once (the
workload's concurrency, so they share batches: answers must not depend on their neighbours), measure the closed-loop
request rate at tune's concurrency on the load tune measured, and diff this host against the artifact's fingerprint.

Accuracy fails when the recorded continuations' token agreement falls under the artifact's top-1 agreement budget
(a greedy continuation is the served model's top-1 choice at every step); the batch check fails on the same bound
between the sequential and the concurrent answers; speed fails below (1 - max_slowdown) x the tune-time rate when
tune measured that rate the same way (a closed-loop point, no SLO search), and is reported only otherwise."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.results import ArtifactVerdict

DEFAULT_MIN_AGREEMENT = 0.97  # config.LMAccuracyBudget.min_top1_agreement's default, for artifacts that lack it


class LMGreedyCheck(BaseModel):
    ok: bool
    agreement: float  # mean fraction of each recorded continuation reproduced before the first different token
    exact: float  # share of continuations reproduced in full
    n: int
    min_agreement: float
    first_mismatch: dict[str, Any] | None = None


class LMBatchCheck(BaseModel):
    ok: bool
    concurrency: int
    agreement: float  # sequential against concurrent answers, as above
    moved: list[dict[str, Any]]  # prompts whose concurrent answer left the sequential one: prompt tokens, where
    min_agreement: float


class LMSpeedCheck(BaseModel):
    ok: bool
    ratio: float | None  # here / tune time; None when tune's figure was not measured the same way
    max_slowdown: float
    here: dict[str, Any]
    tuned: dict[str, Any]
    note: str = ""


class LMVerifyResult(ArtifactVerdict):
    kind: str = "causal-lm"
    greedy: LMGreedyCheck
    batch: LMBatchCheck
    speed: LMSpeedCheck | None = None
    start_s: float


def verify_lm(config: Any, root: Path, m: dict[str, Any]) -> LMVerifyResult:
    """Start vLLM on the artifact, run the three checks, stop it; verify.json is written to config.out."""
    from infertune.engines.causal_lm.vllm_server import check_greedy, start_vllm
    from infertune.hardware.fingerprint import fingerprint
    from infertune.ports import free_port

    t0 = time.perf_counter()
    config.out.mkdir(parents=True, exist_ok=True)
    tune = m.get("tune") or {}
    bound = float((tune.get("accuracy_budget") or {}).get("min_top1_agreement", DEFAULT_MIN_AGREEMENT))
    with start_vllm(root, port=free_port(), log=config.out / "verify-vllm.log") as srv:
        start_s = round(time.perf_counter() - t0, 1)
        g = check_greedy(srv.url, root)
        greedy = judge_greedy(g, bound)
        batch = batch_check(srv.url, m, g, int(tune.get("concurrency") or 4), bound)
        speed = None if config.accuracy_only else measure_speed(srv.url, root, m, config)
    failures = [f"greedy: {greedy_line(greedy)}"] if not greedy.ok else []
    if not batch.ok:
        failures.append(f"batch: {batch_line(batch)}")
    if speed is not None and not speed.ok:
        failures.append(f"speed: {speed.note}")
    env = fingerprint(None)
    r = LMVerifyResult(artifact=str(root), model=m.get("model", ""), candidate_id=m.get("candidate_id", ""),
                       device=m.get("device", "cpu"), ok=not failures, failures=failures, greedy=greedy, batch=batch,
                       speed=speed, environment_diff=_diff(m.get("fingerprint"), env.model_dump(mode="json")),
                       start_s=start_s, wall_s=0.0)
    r.wall_s = round(time.perf_counter() - t0, 2)
    path = config.out / "verify.json"
    r.path = str(path)
    path.write_text(json.dumps({**r.model_dump(mode="json"), "environment": env.model_dump(mode="json")}, indent=2))
    return r


def _diff(then: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    from infertune.hardware.fingerprint import environment_diff

    if not (then or {}).get("libraries"):
        return ["the artifact records no environment fingerprint (written before tune kept one): nothing to diff"]
    return environment_diff(then, now)


def judge_greedy(g: dict[str, Any], bound: float) -> LMGreedyCheck:
    # by tokens: the decoded texts can differ where the tokens do not (special tokens are skipped in the served text)
    bad = next((s for s in g["samples"] if s["match"] < s.get("of", 0)), None)
    first = None if bad is None else {"prompt_tokens": bad["prompt_tokens"], "after_tokens": bad["match"],
                                      "expected": bad["expected"][:120], "served": bad["served"][:120]}
    return LMGreedyCheck(ok=g["greedy_agreement"] >= bound, agreement=round(g["greedy_agreement"], 4),
                         exact=round(g["exact"], 4), n=g["n"], min_agreement=bound, first_mismatch=first)


def batch_check(url: str, m: dict[str, Any], sequential: dict[str, Any], concurrency: int,
                bound: float) -> LMBatchCheck:
    """The recorded prompts sent `concurrency` at a time (sharing the server's batches), each answer compared with
    the one the same server gave the same prompt alone (`sequential`, check_greedy's samples)."""
    from infertune.engines.causal_lm.vllm_server import prefix_match

    samples = m["greedy"]["samples"]
    alone = sequential["served_tokens"]
    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        together = list(pool.map(lambda s: _complete(url, s), samples))
    fracs, moved = [], []
    for s, a, b in zip(samples, alone, together, strict=True):
        n = prefix_match(a, b)
        fracs.append(n / max(len(a), 1))
        if n < len(a):
            moved.append({"prompt_tokens": s["prompt_tokens"], "after_tokens": n, "of": len(a)})
    agreement = sum(fracs) / max(len(fracs), 1)
    return LMBatchCheck(ok=agreement >= bound, concurrency=concurrency, agreement=round(agreement, 4), moved=moved,
                        min_agreement=bound)


def _complete(url: str, s: dict[str, Any]) -> list[int]:
    import httpx

    from infertune.engines.causal_lm.vllm_server import fresh_salt

    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    body = {"model": model, "prompt": s.get("prompt_ids") or s["prompt"], "max_tokens": len(s["tokens"]),
            "temperature": 0, "ignore_eos": True, "return_token_ids": True, "cache_salt": fresh_salt()}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=300).json()["choices"][0].get("token_ids") or []


def measure_speed(url: str, root: Path, m: dict[str, Any], config: Any) -> LMSpeedCheck | None:
    """A closed-loop point at tune's concurrency on the load tune measured (`load.jsonl` in the artifact, else
    --workload); judged against tune's figure when tune measured one the same way."""
    from infertune.tasks.causal_lm.served_measure import load

    tune = m.get("tune") or {}
    load_file = config.workload or (root / "load.jsonl")
    if not Path(load_file).exists():
        return None
    c = int(tune.get("concurrency") or 4)
    here = load(url, Path(load_file), concurrency=c, duration_s=config.lm_duration_s, warmup_s=3.0)
    got = here.get("requests_per_s")
    # without an SLO tune's figure is this very measurement (a closed-loop point); with one it is a searched rate
    same_way = tune.get("goodput_rps") is None and config.workload is None
    was = tune.get("requests_per_s") if same_way else None
    ratio = round(got / was, 4) if got and was else None
    ok = ratio is None or ratio >= 1 - config.max_slowdown
    note = (f"{got:.3f} req/s here vs {was:.3f} at tune time (c={c}): ratio {ratio:.3f}x, limit "
            f"{1 - config.max_slowdown:.2f}x" if ratio is not None else
            f"{(got or 0):.3f} req/s here at c={c}; tune's figure is not a closed-loop point on this load: no ratio")
    return LMSpeedCheck(ok=ok, ratio=ratio, max_slowdown=config.max_slowdown,
                        here={k: here.get(k) for k in ("requests_per_s", "n", "ttft_ms", "tpot_ms", "errors")},
                        tuned={k: tune.get(k) for k in ("requests_per_s", "concurrency", "slo")}, note=note)


def greedy_line(g: LMGreedyCheck) -> str:
    line = (f"{round(g.exact * g.n)}/{g.n} recorded continuations reproduced exactly, token agreement "
            f"{g.agreement:.3f} (budget >= {g.min_agreement})")
    if g.first_mismatch:
        f = g.first_mismatch
        line += f"; first mismatch after {f['after_tokens']} tokens of a {f['prompt_tokens']}-token prompt"
    return line


def batch_line(b: LMBatchCheck) -> str:
    moved = ", ".join(f"{x['prompt_tokens']}-token prompt after {x['after_tokens']}/{x['of']}" for x in b.moved[:4])
    return (f"alone vs {b.concurrency} at once: token agreement {b.agreement:.3f} (budget >= {b.min_agreement})"
            + (f"; moved: {moved}" if moved else "; none moved"))
