"""The stall drill: SIGSTOP the model worker (a hung device, a stopped process) under load for a few seconds, then
SIGCONT. Back-pressure must hold: new requests are refused at once (429 while the work queued is expected to take
longer than their deadline, 503 once the engine finished nothing for longer than it), never left to wait; the
queue stays within its limit; nothing errs or hangs; the server is healthy after.

"At once" is measured: the wait of every refused request (sent to refusal, as its client saw it), its P99 and
max against the server's deadline (/ready's limits.max_wait_s, `serve --max-wait-s`) and the SLO bound; and the
longest wait of the requests admitted while the worker was stopped (they run once it continues).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from infertune.validate.config import Drill, ValidateConfig
from infertune.validate.faults import _no_worker, _post_check, _series, slo_bound_ms
from infertune.validate.load import Stream, run_streams, summarize
from infertune.validate.soak import Sampler
from infertune.validate.target import Target
from infertune.workloads.bodies import Requests

Log = Callable[[str], None]
PRE_S, POST_S = 2.0, 2.0  # load before the SIGSTOP and after the SIGCONT


def _stalled_load(target: Target, api: str, req: Requests, rate: float, stall_s: float, pid: int,
                  cfg: ValidateConfig) -> dict[str, Any]:
    """One fixed schedule (not segments: a segment waits for its stalled answers, which would pause the load) of
    PRE_S + stall_s + POST_S at `rate`, the worker stopped from PRE_S for stall_s. {"run", "t_stop", "t_cont",
    "sampler"} or {"error"}."""
    sampler = Sampler(target, 0.2)
    box: dict[str, Any] = {"sampler": sampler}
    started = threading.Event()

    def on_start(t0: float) -> None:
        box["t0"] = t0
        sampler.start(t0)
        started.set()

    def go() -> None:
        try:
            box["run"] = run_streams(target.url, api, [Stream("stall", req.bodies, req.input_tokens, rate)], 0.0,
                                     PRE_S + stall_s + POST_S, cfg.timeout_s, cfg.seed, on_start=on_start)
        except Exception as e:  # noqa: BLE001
            box["error"] = f"{type(e).__name__}: {e}"
            started.set()

    th = threading.Thread(target=go, name="validate-stall-load")
    th.start()
    started.wait()
    if "t0" in box:
        time.sleep(max(0.0, box["t0"] + PRE_S - time.monotonic()))
        box["t_stop"] = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(stall_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        box["t_cont"] = time.monotonic()
    th.join()
    sampler.stop()  # before the post-check forks its load processes: never fork while a sampler thread runs
    return box


def stall(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig, log: Log) -> Drill:
    if why := _no_worker(target):
        return Drill(name="stall", reason=why)
    t_wall = time.monotonic()
    q = target.limits.get("max_queue")
    deadline_s = target.limits.get("max_wait_s")  # None: a server that does not say (admission by count only)
    stall_s = cfg.stall_s or 8.0
    rate = max(peak, 2.0 * q / stall_s) if q else peak  # the queue fills within the first half of the stall
    pid = target.worker_pid()
    bound = slo_bound_ms(cfg.slo) or 1000.0
    log(f"stall: {rate:.3g} req/s; SIGSTOP worker pid {pid} for {stall_s:g} s (queue limit {q}, deadline "
        f"{deadline_s} s)")
    box = _stalled_load(target, api, req, rate, stall_s, pid, cfg)
    if "run" not in box:
        return Drill(name="stall", passed=False, reason=f"load generator failed: {box.get('error')}")
    recs = sorted(box["run"].records(), key=lambda r: r.sched)
    t_stop, t_cont, sampler = box["t_stop"], box["t_cont"], box["sampler"]
    post = _post_check(target, api, req, peak, cfg)
    during = [r for r in recs if t_stop <= r.sent < t_cont]
    s, sd = summarize(recs, cfg.timeout_s), summarize(during, cfg.timeout_s)
    depth = [d for d in sampler.metrics["infertune_queue_depth"] if d is not None]
    max_depth = max(depth) if depth else None
    refused = sd["latency_refused_ms"]
    fails = _stall_failures(s, sd, q, max_depth, bound, deadline_s, post)
    evidence = {
        "rate_rps": round(rate, 3), "stall_s": stall_s, "signal": "SIGSTOP/SIGCONT", "worker_pid": pid,
        "max_queue": q, "max_queue_depth_seen": max_depth, "requests_during_stall": sd["requests"],
        "http_429_during_stall": sd["http_429"], "latency_429_ms": sd["latency_429_ms"], "http_429_bound_ms": bound,
        "http_503_stalled_during_stall": sd["http_503_stalled"], "refused_during_stall": sd["refused"],
        "deadline_s": deadline_s, "refused_wait_ms": {"p50": refused["p50"], "p99": refused["p99"],
                                                      "max": refused["max"], "n": refused["n"]},
        "refused_wait_rule": "sent -> refusal (429 or 503 engine_stalled) of the requests sent while the worker was "
                             "stopped, as the client saw it; must stay within the server's deadline and the SLO bound",
        "admitted_during_stall": sd["ok"], "admitted_wait_max_ms": sd["latency_ok_ms"]["max"],
        "requests": s["requests"], "ok": s["ok"], "errors_other_than_429": s["errors"],
        "errors_by_kind": s["errors_by_kind"], "hung_requests": s["hung"], "max_latency_ms": s["max_latency_ms"],
        "after": post,
    }
    series = _series(recs, t_stop, "stall")
    series["queue_t_s"] = [round(t - (t_stop - sampler.t0), 2) for t in sampler.t]
    series["queue_depth"] = sampler.metrics["infertune_queue_depth"]
    return Drill(name="stall", passed=not fails, evidence=evidence, series=series,
                 reason="; ".join(fails) or (
                     f"{sd['refused']} of {sd['requests']} requests refused while the worker was stopped {stall_s:g} s "
                     f"({sd['http_429']} x 429, {sd['http_503_stalled']} x 503 engine stalled), each at once: wait "
                     f"P99 {refused['p99']} ms, max {refused['max']} ms (deadline {deadline_s} s); queue peaked at "
                     f"{max_depth} of {q}; healthy after"),
                 wall_s=round(time.monotonic() - t_wall, 1))


def _stall_failures(s: dict[str, Any], sd: dict[str, Any], q: int | None, max_depth: float | None, bound: float,
                    deadline_s: float | None, post: dict[str, Any]) -> list[str]:
    """Why the stall drill fails: nothing refused while the worker was stopped (`sd`: the requests sent then), slow
    refusals (P99 over `bound` ms, or any over the server's deadline), the queue past its limit `q`, other errors or
    hung requests (`s`: all of them), not healthy after (`post`)."""
    fails = []
    waited = sd["latency_refused_ms"]
    if sd["refused"] == 0:
        fails.append(f"nothing refused during the stall: the queue ({q}) never filled and no deadline passed; lower "
                     "--max-queue or --max-wait-s, or set --stall")
    if waited["p99"] is not None and waited["p99"] > bound:
        fails.append(f"refusals were slow: P99 {waited['p99']:.0f} ms > {bound:g} ms")
    if deadline_s and waited["max"] is not None and waited["max"] > deadline_s * 1e3:
        fails.append(f"a refused request waited {waited['max']:.0f} ms, longer than its deadline ({deadline_s:g} s)")
    if q and max_depth is not None and max_depth > q:
        fails.append(f"queue depth reached {max_depth:.0f} > limit {q}")
    if s["errors"] or s["hung"]:
        fails.append(f"{s['errors']} error(s) other than refusals ({s['errors_by_kind']}), {s['hung']} hung")
    if not post["healthy"]:
        fails.append(f"not healthy after the stall: {post}")
    return fails
