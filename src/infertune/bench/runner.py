"""`infertune.bench(BenchConfig) -> BenchResult`: probe the target, run the load profile point by point
in worker processes while telemetry is scraped, then write bench.json / bench.html / bench.csv."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infertune.bench import profiles
from infertune.bench.config import BenchConfig
from infertune.bench.engine import WorkerPool
from infertune.bench.results import BenchResult, Knee, Offered, Point
from infertune.bench.slo import SLO, confirm, parse_slo, search
from infertune.bench.stats import build_point
from infertune.bench.telemetry import Telemetry
from infertune.errors import InfertuneError
from infertune.workloads.bodies import Requests, build

Log = Callable[[str], None]


def preflight(cfg: BenchConfig, rec: tuple | None, log: Log) -> list[str]:
    """The probe request's answer (bench.ready waited for it): user mistakes (wrong API kind) stop here with
    a clear message; anything else is only a warning, and such failures are counted during the run."""
    if rec is None:
        return []
    kind, msg = rec.error, rec.detail
    if not kind:
        log(f"probe ok: {cfg.api} answered in {(rec.done - rec.sent) * 1e3:.0f} ms")
        return []
    where = f"POST {cfg.url}{cfg.endpoint}"
    if kind == "connect":
        raise InfertuneError(f"cannot connect to {where}: {msg}. Is the server running at {cfg.url}?")
    if kind == "http_4xx" and msg.startswith(("HTTP 404", "HTTP 405")):
        raise InfertuneError(f"{where} answered {msg.split(':')[0]}: this server does not serve --api {cfg.api} "
                             "there. Check --api (embeddings, completions, chat) and the URL.")
    from infertune.bench.client import HINTS

    w = f"probe request failed ({kind}): {msg}. {HINTS.get(kind, '')}. Such failures are counted in the results."
    log(f"warning: {w}")
    return [w]


def wait_for_server(cfg: BenchConfig, log: Log) -> tuple[str | None, Requests, dict, list[str]]:
    """Wait (bench.ready) until the server answers the first request with something other than a refused
    connection or a 503 -> (model, requests, what the wait saw, warnings). Refused for the whole patience:
    a user mistake (exit 2). Still 503: measured anyway, and the error-laden points say so."""
    from infertune.bench.ready import LOADING, REFUSED, Probe, patience, wait_until

    probe = Probe(cfg, lambda m: build(cfg.api, m, cfg.streaming, cfg.workload, cfg.synthetic, cfg.seed,
                                       cfg.inputs_per_request))
    loading_s, refused_s = patience(cfg.wait_ready)
    seen = wait_until(probe, loading_s=loading_s, refused_s=refused_s, log=log, what=cfg.url)
    if seen["state"] == REFUSED:
        raise InfertuneError(f"cannot reach {cfg.url}: {seen['last']} for {seen['waited_s']:g} s. Is the "
                             "server running there? (One started in the same command may need longer: "
                             "--wait-ready 2m)")
    req = probe.req if probe.req is not None else probe.build(probe.model)
    rec = seen.pop("record")
    warnings = [] if seen["state"] == LOADING else preflight(cfg, rec, log)
    if seen["state"] == LOADING:
        w = (f"the server still answered 503 (not ready) after {seen['waited_s']:g} s of waiting "
             f"(--wait-ready): measured anyway; points with more than {cfg.max_error_rate:.0%} failed "
             "requests are error-laden and not valid")
        log(f"warning: {w}")
        warnings.append(w)
    return probe.model, req, seen, warnings


class _Runner:
    def __init__(self, cfg: BenchConfig, req: Requests, pool: WorkerPool, bench_t0: float, slo: SLO | None, log: Log):
        self.cfg, self.req, self.pool, self.t0, self.slo, self.log = cfg, req, pool, bench_t0, slo, log
        self.points: list[Point] = []
        self.seq = 0

    def point(self, *, rate: float | None = None, concurrency: int | None = None, phase: str = "fixed",
              duration: float | None = None, warmup: float | None = None) -> Point:
        """One load point; `duration`/`warmup` override the config's (the confirm stage's long points)."""
        cfg = self.cfg
        duration = cfg.duration if duration is None else duration
        warmup = cfg.warmup if warmup is None else warmup
        self.seq += 1
        n_workers = min(len(self.pool), profiles.choose_workers(cfg.workers, rate, concurrency))
        t0 = time.monotonic() + 0.3
        base = {"url": cfg.url + cfg.endpoint, "api": cfg.api, "stream": cfg.streaming, "t0": t0,
                "warmup": warmup, "duration": duration, "timeout": cfg.timeout,
                "max_connections": cfg.max_connections, "http_client": cfg.http_client}
        specs = profiles.split_point(base, n_workers, rate, concurrency, cfg.arrivals, cfg.seed + self.seq,
                                     cfg.max_requests)
        specs += [None] * (len(self.pool) - len(specs))
        results = self.pool.run(specs, deadline_s=warmup + duration + cfg.timeout + 60)
        bad = [r["error"] for r in results if "error" in r]
        if bad:
            raise RuntimeError(f"load worker failed: {bad[0]}")
        offered = Offered(rate=rate, arrivals=cfg.arrivals) if rate is not None else Offered(concurrency=concurrency)
        p = build_point(results, offered=offered, t0=t0, warmup=warmup, duration=duration,
                        streaming=cfg.streaming, bench_t0=self.t0, cfg=cfg,
                        bounds=self.slo.bounds if self.slo else None,
                        mode="rate" if rate is not None else "concurrency",
                        save_requests=cfg.save_requests,
                        error_budget=self.slo.max_error_rate if self.slo else cfg.max_error_rate)
        p.phase = phase
        p.label = f"rate={rate:.4g}/s" if rate is not None else f"concurrency={concurrency}"
        if duration != cfg.duration:
            p.label += f" ({duration:g} s)"
        if self.slo and p.slo_pass is None:
            p.slo_pass, p.slo_detail = self.slo.check(p)
        self.points.append(p)
        self.log(_one_line(p))
        return p


def _one_line(p: Point) -> str:
    from infertune.bench.report import fmt

    lat = p.latency_ms
    s = f"{p.label}: {p.achieved_rps:.1f} req/s ok, n={p.n}, p50 {fmt(lat.p50)} ms, p99 {fmt(lat.p99)} ms"
    if p.ttft_ms is not None:
        s += f", TTFT p50 {fmt(p.ttft_ms.p50)} ms, ITL p50 {fmt(p.itl_ms and p.itl_ms.p50)} ms"
    if p.errors.total:
        s += f", errors {p.errors.total} {p.errors.by_kind}"
    if p.error_laden:
        s += f"  ERROR-LADEN (not valid): {p.invalid_reason}"
    elif not p.valid:
        s += f"  INVALID: {p.invalid_reason}"
    elif p.warning:
        s += f"  (caveat: {p.warning})"
    return s


def find_knee(points: list[Point], api: str) -> Knee | None:
    """The smallest load reaching 90% of the best throughput seen: beyond it, more load mostly adds queueing."""
    conc = [p for p in points if p.valid and p.offered.concurrency and p.ok]
    rate = [p for p in points if p.valid and p.offered.rate and p.ok]
    pts, over = (conc, "concurrency") if len(conc) >= 2 else (rate, "rate")
    if len(pts) < 2:
        return None
    tput = (lambda p: p.output_tokens_per_s or 0.0) if api != "embeddings" else (lambda p: p.achieved_rps)
    unit = "output tokens/s" if api != "embeddings" else "req/s"
    load = (lambda p: p.offered.concurrency) if over == "concurrency" else (lambda p: p.offered.rate)
    pts = sorted(pts, key=load)
    best = max(tput(p) for p in pts)
    knee = next(p for p in pts if tput(p) >= 0.9 * best)
    k = Knee(over=over, load=float(load(knee)), throughput=round(tput(knee), 2),
             rule=f"smallest {over} reaching 90% of the best {unit} measured ({best:.1f})")
    if api != "embeddings":
        if over == "concurrency":
            k.recommended_max_num_seqs = int(load(knee))
            k.derivation = (f"throughput reaches {tput(knee):.1f} of {best:.1f} {unit} at concurrency {load(knee)}; "
                            "more sequences in flight add latency but little throughput")
        elif knee.mean_inflight:
            k.recommended_max_num_seqs = max(1, math.ceil(knee.mean_inflight))
            k.derivation = (f"Little's law at the knee rate {load(knee):.3g}/s: in flight = rate x mean latency = "
                            f"{knee.achieved_rps:.2f}/s x {knee.latency_ms.mean:.0f} ms = {knee.mean_inflight:.2f}")
    return k


def _confirm(cfg: BenchConfig, run: _Runner, slo: SLO, result: BenchResult, log: Log) -> None:
    """--slo-confirm: re-measure the search's answer with long points (the queue settles; a 5 s point ends
    before it has) and back off until one meets the SLO (slo.confirm)."""
    assert result.slo is not None and result.slo.max_load is not None
    rate = cfg.slo_over == "rate"
    start = result.slo.max_load * cfg.slo_confirm_fraction
    # a longer warm-up too: the window should see the queue the load settles into, not the start of it
    warm = max(cfg.warmup, cfg.slo_confirm / 6)
    log(f"confirm: {cfg.slo_over} {start:.4g} with {cfg.slo_confirm:g} s points (+{warm:g} s warm-up), "
        f"backing off {1 - cfg.slo_confirm_backoff:.0%} a step until one meets {slo.text}")

    def long_point(x: float) -> Point:
        load = {"rate": x} if rate else {"concurrency": int(x)}
        return run.point(**load, phase="confirm", duration=cfg.slo_confirm, warmup=warm)

    c = confirm(long_point, slo, start=start, duration=cfg.slo_confirm, over=cfg.slo_over,
                backoff=cfg.slo_confirm_backoff, log=log)
    result.slo.confirm, result.slo.sustainable_load = c, c.load
    if not c.met:
        result.warnings.append(f"SLO confirm: no {cfg.slo_over} from {start:.4g} down to "
                               f"{c.steps[-1].load:.4g} met {slo.text} over {cfg.slo_confirm:g} s; the short "
                               f"points' answer {result.slo.max_load:.4g} does not hold")


def bench(cfg: BenchConfig, log: Log | None = None) -> BenchResult:
    log = log or (lambda s: None)
    started = dt.datetime.now().isoformat(timespec="seconds")
    wall0 = time.monotonic()
    slo = parse_slo(cfg.slo, cfg.max_error_rate, cfg.streaming, cfg.slo_keepup) if cfg.slo else None
    if cfg.ceiling:
        read_ceiling(cfg.ceiling)  # a bad --ceiling fails before any load is sent
    model, req, ready, warnings = wait_for_server(cfg, log)
    from infertune.hardware.fingerprint import fingerprint

    env = fingerprint()
    loads = [("rate", r) for r in cfg.rates] + [("concurrency", c) for c in cfg.concurrency]
    top = max([profiles.choose_workers(cfg.workers, x if k == "rate" else None, int(x) if k != "rate" else None)
               for k, x in loads] or [profiles.choose_workers(cfg.workers, None, None)])
    metrics_url = cfg.url + "/metrics" if cfg.metrics_url is None else (cfg.metrics_url or None)
    bench_t0 = time.monotonic()
    result = BenchResult(config=cfg.model_dump(mode="json"), environment=env, started=started, warnings=warnings,
                         target={"url": cfg.url, "api": cfg.api, "endpoint": cfg.endpoint, "model": model,
                                 "streaming": cfg.streaming, "workload": req.summary(), "ready": ready})
    with WorkerPool(top, req.bodies, req.input_tokens) as pool:
        result.notes.append(f"{len(pool)} worker process(es), event loop {pool.loop}")
        tel = Telemetry(metrics_url, cfg.scrape_interval, bench_t0).start()
        run = _Runner(cfg, req, pool, bench_t0, slo, log)
        try:
            if cfg.slo:
                assert slo is not None
                if cfg.slo_start is not None:  # the caller knows where to start: no one-at-a-time point
                    start = cfg.slo_start
                else:
                    p1 = run.point(concurrency=1, phase="search")  # one at a time: where the search starts
                    start = max(1.0, p1.achieved_rps) if cfg.slo_over == "rate" else 1
                result.slo = search(lambda x: run.point(**{("rate" if cfg.slo_over == "rate" else "concurrency"):
                                                           (x if cfg.slo_over == "rate" else int(x))}, phase="search"),
                                    slo, over=cfg.slo_over, start=start, tolerance=cfg.slo_tolerance,
                                    repeats=cfg.slo_repeats, recheck=cfg.slo_recheck, step=cfg.slo_step, log=log)
                if result.slo.noise_note:
                    result.warnings.append(f"SLO search: {result.slo.noise_note}")
                if cfg.slo_confirm and result.slo.met:
                    _confirm(cfg, run, slo, result, log)
            elif cfg.sweep:
                p1 = run.point(concurrency=1, phase="sweep")
                pmax = run.point(concurrency=cfg.sweep_max_concurrency, phase="sweep")
                for r in profiles.sweep_rates(max(p1.achieved_rps, 0.1), max(pmax.achieved_rps, 0.1), cfg.sweep_points):
                    p = run.point(rate=r, phase="sweep")
                    if p.errors.rate > 0.5 or (not p.valid and not p.error_laden):
                        why = "errors > 50%" if p.errors.rate > 0.5 else "client saturated"
                        log(f"sweep stopped at rate {r:.3g}/s: {why}")
                        break
            else:
                for kind, x in loads or [("concurrency", 1)]:
                    run.point(**{kind: x})
        finally:
            result.telemetry = tel.stop()
            result.points = run.points
    result.knee = find_knee(result.points, cfg.api)
    if cfg.ceiling:
        result.ceiling = hold_to_ceiling(result.points, cfg.ceiling, cfg.inputs_per_request)
    for p in result.points:
        if not p.valid:
            what = "ERROR-LADEN" if p.error_laden else "INVALID"
            result.warnings.append(f"{p.label}: {what} - {p.invalid_reason}")
        elif p.ok == 0:  # its figures are n/a; the caveat says why (stats.nothing_completed)
            result.warnings.append(f"{p.label}: {p.warning}")
    result.wall_s = round(time.monotonic() - wall0, 2)
    if cfg.out is not None:
        from infertune.bench.report import write_outputs

        result.out_dir = str(cfg.out)
        write_outputs(result, Path(cfg.out))
    return result


def read_ceiling(spec: str) -> dict[str, Any]:
    """--ceiling: items/s given as a number, or the `serve --ceiling --json` file that measured it."""
    import json

    from infertune.errors import InfertuneError

    try:
        return {"items_per_s": float(spec), "source": "given"}
    except ValueError:
        pass
    p = Path(spec)
    try:
        got = json.loads(p.read_text())
        return {"items_per_s": float(got["items_per_s"]), "source": str(p), "n": got.get("n"),
                "min": got.get("min"), "max": got.get("max")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InfertuneError(f"--ceiling {spec}: not items/s nor a `serve --ceiling --json` file ({e})") from None


def hold_to_ceiling(points: list, spec: str, per_request: int) -> dict[str, Any]:
    """Each point's served items/s as a fraction of the forward-only ceiling (what HTTP, tokenization and batching
    leave of what the device can do); returns the ceiling record."""
    ceiling = read_ceiling(spec)
    if ceiling["items_per_s"] > 0:
        for p in points:
            p.of_ceiling = p.achieved_rps * per_request / ceiling["items_per_s"]
    return ceiling
