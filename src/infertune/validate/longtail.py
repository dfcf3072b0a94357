"""The long-tail drill: the workload's length mix stretched toward its tail. Requests at the workload's
p50, p90 and p99 lengths, plus some beyond the model's input limit, are sent together (one stream per
bucket, 40/30/20/10% of the traffic instead of the natural ~50/40/9/1) at a ladder of rates; each bucket
gets its latency percentiles per rate and its knee (the rate where its P99 doubles). Over-limit input
must be refused with a 4xx (or answered, when the server truncates), never a 5xx or a hang."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from infertune.validate.analysis import knee
from infertune.validate.config import Drill, ValidateConfig
from infertune.validate.load import Stream, is_429, run_streams, summarize
from infertune.validate.target import Target
from infertune.workloads.bodies import Requests

SHARES = {"p50": 0.4, "p90": 0.3, "p99": 0.2, "over_limit": 0.1}
LADDER = (0.25, 0.5, 0.8, 1.0)


def buckets(req: Requests, max_tokens: int | None, per_bucket: int = 8) -> dict[str, dict[str, Any]]:
    """Bodies nearest the workload's p50/p90/p99 estimated lengths, and one past the model's limit."""
    est = np.asarray(req.input_tokens, dtype=float)
    out: dict[str, dict[str, Any]] = {}
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        target = float(np.percentile(est, q))
        idx = np.argsort(np.abs(est - target), kind="stable")[:per_bucket]
        out[name] = {"tokens_est": round(target, 1), "bodies": [req.bodies[i] for i in idx],
                     "in_tokens": [req.input_tokens[i] for i in idx]}
    if max_tokens:
        model = json.loads(req.bodies[0]).get("model")
        n = int(1.5 * max_tokens)
        words = ["a"] * n
        first = json.loads(req.bodies[0])
        key = "input" if "input" in first else "prompt"  # embeddings, or completions (vLLM: max_model_len)
        body = {key: " ".join(words)} | ({"model": model} if model else {}) | (
            {"max_tokens": 1} if key == "prompt" else {})
        out["over_limit"] = {"tokens_est": n, "bodies": [json.dumps(body).encode()], "in_tokens": [n]}
    return out


def long_tail(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig,
              log: Callable[[str], None]) -> Drill:
    from infertune.validate.config import point_s

    t_wall = time.monotonic()
    step = point_s(cfg, "step_s", api)
    max_tok = target.limits.get("max_input_tokens")
    bks = buckets(req, max_tok)
    truncate = bool(target.limits.get("truncate"))
    shares = {k: SHARES[k] for k in bks}
    total = sum(shares.values())
    table: dict[str, dict[str, Any]] = {k: {"tokens_est": b["tokens_est"], "share": round(shares[k] / total, 3),
                                            "points": []} for k, b in bks.items()}
    names = ", ".join(f"{k} ~{b['tokens_est']:g} tokens" for k, b in bks.items())
    log(f"long tail: buckets {names}; rates "
        f"{', '.join(f'{f:g}' for f in LADDER)} x peak, {step:g} s each")
    fails: list[str] = []
    for frac in LADDER:
        rate = frac * peak
        streams = [Stream(k, b["bodies"], b["in_tokens"], rate * shares[k] / total) for k, b in bks.items()]
        run = run_streams(target.url, api, streams, min(1.0, step / 4), step, cfg.timeout_s, cfg.seed)
        w0 = run.t0 + run.warmup
        for k in bks:
            recs = [r for r in run.records(k) if r.sched >= w0]
            s = summarize(recs, cfg.timeout_s)
            rejected = sum(1 for r in recs if r.error == "http_4xx" and not is_429(r))
            lat = s["latency_ok_ms"]
            row = {"rate_rps": round(rate, 3), "bucket_rate_rps": round(rate * shares[k] / total, 3),
                   "requests": s["requests"], "ok": s["ok"], "rejected_4xx": rejected, "http_429": s["http_429"],
                   "p50_ms": lat["p50"], "p95_ms": lat["p95"], "p99_ms": lat["p99"], "max_ms": s["max_latency_ms"],
                   "hung": s["hung"]}
            if "ttft_ok_ms" in s:  # streamed completions: time to first token and per output token, by length
                row |= {"p50_ttft_ms": s["ttft_ok_ms"]["p50"], "p99_ttft_ms": s["ttft_ok_ms"]["p99"],
                        "p50_tpot_ms": s["tpot_ok_ms"]["p50"], "p99_tpot_ms": s["tpot_ok_ms"]["p99"]}
            bad = {kind: n for kind, n in s["errors_by_kind"].items() if kind != "http_4xx"}
            if k == "over_limit" and not truncate:
                row["p99_reject_ms"] = (float(np.percentile([(r.done - r.sched) * 1e3 for r in recs], 99))
                                        if recs else None)
                if s["ok"]:
                    fails.append(f"over-limit input was answered 200 at {rate:.3g} req/s without --truncate")
            elif rejected:
                fails.append(f"{k}: {rejected} request(s) rejected with 4xx at {rate:.3g} req/s "
                             f"({s['error_examples'].get('http_4xx', '')[:120]})")
            if bad or s["hung"]:
                fails.append(f"{k} at {rate:.3g} req/s: errors {bad}, {s['hung']} hung")
                row["errors_by_kind"] = bad
                row["error_examples"] = s["error_examples"]
            table[k]["points"].append(row)
    for k, b in table.items():
        if k == "over_limit" and not truncate:
            b["knee"] = {"rate": None, "rule": "refused by design; see p99_reject_ms"}
            continue
        b["knee"] = knee([p["rate_rps"] for p in b["points"]], [p["p99_ms"] for p in b["points"]])
    knees = {k: b["knee"].get("rate") for k, b in table.items() if k != "over_limit" or truncate}
    evidence = {"peak_rps": round(peak, 3), "ladder_x_peak": list(LADDER), "step_s": step,
                "max_input_tokens": max_tok, "truncate": truncate, "buckets": table, "knee_rps": knees}
    ttft = {k: b["points"][-1].get("p99_ttft_ms") for k, b in table.items() if b["points"]
            and "p99_ttft_ms" in b["points"][-1]}
    if ttft:  # streamed completions: what a longer prompt costs before the first token, at the peak rate
        evidence["p99_ttft_ms_at_peak_by_bucket"] = ttft
    if not max_tok:
        evidence["note"] = "the server does not say its input limit: no over-limit bucket"
    series = {"buckets": {k: {"rate": [p["rate_rps"] for p in b["points"]], "p50": [p["p50_ms"] for p in b["points"]],
                              "p95": [p["p95_ms"] for p in b["points"]], "p99": [p["p99_ms"] for p in b["points"]]}
                          for k, b in table.items()}}
    return Drill(name="long-tail", passed=not fails, evidence=evidence, series=series,
                 reason="; ".join(dict.fromkeys(fails)) or (
                     "every bucket answered without 5xx or hangs" + ("" if truncate or not max_tok
                                                                     else ", over-limit input refused with 4xx")
                     + "; P99 knees (req/s): " + ", ".join(f"{k} {v if v is not None else 'none'}"
                                                           for k, v in knees.items())
                     + ("; P99 TTFT at the peak (ms): " + ", ".join(f"{k} {v}" for k, v in ttft.items())
                        if ttft else "")),
                 wall_s=round(time.monotonic() - t_wall, 1))
