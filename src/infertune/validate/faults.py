"""Fault drills: SIGKILL the model worker under load, a burst at 10x the peak, and oversized requests (the guards
that keep one request from exhausting memory); SIGSTOP (a stalled device) is stall.py. Each returns a Drill whose
evidence holds the figures that decided it."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx

from infertune.validate.config import Drill, ValidateConfig
from infertune.validate.load import BackgroundLoad, Stream, is_refused, point, run_streams, summarize
from infertune.validate.load import scatter as _series
from infertune.validate.soak import Sampler
from infertune.validate.target import Target, scrape
from infertune.workloads.bodies import Requests

Log = Callable[[str], None]
RESTARTS = "infertune_worker_restarts_total"


def slo_bound_ms(slo: str) -> float | None:
    m = re.search(r"e2e_ms\s*<=?\s*([\d.]+)", slo or "")
    return float(m.group(1)) if m else None


def _no_worker(target: Target) -> str | None:
    """Why the worker drills cannot run on this target, or None."""
    if not target.owned:
        return ("validate did not start this server, so it cannot reach its model worker process; pass the "
                "artifact instead of a URL to run this drill")
    if target.worker_pid() is None:
        return ("the server runs the model inside its own process (no --worker-process, or an LLM engine that "
                "infertune does not supervise): there is no worker to kill or stall without killing the server")
    return None


def _settle(target: Target, timeout: float) -> float | None:
    """Seconds until /ready answers 200 and the queue is empty (None: not within timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if target.ready_now() is not None and not scrape(target.url).get("infertune_queue_depth"):
            return round(time.monotonic() - t0, 2)
        time.sleep(0.2)
    return None


def _post_check(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig, seconds: float = 3.0,
                ) -> dict[str, Any]:
    """After a fault: half the peak for a few seconds must be answered without errors."""
    settle = _settle(target, 60)
    if settle is None or not target.alive():
        return {"healthy": False, "settle_s": settle, "note": "server not ready (or its queue not empty) 60 s later"}
    run = run_streams(target.url, api, [Stream("post", req.bodies, req.input_tokens, 0.5 * peak)], 0.0, seconds,
                      cfg.timeout_s, cfg.seed + 99)
    s = summarize(run.records(), cfg.timeout_s)
    return {"healthy": s["errors"] == 0 and s["refused"] == 0 and s["ok"] > 0, "settle_s": settle,
            "rate_rps": round(0.5 * peak, 3), "seconds": seconds, "requests": s["requests"], "ok": s["ok"],
            "errors": s["errors"] + s["refused"], "p99_ms": s["latency_ok_ms"]["p99"]}


def kill_worker(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig, log: Log) -> Drill:
    if getattr(target, "llm", False):  # vLLM under `infertune serve`: its whole engine is the worker
        from infertune.validate.engine_kill import kill_engine

        return kill_engine(target, api, req, peak, cfg, log)
    if why := _no_worker(target):
        return Drill(name="kill-worker", reason=why)
    t_wall = time.monotonic()
    rate = cfg.soak_fraction * peak
    pid = target.worker_pid()
    restarts0 = scrape(target.url).get(RESTARTS)
    log(f"kill-worker: {rate:.3g} req/s; SIGKILL to worker pid {pid} after 3 s; waiting up to "
        f"{max(60.0, 2 * cfg.recovery_budget_s):g} s for /ready")
    t_kill = t_ready = None
    new_pid = None
    with BackgroundLoad(target.url, api, Stream("kill", req.bodies, req.input_tokens, rate), cfg.timeout_s,
                        seed=cfg.seed) as bg:
        time.sleep(3.0)
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        while time.monotonic() - t_kill < max(60.0, 2 * cfg.recovery_budget_s) and target.alive():
            info = target.ready_now()
            w = (info or {}).get("worker") or {}
            if info is not None and w.get("pid") not in (None, pid):
                t_ready, new_pid = time.monotonic(), w.get("pid")
                break
            time.sleep(0.1)
        time.sleep(3.0)
        recs = bg.stop()
        load_error = bg.error
    restarts1 = scrape(target.url).get(RESTARTS)
    s = summarize(recs, cfg.timeout_s)
    after = [r for r in recs if r.sent >= t_kill]
    first_ok = min((r.done for r in after if not r.error), default=None)
    recovery = round(first_ok - t_kill, 3) if first_ok is not None else None
    failed = [r for r in recs if r.error]
    clear = [r for r in failed if (r.error == "http_5xx" and "worker" in str(r.detail)) or is_refused(r)]
    post_from = (t_ready or t_kill) + 0.5
    post = [r for r in recs if r.sched >= post_from]
    post_err = sum(1 for r in post if r.error and not is_refused(r))  # load shedding, judged by stall/burst
    post_429 = sum(1 for r in post if is_refused(r))
    delta = (restarts1 - restarts0) if restarts0 is not None and restarts1 is not None else None
    fails = []
    if not target.alive():
        fails.append("the server process itself died")
    if recovery is None or recovery > cfg.recovery_budget_s:
        fails.append(f"no successful answer within {cfg.recovery_budget_s:g} s of the kill (first: {recovery} s)")
    if s["hung"]:
        fails.append(f"{s['hung']} request(s) hung until the client timeout ({cfg.timeout_s:g} s)")
    if len(clear) != len(failed):
        fails.append(f"{len(failed) - len(clear)} failure(s) were neither a clean 5xx naming the worker nor a 429: "
                     f"{s['errors_by_kind']}")
    if post_err:
        fails.append(f"{post_err} error(s) after the worker was back")
    if delta is not None and delta < 1:
        fails.append("infertune_worker_restarts_total did not count the restart")
    if load_error:
        fails.append(f"load generator failed: {load_error}")
    evidence = {
        "rate_rps": round(rate, 3), "killed_pid": pid, "new_pid": new_pid, "signal": "SIGKILL",
        "recovery_s": recovery, "recovery_rule": "kill -> end of the first successful request sent after the kill",
        "ready_again_s": round(t_ready - t_kill, 3) if t_ready else None, "recovery_budget_s": cfg.recovery_budget_s,
        "requests": s["requests"], "failed_requests": len(failed), "failed_clean": len(clear),
        "failed_http_429": s["http_429"],
        "errors_by_kind": s["errors_by_kind"], "error_examples": s["error_examples"], "hung_requests": s["hung"],
        "max_latency_ms": s["max_latency_ms"], "client_timeout_s": cfg.timeout_s, "errors_after_recovery": post_err,
        "http_429_after_recovery": post_429,
        "requests_after_recovery": len(post), "worker_restarts_delta": delta, "server_alive": target.alive(),
    }
    return Drill(name="kill-worker", passed=not fails, evidence=evidence, series=_series(recs, t_kill, "kill"),
                 reason="; ".join(fails) or (f"answered again {recovery} s after SIGKILL (budget "
                                             f"{cfg.recovery_budget_s:g} s); {len(failed)} of {s['requests']} requests "
                                             "failed, all cleanly (503 naming the worker, or 429); none hung"),
                 wall_s=round(time.monotonic() - t_wall, 1))


def drain_rps(recs: list[tuple], min_ok: int = 10) -> float | None:
    """Answered requests per second while the queue was full: the rate it actually drained at, which on a busy
    host is below the peak measured earlier. None with too few answers to say."""
    ends = sorted(r.done for r in recs if not r.error)
    if len(ends) < min_ok or ends[-1] <= ends[0]:
        return None
    return (len(ends) - 1) / (ends[-1] - ends[0])


def burst_bound_ms(q: int | None, peak: float, drain: float | None, slo_ms: float, timeout_s: float) -> float:
    """The longest wait an admitted request can have: behind at most `q` others, served at the rate the queue
    drained at (the peak when it drained faster). Beyond it, something queues without a bound."""
    if not q:
        return timeout_s * 1e3
    rate = min(peak, drain) if drain else peak
    return 1.5 * (q / rate) * 1e3 + slo_ms


def burst(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig, log: Log) -> Drill:
    t_wall = time.monotonic()
    rate = cfg.burst_factor * peak
    q = target.limits.get("max_queue")
    slo = slo_bound_ms(cfg.slo) or 0.0
    log(f"burst: {rate:.3g} req/s ({cfg.burst_factor:g}x peak) for {cfg.burst_s:g} s")
    sampler = Sampler(target, 0.2)
    try:
        run = run_streams(target.url, api, [Stream("burst", req.bodies, req.input_tokens, rate)], 0.0, cfg.burst_s,
                          cfg.timeout_s, cfg.seed, on_start=sampler.start)
    finally:
        sampler.stop()
    recs = sorted(run.records(), key=lambda r: r.sched)
    s = summarize(recs, cfg.timeout_s)
    client = point(run, target.url, api, cfg.timeout_s, rate=rate)
    post = _post_check(target, api, req, peak, cfg)
    depth = [d for d in sampler.metrics["infertune_queue_depth"] if d is not None]
    p99 = s["latency_ok_ms"]["p99"]
    drain = drain_rps(recs)
    bound = burst_bound_ms(q, peak, drain, slo, cfg.timeout_s)
    fails = []
    if s["errors"] or s["hung"]:
        fails.append(f"{s['errors']} error(s) other than 429 ({s['errors_by_kind']}), {s['hung']} hung")
    if p99 is not None and p99 > bound:
        fails.append(f"admitted requests' P99 {p99:.0f} ms > {bound:.0f} ms (unbounded queueing)")
    if not post["healthy"]:
        fails.append(f"not healthy after the burst: {post}")
    evidence = {
        "rate_rps": round(rate, 3), "peak_rps": round(peak, 3), "burst_factor": cfg.burst_factor,
        "seconds": cfg.burst_s, "requests": s["requests"], "ok": s["ok"], "http_429": s["http_429"],
        "errors_other_than_429": s["errors"], "errors_by_kind": s["errors_by_kind"],
        "error_examples": s["error_examples"], "hung_requests": s["hung"], "latency_ok_ms": s["latency_ok_ms"],
        "latency_429_ms": s["latency_429_ms"], "max_latency_ms": s["max_latency_ms"],
        "latency_bound_ms": round(bound, 1),
        "latency_bound_rule": "1.5 x max_queue / drain rate + SLO bound: the longest wait an admitted request can "
                              "have (drain rate: the burst's completions per second, or the peak if that is lower)",
        "drain_rps": round(drain, 3) if drain else None,
        "max_queue": q, "max_queue_depth_seen": max(depth) if depth else None,
        "client_sent_rps": client.client.sent_rps, "client_valid": client.valid,
        "client_note": client.invalid_reason or client.warning, "after": post,
    }
    t0 = run.t0
    series = _series(recs, t0, "burst")
    series["queue_t_s"] = [round(t, 2) for t in sampler.t]
    series["queue_depth"] = sampler.metrics["infertune_queue_depth"]
    shed = f"{s['http_429']} of {s['requests']} refused with 429" if s["http_429"] else "no 429 needed"
    return Drill(name="burst", passed=not fails, evidence=evidence, series=series,
                 reason="; ".join(fails) or f"{shed}; admitted P99 {p99} ms <= {bound:.0f} ms; healthy after",
                 wall_s=round(time.monotonic() - t_wall, 1))


def oom_guard(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig, log: Log) -> Drill:
    """Requests that would exhaust memory if accepted must be refused with a 4xx, the largest legal one must
    be answered, and the server must stay up."""
    if api != "embeddings":
        return Drill(name="oom-guard", reason="only built for embedding servers so far")
    t_wall = time.monotonic()
    lim = target.limits
    items = int(lim.get("max_items_per_request") or 2048)
    body = int(lim.get("max_body_bytes") or 16 * 2**20)
    max_tok = lim.get("max_input_tokens")
    if max_tok is None:
        try:
            max_tok = (httpx.get(target.url + "/v1/models", timeout=10).json()["data"][0]).get("max_input_tokens")
        except (httpx.HTTPError, ValueError, KeyError, IndexError, AttributeError):
            max_tok = None
    model = json.loads(req.bodies[0]).get("model")
    rss0 = target.rss_mb()
    probes: list[tuple[str, Any, str]] = [
        ("too_many_items", ["a"] * (items + 1), "4xx"),
        ("body_too_large", "a " * ((body + 2**20) // 2), "4xx"),
    ]
    if max_tok:
        probes.append(("over_length_input", "a " * (2 * int(max_tok)), "200" if lim.get("truncate") else "4xx"))
        n_big = min(items, 64)
        probes.append(("largest_legal_batch", ["a " * (int(max_tok) - 8)] * n_big, "200"))
    results = {}
    fails = []
    for name, inp, want in probes:
        t = time.perf_counter()
        try:
            r = httpx.post(target.url + "/v1/embeddings", json={"model": model, "input": inp},
                           timeout=cfg.timeout_s * 4)
            status, msg = r.status_code, r.text[:200]
        except httpx.HTTPError as e:
            status, msg = None, f"{type(e).__name__}: {e}"
        ms = round((time.perf_counter() - t) * 1e3, 1)
        good = status is not None and (400 <= status < 500 if want == "4xx" else status == 200)
        results[name] = {"status": status, "expected": want, "latency_ms": ms, "message": msg}
        if not good:
            fails.append(f"{name}: got {status} ({msg[:80]}), expected {want}")
    rss1 = target.rss_mb()
    healthy = target.ready_now() is not None or (not target.info and target.alive())
    if not healthy:
        fails.append("server not ready after the oversized requests")
    if not max_tok:
        results["note"] = "the server does not say its input limit: over-length probes skipped"
    evidence = {"probes": results, "limits": {"max_items_per_request": items, "max_body_bytes": body,
                                               "max_input_tokens": max_tok},
                "rss_before_mb": round(rss0, 1) if rss0 else None, "rss_after_mb": round(rss1, 1) if rss1 else None,
                "healthy_after": healthy}
    return Drill(name="oom-guard", passed=not fails, evidence=evidence,
                 reason="; ".join(fails) or "oversized requests refused with 4xx, the largest legal batch answered, "
                                            "server healthy", wall_s=round(time.monotonic() - t_wall, 1))
