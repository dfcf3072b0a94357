"""From raw request records to one load point: percentiles with n, throughput, errors by kind, goodput,
the client self-check and the error budget, which together decide whether the point can be trusted."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from infertune.bench.client import HINTS
from infertune.bench.results import ClientCheck, Errors, Offered, Percentiles, Point


def percentiles(values_ms) -> Percentiles:
    a = np.asarray(values_ms, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return Percentiles()
    q = np.percentile(a, [50, 90, 95, 99, 99.9])
    r = lambda x: round(float(x), 3)  # noqa: E731
    return Percentiles(p50=r(q[0]), p90=r(q[1]), p95=r(q[2]), p99=r(q[3]), p999=r(q[4]), mean=r(a.mean()),
                       min=r(a.min()), max=r(a.max()), n=int(a.size))


def build_point(results: list[dict[str, Any]], *, offered: Offered, t0: float, warmup: float, duration: float,
                streaming: bool, bench_t0: float, cfg, bounds: dict[str, float] | None = None,
                mode: str = "rate", save_requests: bool = False, error_budget: float | None = None) -> Point:
    """`bounds`: per-request goodput limits in ms, e.g. {"e2e": 200, "ttft": 500}. `error_budget`: a point
    with a larger share of failed requests is error-laden and not valid (None: no such rule, for callers
    such as validate's fault drills that expect errors and judge them by their own rules)."""
    w0, w1 = t0 + warmup, t0 + warmup + duration
    recs = [r for res in results for r in res["records"]]
    meas = [r for r in recs if w0 <= r.sched < w1]
    unsent = sum(1 for res in results for u in res.get("unsent", []) if w0 <= u < w1)
    n = len(meas) + unsent
    ok = [r for r in meas if not r.error]
    errs = [r for r in meas if r.error]
    by_kind: dict[str, int] = {}
    examples: dict[str, str] = {}
    for r in errs:
        by_kind[r.error] = by_kind.get(r.error, 0) + 1
        examples.setdefault(r.error, f"{r.detail} ({HINTS.get(r.error, '')})")
    done_in_window = [r for r in recs if not r.error and w0 <= r.done < w1]
    achieved = len(done_in_window) / duration
    e2e = np.array([(r.done - r.sched) * 1e3 for r in ok])
    lag = np.array([(r.sent - r.sched) * 1e3 for r in meas])
    beats = np.array([b * 1e3 for res in results for b in res["beats"]])
    cpu = max((res["cpu"] / res["wall"] for res in results if res["wall"] > 0), default=0.0)
    sent = sum(1 for r in recs if w0 <= r.sent < w1) / duration
    point = Point(offered=offered, n=n, ok=len(ok), achieved_rps=round(achieved, 3),
                  errors=Errors(total=len(errs), rate=round(len(errs) / n, 5) if n else 0.0, by_kind=by_kind,
                                examples=examples),
                  latency_ms=percentiles(e2e), window_s=duration,
                  t_start=round(w0 - bench_t0, 3), t_end=round(w1 - bench_t0, 3),
                  client=ClientCheck(workers=len(results), cpu_util=round(cpu, 3), lag_ms=percentiles(lag),
                                     loop_lag_ms=percentiles(beats), sent_rps=round(sent, 2), scheduled=n,
                                     unsent=unsent, inflight_capped=any(res.get("capped") for res in results)))
    in_tok = sum(r.in_tokens for r in done_in_window)
    point.tokens_estimated = any(r.detail != "usage" for r in done_in_window)
    point.input_tokens_per_s = round(in_tok / duration, 2)
    if e2e.size:
        point.mean_inflight = round(achieved * float(e2e.mean()) / 1e3, 3)
    good = np.ones(len(ok), dtype=bool)
    if streaming:
        ttft = np.array([(r.first - r.sched) * 1e3 for r in ok])
        itl = [np.diff(np.asarray(r.chunk_times)) * 1e3 for r in ok if r.chunk_times and len(r.chunk_times) > 1]
        tpot = np.array([(r.done - r.first) * 1e3 / (r.out_tokens - 1)
                         if r.out_tokens > 1 and math.isfinite(r.first) else math.nan for r in ok])
        point.ttft_ms = percentiles(ttft)
        point.itl_ms = percentiles(np.concatenate(itl) if itl else [])
        point.tpot_ms = percentiles(tpot)
        point.output_tokens_per_s = round(sum(r.out_tokens for r in done_in_window) / duration, 2)
        per = {"e2e": e2e, "ttft": ttft, "tpot": tpot,
               "itl": np.array([float(np.max(np.diff(r.chunk_times))) * 1e3
                                if r.chunk_times and len(r.chunk_times) > 1 else 0.0 for r in ok])}
    else:
        per = {"e2e": e2e}
    if bounds is not None:
        for metric, limit in bounds.items():
            if metric in per and len(ok):
                good &= np.nan_to_num(per[metric], nan=math.inf) <= limit
        point.goodput_rps = round(float(good.sum()) / duration, 3)
    _self_check(point, cfg, mode)
    if error_budget is not None:
        _error_check(point, error_budget, errs)
    if not ok:
        note = nothing_completed(recs, w0, warmup, duration, offered, n, by_kind)
        point.warning = f"{note}; {point.warning}" if point.warning else note
    if save_requests:
        point.requests = [{"sched_s": round(r.sched - bench_t0, 6), "lag_ms": round((r.sent - r.sched) * 1e3, 3),
                           "e2e_ms": round((r.done - r.sched) * 1e3, 3),
                           "ttft_ms": round((r.first - r.sched) * 1e3, 3) if math.isfinite(r.first) else None,
                           "error": r.error or None, "out_tokens": r.out_tokens, "in_tokens": r.in_tokens}
                          for r in meas]
    return point


def nothing_completed(recs: list[tuple], w0: float, warmup: float, duration: float, offered: Offered,
                      scheduled: int, by_kind: dict[str, int]) -> str:
    """Why a point has no latency or token figures (they are n/a): none of the requests scheduled in its
    measured window succeeded. In closed loop on a slow server, a window shorter than one request leaves
    every stream busy with a request sent during warm-up, so none is sent in the window at all."""
    window = f"the {duration:g} s measured window"
    na = "; its latency and token figures are n/a"
    if by_kind:
        kinds = ", ".join(f"{c} x {k}" for k, c in by_kind.items())
        return (f"no request scheduled in {window} succeeded: "
                f"{sum(by_kind.values())} of {scheduled} failed ({kinds}){na}")
    if scheduled:  # scheduled but never sent: the client fell behind (and the point is invalid)
        return f"no request scheduled in {window} was sent{na}"
    if offered.concurrency:
        streams = "the stream was" if offered.concurrency == 1 else f"all {offered.concurrency} streams were"
        why = f"no request was sent in {window}: {streams} busy with requests sent during warm-up"
        done = [r.done - r.sched for r in recs if r.sched < w0 and math.isfinite(r.done)]
        if done:
            why += f" (those took up to {max(done):.1f} s; warm-up + window = {warmup + duration:g} s)"
    else:
        why = f"no request was scheduled in {window}" + (f" at {offered.rate:g} req/s" if offered.rate else "")
    return f"{why}{na}. Make --duration several times the time of one request at this load"


def _error_check(point: Point, budget: float, errs: list[tuple]) -> None:
    """More than `budget` of the requests failed: the ok req/s and latencies describe the few that succeeded
    (an answer of 503 takes microseconds, so a loading server "serves" thousands of req/s of errors), not the
    server at this load. Such a point is marked and is not valid; nothing quotes it as throughput."""
    e = point.errors
    if e.rate <= budget:
        return
    kinds = ", ".join(f"{c:,} x {k}" for k, c in sorted(e.by_kind.items(), key=lambda kv: -kv[1]))
    why = f"{e.rate:.1%} of {point.n:,} requests failed ({kinds}; budget {budget:.0%})"
    why += (f": its ok req/s and latencies describe the {point.ok:,} that succeeded, not the server's "
            "throughput at this load" if point.ok else ": none succeeded")
    n503 = sum(1 for r in errs if str(r.detail).startswith("HTTP 503"))
    if n503:
        why += (f". {n503:,} answered HTTP 503: the server was not ready (still loading, restarting or "
                "overloaded); wait for it (--wait-ready) or lower the load")
    n4xx = e.by_kind.get("http_4xx", 0)
    if n4xx:  # refused by design (e.g. input over the model's limit): the workload does not fit the server
        why += (f". {n4xx:,} were refused with 4xx (the first message is with the errors): fit the workload "
                "to the server (an embeddings server may need --truncate) or allow them (--max-error-rate)")
    point.error_laden = True
    point.valid = False
    point.invalid_reason = why + (f"; also {point.invalid_reason}" if point.invalid_reason else "")


def _self_check(point: Point, cfg, mode: str) -> None:
    c = point.client
    reasons = []
    if mode == "rate" and c.lag_ms.p99 is not None and c.lag_ms.p99 > cfg.max_lag_ms:
        want = point.offered.rate or 0
        reasons.append(f"client fell behind its schedule: p99 send lag {c.lag_ms.p99:.1f} ms > {cfg.max_lag_ms:g} ms "
                       f"(sent {c.sent_rps:.0f} of {want:.0f} req/s requested)")
    if c.unsent:
        reasons.append(f"client never sent {c.unsent} of {c.scheduled} scheduled requests")
    if c.inflight_capped:
        reasons.append(f"hit the cap of {cfg.max_connections} requests in flight per worker (the server is far "
                       "past saturation at this rate, or raise max_connections)")
    if c.loop_lag_ms.p99 is not None and c.loop_lag_ms.p99 > cfg.max_lag_ms:
        # the OS or other work kept the client's loop from running: timestamps may be late by about this
        # much. In open loop this also shows up as schedule lag (invalid above); here it is a caveat.
        point.warning = (f"client event loop was delayed (p99 {c.loop_lag_ms.p99:.1f} ms, max "
                         f"{c.loop_lag_ms.max:.0f} ms; busy host?): timings finer than that are blurred")
    if c.cpu_util > cfg.max_client_cpu:
        reasons.append(f"client CPU-bound: {c.cpu_util:.0%} of one core in the busiest of {c.workers} worker(s)")
    if reasons:
        point.valid = False
        point.invalid_reason = "; ".join(reasons) + ". Latencies here measure the load generator, not the server."
