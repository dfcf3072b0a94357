"""The soak drill: hold a fraction of the peak rate for the whole duration while RSS and the server's own
metrics are sampled; judge errors, P99 drift over time and the memory slope."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from infertune.validate.analysis import leak_verdict, p99_drift, rss_slope, slo_terms_verdict
from infertune.validate.config import Drill, ValidateConfig
from infertune.validate.load import Stream, point, run_streams
from infertune.validate.target import Target, scrape
from infertune.workloads.bodies import Requests

WATCH = ("infertune_queue_depth", "infertune_worker_restarts_total", "infertune_batch_failures_total",
         "process_resident_memory_bytes", "infertune_worker_resident_memory_bytes")


class Sampler:
    """Every `interval` s: the target's RSS (MB) and a few of its metrics, on the load's clock."""

    def __init__(self, target: Target, interval: float, progress: Callable[[float], None] | None = None,
                 every_s: float = 60.0):
        self.target, self.interval = target, interval
        self.progress, self.every_s = progress, every_s  # progress(seconds since start), every every_s
        self.t0 = time.monotonic()
        self.t: list[float] = []
        self.rss: list[float | None] = []
        self.metrics: dict[str, list[float | None]] = {k: [] for k in WATCH}
        self.gpu_mb: list[float | None] = []  # device memory used on all local GPUs (NVML), when there are any
        # cores other processes on this host used (validate.host); only when validate owns the server, since
        # a server at a URL may run here, and its CPU would count as a neighbour's
        self.others_cpu: list[float | None] = []
        self._host = None
        if getattr(target, "owned", False):
            from infertune.validate.host import OtherCPU

            self._host = OtherCPU()
        self._nvml: list = []
        try:
            import pynvml  # type: ignore

            pynvml.nvmlInit()
            self._nv = pynvml
            self._nvml = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # noqa: BLE001 - no NVIDIA driver or no pynvml: RSS only
            self._nvml = []
        self._next_progress = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="validate-sampler", daemon=True)

    def start(self, t0: float) -> Sampler:
        self.t0 = t0
        self._thread.start()
        return self

    def _loop(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            t = time.monotonic()
            rss = self.target.rss_mb()
            m = scrape(self.target.url, timeout=max(1.0, self.interval))
            self.t.append(round(t - self.t0, 3))
            self.rss.append(round(rss, 2) if rss is not None else None)
            for k in WATCH:
                self.metrics[k].append(m.get(k))
            self.others_cpu.append(self._host.sample() if self._host is not None else None)
            if self._nvml:
                try:
                    self.gpu_mb.append(sum(self._nv.nvmlDeviceGetMemoryInfo(h).used for h in self._nvml) / 2**20)
                except Exception:  # noqa: BLE001
                    self.gpu_mb.append(None)
            if self.progress is not None and t - self.t0 >= self._next_progress:
                self._next_progress += self.every_s
                try:
                    self.progress(t - self.t0)
                except Exception:  # noqa: BLE001 - a progress line must never stop the sampling
                    pass
            nxt += self.interval
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval * 3 + 10)

    def delta(self, name: str) -> float | None:
        v = [x for x in self.metrics[name] if x is not None]
        return v[-1] - v[0] if len(v) >= 2 else None


def progress_every(total_s: float) -> float:
    """Seconds between soak progress lines: at most a minute, about six lines for a short soak."""
    return max(10.0, min(60.0, total_s / 6))


def _clock(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _run_sampled(target: Target, api: str, req: Requests, rate: float, warmup: float, duration: float,
                 cfg: ValidateConfig, log: Callable[[str], None]) -> tuple[Any, Sampler]:
    """Send `rate` req/s for warmup + duration while sampling memory and /metrics, logging progress now and then;
    returns (the run's records, the sampler)."""
    total = warmup + duration

    def progress(elapsed: float) -> None:
        rss = next((x for x in reversed(sampler.rss) if x is not None), None)
        q = next((x for x in reversed(sampler.metrics["infertune_queue_depth"]) if x is not None), None)
        log(f"soak: {_clock(elapsed)} of {_clock(total)}" + (f", server RSS {rss:.0f} MB" if rss is not None else "")
            + (f", queue depth {q:.0f}" if q is not None else "") + " (the verdict comes at the end)")

    sampler = Sampler(target, cfg.sample_interval_s, progress, every_s=progress_every(total))
    try:
        run = run_streams(target.url, api, [Stream("soak", req.bodies, req.input_tokens, rate)], warmup, duration,
                          cfg.timeout_s, cfg.seed, on_start=sampler.start)
    finally:
        sampler.stop()
    return run, sampler


def _failures(whole: Any, cfg: ValidateConfig, leak: str | None, gpu_leak: str | None, drift: dict[str, Any],
              restarts: float) -> list[str]:
    """Why the soak fails apart from its SLO: no answers, errors, memory growth (`leak`, `gpu_leak`: the
    verdicts, None when none), P99 drift, worker restarts."""
    fails = []
    if whole.n == 0 or whole.ok == 0:
        fails.append("no successful requests")
    if whole.errors.rate > cfg.max_error_rate:
        fails.append(f"error rate {whole.errors.rate:.3%} > {cfg.max_error_rate:.3%} ({whole.errors.by_kind})")
    if leak:
        fails.append(leak)
    if gpu_leak:
        fails.append(gpu_leak)
    if drift["ratio"] is not None and drift["ratio"] > cfg.max_p99_drift:
        fails.append(f"P99 drifted {drift['ratio']:.2f}x (first third {drift['first_third_p99_ms']} ms -> last "
                     f"third {drift['last_third_p99_ms']} ms) > {cfg.max_p99_drift:g}x")
    if restarts:
        fails.append(f"the model worker restarted {restarts:.0f} time(s) during the soak")
    return fails


def _series(sampler: Sampler, pts: list[Any], window_t: list[float]) -> dict[str, list]:
    """What the report plots: each window's latency, errors and rate, and the sampled memory, queue and host CPU."""
    return {"window_t_s": [round(t, 2) for t in window_t],
            "window_p50_ms": [p.latency_ms.p50 for p in pts], "window_p99_ms": [p.latency_ms.p99 for p in pts],
            "window_errors": [p.errors.total for p in pts], "window_rps": [p.achieved_rps for p in pts],
            "t_s": sampler.t, "rss_mb": sampler.rss, "gpu_mb": sampler.gpu_mb,
            "queue_depth": sampler.metrics["infertune_queue_depth"], "others_cpu_cores": sampler.others_cpu,
            "server_rss_mb": [round(x / 2**20, 1) if x is not None else None
                              for x in sampler.metrics["process_resident_memory_bytes"]],
            "worker_rss_mb": [round(x / 2**20, 1) if x is not None else None
                              for x in sampler.metrics["infertune_worker_resident_memory_bytes"]]}


def _token_figures(whole: Any) -> dict[str, Any]:
    """A streamed soak's time to first token and per output token (ms, with n): what an LLM SLO is judged on."""
    if whole.ttft_ms is None:
        return {}
    t, o = whole.ttft_ms, whole.tpot_ms
    return {"ttft_ms": {"p50": t.p50, "p95": t.p95, "p99": t.p99, "max": t.max, "n": t.n},
            "tpot_ms": {"p50": o.p50, "p95": o.p95, "p99": o.p99, "max": o.max, "n": o.n} if o else None,
            "output_tokens_per_s": whole.output_tokens_per_s}


def _degradation(confirmed: dict[str, Any] | None, pts: list[Any], window_t: list[float], sampler: Sampler,
                 keep: list[int], slo: dict[str, Any], drifted: bool, soak_p99: float | None, others: Any,
                 spell: Any, seed: int, min_growth_mb: float) -> dict[str, Any] | None:
    """trend.degradation on the soak's series (window P99, and the queue depth and memory sampled after the
    warm-up) against the confirm point's spreads."""
    from infertune.validate.trend import degradation, trends

    if confirmed is None:
        return None
    t = [sampler.t[i] for i in keep]
    series = {"p99_ms": (window_t, [p.latency_ms.p99 for p in pts]),
              "queue_depth": (t, [sampler.metrics["infertune_queue_depth"][i] for i in keep]),
              "rss_mb": (t, [sampler.rss[i] for i in keep])}
    tested = trends(series, confirmed.get("spread") or {}, seed=seed, floors={"rss_mb": min_growth_mb})
    return degradation(confirmed, [p.latency_ms.p99 for p in pts], slo, drifted, soak_p99, others, spell, tested)


def soak(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig,
         log: Callable[[str], None], rate: float | None = None,
         confirmed: dict[str, Any] | None = None) -> Drill:
    """`rate`: the rate its confirm point met the SLO at (validate.confirm; default soak_fraction x peak);
    `confirmed`: that point's figures, set beside the soak's when the soak does not hold them."""
    rate = cfg.soak_fraction * peak if rate is None else rate
    duration = cfg.soak_s
    warmup = min(10.0, max(1.0, 0.05 * duration))
    why = (f"the rate a {confirmed['duration_s']:g} s point held, {rate / peak:.0%} of peak {peak:.3g}"
           if confirmed else f"{cfg.soak_fraction:.0%} of peak {peak:.3g}")
    log(f"soak: {rate:.3g} req/s ({why}) for {duration:g} s "
        f"(+{warmup:g} s warm-up), sampling RSS and /metrics every {cfg.sample_interval_s:g} s")
    t_wall = time.monotonic()
    run, sampler = _run_sampled(target, api, req, rate, warmup, duration, cfg, log)
    n_win = max(3, min(cfg.windows, int(duration // 1)))
    win = duration / n_win
    pts = [point(run, target.url, api, cfg.timeout_s, start=warmup + i * win, length=win, rate=rate)
           for i in range(n_win)]
    whole = point(run, target.url, api, cfg.timeout_s, rate=rate)
    drift = p99_drift([p.latency_ms.p99 for p in pts])
    keep = [i for i, t in enumerate(sampler.t) if t >= warmup]  # judge memory over the measured window only
    fit = rss_slope([sampler.t[i] for i in keep], [sampler.rss[i] for i in keep])
    leak, leak_why = leak_verdict(fit, cfg.max_rss_slope_mb_h, cfg.min_rss_growth_mb)
    gpu_fit, gpu_leak, gpu_why = None, False, ""
    if any(x is not None for x in sampler.gpu_mb):  # device memory of the whole GPU(s): other tenants count too
        gpu_fit = rss_slope([sampler.t[i] for i in keep], [sampler.gpu_mb[i] for i in keep])
        gpu_leak, gpu_why = leak_verdict(gpu_fit, cfg.max_rss_slope_mb_h, cfg.min_rss_growth_mb)
    err_rate = whole.errors.rate
    restarts = sampler.delta("infertune_worker_restarts_total")
    fails = _failures(whole, cfg, leak_why if leak else None, f"GPU {gpu_why}" if gpu_leak else None, drift, restarts)
    slo = slo_terms_verdict(cfg.slo, whole)  # the promise the peak was searched for, held for the whole soak
    slo_only = bool(not slo["met"] and not fails)
    if not slo["met"]:
        fails.append(f"SLO not met: {'; '.join(slo['missed'])} (SLO {cfg.slo})")
    drifted = drift["ratio"] is not None and drift["ratio"] > cfg.max_p99_drift
    from infertune.validate.host import busy_spell, by_third

    sampled = any(x is not None for x in sampler.others_cpu)
    others = by_third(sampler.t, sampler.others_cpu, warmup, warmup + duration) if sampled else None
    bound = next((t["limit"] for t in slo.get("terms", []) if t.get("term") == "p99_e2e_ms"), None)
    window_t = [warmup + (i + 0.5) * win for i in range(n_win)]
    spell = (busy_spell(sampler.t, sampler.others_cpu, window_t, [p.latency_ms.p99 for p in pts], win, bound)
             if sampled else None)
    deg = _degradation(confirmed, pts, window_t, sampler, keep, slo, drifted, whole.latency_ms.p99, others, spell,
                       cfg.seed, cfg.min_rss_growth_mb)
    lat = whole.latency_ms
    evidence: dict[str, Any] = {
        "rate_rps": round(rate, 3), "peak_rps": round(peak, 3), "fraction": round(rate / peak, 3),
        "confirm": confirmed, "degradation": deg, "host_other_cpu_cores_by_third": others,
        "host_busy_spell": spell,
        "duration_s": duration, "warmup_s": warmup, "requests": whole.n, "ok": whole.ok,
        "achieved_rps": whole.achieved_rps, "errors": whole.errors.total, "error_rate": err_rate,
        "errors_by_kind": whole.errors.by_kind, "max_error_rate": cfg.max_error_rate,
        "latency_ms": {"p50": lat.p50, "p95": lat.p95, "p99": lat.p99, "max": lat.max, "n": lat.n},
        **_token_figures(whole),
        "p99_drift": drift, "max_p99_drift": cfg.max_p99_drift, "window_s": round(win, 2),
        "rss": fit, "rss_leak": leak, "rss_verdict": leak_why, "max_rss_slope_mb_per_h": cfg.max_rss_slope_mb_h,
        "min_rss_growth_mb": cfg.min_rss_growth_mb,
        "rss_samples": len([x for x in sampler.rss if x is not None]),
        "rss_source": "psutil (server + children)" if target.owned else "/metrics process_resident_memory_bytes",
        "gpu_memory": gpu_fit, "gpu_verdict": gpu_why or None,
        "worker_restarts": restarts, "client_valid": whole.valid, "client_note": whole.invalid_reason or whole.warning,
        "client_lag_p99_ms": whole.client.lag_ms.p99,
        "slo": slo, "slo_only_failure": slo_only,
    }
    series = _series(sampler, pts, window_t)
    for who in ("server", "worker"):  # which process grew
        v = [x for x, t in zip(series[f"{who}_rss_mb"], sampler.t, strict=True) if x is not None and t >= warmup]
        evidence[f"{who}_rss_mb_start_end"] = [v[0], v[-1]] if v else None
    if whole.ttft_ms is not None:
        series["window_p99_ttft_ms"] = [p.ttft_ms.p99 if p.ttft_ms else None for p in pts]
    if fails and deg and deg.get("verdict"):  # a trend beyond the confirm point's spread, or the measured cause
        fails.append(deg["verdict"])
    reason = "; ".join(fails) if fails else (
        f"{whole.n} requests at {rate:.3g} req/s for {duration:g} s, {whole.errors.total} errors, P99 {lat.p99} ms"
        + (f" (TTFT P99 {whole.ttft_ms.p99} ms, TPOT P99 {whole.tpot_ms.p99} ms)" if whole.ttft_ms else "")
        + f", P99 drift {drift['ratio']}x, {leak_why}")
    return Drill(name="soak", passed=not fails, reason=reason, evidence=evidence, series=series,
                 wall_s=round(time.monotonic() - t_wall, 1))
