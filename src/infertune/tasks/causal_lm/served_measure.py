"""A causal-LM candidate measured as vLLM serves it: a checkpoint directory and the engine arguments, started
as a server, loaded by `infertune bench` at the workload's lengths, and scored against a reference served the
same way. This is the measuring side of a served candidate; which candidates to start is the search's job.

Accuracy comes from the API, never from our own forward pass:
- teacher-forced: each evaluation sequence is sent as a prompt with `prompt_logprobs=k` and `max_tokens=1`,
  so the reference and the candidate are read at the same positions on the same tokens. Perplexity is from
  the logprob of the token that is there; top-1 agreement compares the rank-1 tokens; KL(ref || cand) is taken
  over the tokens both servers list in their top k plus one bucket for the rest. Merging tokens into a bucket
  never raises a KL, so the figure is a lower bound of the full KL, exact when the top k hold the mass.
- greedy: temperature 0 with EOS ignored, compared token by token with the reference's continuation.
The score dicts have tasks/causal_lm/verify.py's shape, so `verify.accuracy` and `verify.within_budget` judge them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infertune.engines.causal_lm.vllm_server import fresh_salt
from infertune.errors import InfertuneError

TOP_K = 20  # vLLM's default --max-logprobs: more would need a server argument the candidate was not measured with


@dataclass(frozen=True)
class Served:
    """What vLLM is started with: the checkpoint it loads and the engine settings beyond the model."""

    checkpoint: str
    args: tuple[str, ...] = ()  # e.g. ("--max-num-seqs", "8", "--enable-prefix-caching")
    name: str = ""  # how results name it; default: the checkpoint's folder name and the arguments
    env: tuple[tuple[str, str], ...] = field(default=())  # e.g. (("VLLM_CPU_KVCACHE_SPACE", "2"),)

    @property
    def id(self) -> str:
        return self.name or " ".join([Path(self.checkpoint).name, *self.args])


def _post(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    import httpx

    r = httpx.post(f"{url}/v1/completions", json=body, timeout=timeout_s)
    if r.status_code != 200:
        raise InfertuneError(f"{url}/v1/completions answered {r.status_code}: {r.text[:300]}")
    return r.json()


def position_logprobs(url: str, model: str, seqs: list[list[int]], k: int = TOP_K,
                      timeout_s: float = 300) -> list[list[tuple[int, float, dict[int, float]]]]:
    """For each sequence, each position after the first: (the token there, its logprob, the top-k logprobs)."""
    out = []
    for ids in seqs:
        body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": k,
                "cache_salt": fresh_salt()}
        got = _post(url, body, timeout_s)["choices"][0].get("prompt_logprobs")
        if not got or len(got) != len(ids):
            raise InfertuneError(f"{url} gave no prompt logprobs for a {len(ids)}-token prompt "
                                 "(vLLM answers them for prompt_logprobs=k; another server may not)")
        rows = []
        for tok, pos in zip(ids[1:], got[1:], strict=True):
            lp = {int(t): float(v["logprob"]) for t, v in pos.items()}
            # vLLM adds the token that is there when it is not in the top k (its rank says so)
            top = {int(t): float(v["logprob"]) for t, v in pos.items() if (v.get("rank") or 1) <= k}
            rows.append((int(tok), lp[int(tok)], top))
        out.append(rows)
    return out


def _kl_bucketed(p: dict[int, float], q: dict[int, float]) -> float:
    """KL(p || q) over the tokens in both top lists, one bucket for the rest of each distribution."""
    common = p.keys() & q.keys()
    kl = 0.0
    for t in common:
        kl += math.exp(p[t]) * (p[t] - q[t])
    p_rest = max(0.0, 1.0 - sum(math.exp(p[t]) for t in common))
    q_rest = max(1e-12, 1.0 - sum(math.exp(q[t]) for t in common))
    if p_rest > 1e-12:
        kl += p_rest * math.log(p_rest / q_rest)
    return max(kl, 0.0)


def score(ref: list[list[tuple[int, float, dict[int, float]]]],
          cand: list[list[tuple[int, float, dict[int, float]]]] | None = None) -> dict[str, Any]:
    """verify.accuracy's score dict: the NLL of `cand` (or of `ref` alone), and against `ref` the top-1
    agreement and the mean bucketed KL per position."""
    rows = cand if cand is not None else ref
    nll = -sum(lp for seq in rows for _, lp, _ in seq)
    n = sum(len(seq) for seq in rows)
    if n == 0:
        raise InfertuneError("no positions to score: every evaluation sequence has one token")
    if cand is None:
        return {"nll": nll, "n": n, "top1_agreement": 1.0, "kl_mean": 0.0}
    agree, kl = 0, 0.0
    for rs, cs in zip(ref, cand, strict=True):
        for (_, _, rp), (_, _, cp) in zip(rs, cs, strict=True):
            agree += max(rp, key=rp.get) == max(cp, key=cp.get)
            kl += _kl_bucketed(rp, cp)
    return {"nll": nll, "n": n, "top1_agreement": agree / n, "kl_mean": kl / n}


def greedy(url: str, model: str, prompts: list[list[int]], n_new: int, timeout_s: float = 300,
           concurrency: int = 1) -> list[list[int]]:
    """Temperature-0 continuations of `n_new` tokens (EOS ignored), as token ids; one request at a time, or
    `concurrency` in flight (they then share the server's batches)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(ids: list[int]) -> list[int]:
        body = {"model": model, "prompt": ids, "max_tokens": n_new, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True, "cache_salt": fresh_salt()}
        ch = _post(url, body, timeout_s)["choices"][0]
        if ch.get("token_ids") is None:
            raise InfertuneError(f"{url} did not return token ids (return_token_ids); greedy agreement needs them")
        return [int(t) for t in ch["token_ids"]]

    if concurrency <= 1:
        return [one(ids) for ids in prompts]
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, prompts))


def _pct(x) -> dict[str, Any] | None:
    return None if x is None else {"p50": x.p50, "p99": x.p99, "n": x.n}


def _point_dict(p) -> dict[str, Any]:
    return {"load": p.label, "requests_per_s": p.achieved_rps, "ok": p.ok, "n": p.n, "e2e_ms": _pct(p.latency_ms),
            "ttft_ms": _pct(p.ttft_ms),
            "tpot_ms": _pct(p.tpot_ms), "output_tokens_per_s": p.output_tokens_per_s, "goodput_rps": p.goodput_rps,
            "valid": p.valid, "invalid_reason": p.invalid_reason, "errors": p.errors.total}


def load(url: str, workload: Path, *, concurrency: int = 1, slo: str | None = None, slo_start: float | None = None,
         slo_tolerance: float = 0.1, rate: float | None = None, slo_bounds: str | None = None,
         duration_s: float = 15.0, warmup_s: float = 3.0, model: str | None = None, log=None) -> dict[str, Any]:
    """What `infertune bench` measures on the server (completions, streamed, the workload's prompts and
    max_tokens). One of:
    - `slo` such as 'p99_ttft_ms<=800,p99_tpot_ms<=120': bench's search for the highest request rate that meets
      it, from `slo_start` (default: bench's one-at-a-time rate). The answer is that rate (`max_load_rps`, the
      sustained goodput the pick compares), the point measured there (`at_max`) and, when no rate met it, the
      lowest-rate point (`lowest`);
    - `rate`: one open-loop point at that many requests/s, judged against `slo_bounds` (`slo_pass`);
    - else one closed-loop point at `concurrency`."""
    from infertune.bench.config import BenchConfig
    from infertune.bench.runner import bench
    from infertune.bench.slo import parse_slo

    if slo:
        kw: dict[str, Any] = {"slo": slo, "slo_over": "rate", "slo_repeats": 1, "slo_tolerance": slo_tolerance,
                              "slo_step": 1.5, "slo_start": slo_start}
    elif rate:
        kw = {"rates": [rate]}
    else:
        kw = {"concurrency": [concurrency]}
    cfg = BenchConfig(url=url, api="completions", model=model, workload=workload, duration=duration_s,
                      warmup=warmup_s, stream=True, metrics_url="", **kw)
    t = time.monotonic()
    res = bench(cfg, log)
    out: dict[str, Any] = {"slo": slo, "wall_s": round(time.monotonic() - t, 1), "points": len(res.points)}
    if slo:
        s = res.slo
        passing = [p for p in res.points if p.slo_pass]
        at = max(passing, key=lambda p: p.offered.rate or 0.0) if passing else None
        low = min(res.points, key=lambda p: p.offered.rate or 0.0) if res.points else None
        out |= {"met": bool(s and s.met), "max_load_rps": s.max_load if s else None,
                "bracket": s.bracket if s else None, "at_max": _point_dict(at) if at else None,
                "lowest": _point_dict(low) if low else None, "steps": list(s.steps) if s else []}
    else:
        p = res.points[-1]
        out |= {"concurrency": None if rate else concurrency, "rate": rate, **_point_dict(p)}
        if rate and slo_bounds:
            out["slo_pass"], out["slo_detail"] = parse_slo(slo_bounds, 0.01, True, keepup=0.95).check(p)
    return out


@dataclass
class EvalSets:
    """What a served candidate is scored and loaded on, all from the workload's eval split (the calibration
    split made the checkpoints, so it never judges them)."""

    seqs: list[list[int]]  # teacher-forced sequences: prompt tokens, capped at max_len
    prompts: list[list[int]]  # greedy prompts
    load_file: Path  # completions JSONL for bench: {"prompt", "max_tokens"} of every eval request
    n_eval: int


def eval_sets(tokenizer, out_dir: Path, workload: str | Path | None = None, *, n_seqs: int = 24,
              n_prompts: int = 16, max_len: int = 256, max_tokens: int | None = None, seed: int = 0,
              rendered: Any = None) -> EvalSets:
    """Split `workload` (None: the built-in chat sample) the way quantize/llm_calibration.py does and keep the eval
    side: `n_seqs` sequences for the teacher-forced scores and `n_prompts` greedy prompts, spread over its lengths;
    every eval request, rendered with the chat template, goes to the bench file (`max_tokens` caps outputs).
    `rendered`: calibration.render_workload's answer for this tokenizer and workload, when made already."""
    import json

    from infertune.quantize.llm_calibration import EVAL_FRACTION, render_workload, split_indices

    r = rendered or render_workload(tokenizer, workload)
    reqs, texts, ids = r.reqs, r.texts, r.ids
    calib = set(split_indices([len(x) for x in ids], EVAL_FRACTION, seed))
    ev = sorted((i for i in range(len(reqs)) if i not in calib), key=lambda i: len(ids[i]))
    if len(ev) < 2:
        raise InfertuneError(f"the workload's eval split has {len(ev)} request(s); served accuracy needs at least 2")

    def spread(n: int) -> list[int]:  # evenly over the sorted lengths, so short and long prompts both count
        n = min(n, len(ev))
        return [ev[round(j * (len(ev) - 1) / max(n - 1, 1))] for j in range(n)]

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "load.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in ev:
            mt = reqs[i].max_tokens if max_tokens is None else min(reqs[i].max_tokens or max_tokens, max_tokens)
            # EOS ignored: every request runs to the workload's output length, so TPOT and goodput are judged at
            # the lengths the user asked for (a model that stops at once streams no content and is not a result)
            f.write(json.dumps({"prompt": texts[i], "max_tokens": mt, "ignore_eos": True}, ensure_ascii=False) + "\n")
    return EvalSets(seqs=[ids[i][:max_len] for i in spread(n_seqs)], prompts=[ids[i] for i in spread(n_prompts)],
                    load_file=path, n_eval=len(ev))


def compare(cands: list[Served], sets: EvalSets, *, n_new: int = 16, slo: str | None = None, concurrency: int = 1,
            device: str = "cpu", max_model_len: int = 2048, port: int = 8123, python: str | None = None,
            log_dir: Path | None = None, budget=None, say=print) -> list[dict[str, Any]]:
    """Serve each candidate in turn, the first being the reference: its start time, what bench measures (the
    SLO search with `slo`, else one point at `concurrency`), and its accuracy against the reference's, all
    through the API. A candidate that fails to start or answer is recorded with the error and the rest go on.
    `budget(id) -> str | None` may refuse a start (the time left); its answer is the record's reason."""
    from infertune.engines.causal_lm.vllm_server import launch
    from infertune.tasks.causal_lm.verify import accuracy

    out: list[dict[str, Any]] = []
    ref_rows = ref_greedy = None
    for s in cands:
        rec: dict[str, Any] = {"id": s.id, "checkpoint": s.checkpoint, "args": list(s.args), "env": dict(s.env)}
        out.append(rec)
        if budget is not None and (why := budget(s.id)):
            rec |= {"status": "skipped", "reason": why}
            continue
        log = (log_dir / f"vllm-{len(out)}.log") if log_dir else None
        say(f"  serving {s.id} ...")
        try:
            srv, took = launch(s.checkpoint, s.args, device=device, max_model_len=max_model_len, port=port,
                               python=python, log=log, env=dict(s.env))
        except InfertuneError as e:
            rec |= {"status": "failed", "stage": "start", "reason": str(e)[-600:]}
            say(f"  [failed] {s.id}: {str(e).splitlines()[0]}")
            continue
        rec["load_s"] = round(took, 1)
        try:
            rows = position_logprobs(srv.url, "candidate", sets.seqs)
            gr = greedy(srv.url, "candidate", sets.prompts, n_new)
            if ref_rows is None:
                ref_rows, ref_greedy = rows, gr
                acc = accuracy(score(rows), None, gr, gr)
            else:
                acc = accuracy(score(ref_rows), score(ref_rows, rows), ref_greedy, gr)
            rec |= {"accuracy": acc.model_dump(exclude_none=True), "greedy": gr,
                    "load": load(srv.url, sets.load_file, concurrency=concurrency, slo=slo, model="candidate"),
                    "status": "ok"}
        except (InfertuneError, RuntimeError, OSError) as e:
            rec |= {"status": "failed", "stage": "measure", "reason": str(e)[-600:]}
            say(f"  [failed] {s.id}: {str(e).splitlines()[0]}")
        finally:
            srv.stop()
        if rec["status"] == "ok":
            a, ld = rec["accuracy"], rec["load"]
            speed = (f"max {ld['max_load_rps']} req/s within {slo}" if slo else
                     f"{ld['requests_per_s']:.2f} req/s at c={concurrency}, TTFT P99 "
                     f"{(ld['ttft_ms'] or {}).get('p99')} ms, TPOT P99 {(ld['tpot_ms'] or {}).get('p99')} ms")
            say(f"  {s.id}: load {took:.0f} s; {speed}; top-1 {a.get('top1_agreement'):.4f}, KL "
                f"{a.get('kl_mean'):.2e}, greedy {a.get('greedy_agreement'):.2f} (exact {a.get('greedy_exact'):.2f})")
    return out
