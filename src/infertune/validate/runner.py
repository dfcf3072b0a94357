"""`infertune.validate(ValidateConfig) -> ValidateResult`: start (or reach) the server, find the peak with
bench's SLO search unless given, run the drills (soak, long tail, then the faults: oversized requests,
burst, stall, and the worker kill last), write validate.json / validate.html, stop what was started."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.validate.config import Drill, ValidateConfig, ValidateResult
from infertune.validate.target import Target

Log = Callable[[str], None]


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def find_peak(target: Target, api: str, model: str | None, req, cfg: ValidateConfig, out: Path | None, log: Log
              ) -> dict[str, Any]:
    """The highest rate meeting the SLO, by bench's search (the same as `infertune bench --slo`), on the
    same requests the drills send."""
    from infertune.bench.config import BenchConfig
    from infertune.bench.runner import bench
    from infertune.validate.config import point_s
    from infertune.workloads.bodies import to_file

    secs = point_s(cfg, "search_duration_s", api)
    work = to_file(req, (out or Path(".infertune-validate")) / "workload-screened.jsonl")
    bcfg = BenchConfig(url=target.url, api=api, model=model, workload=work, slo=cfg.slo,
                       duration=secs, warmup=min(2.0, secs / 2), slo_repeats=2,
                       timeout=cfg.timeout_s, seed=cfg.seed, out=out / "peak" if out else None, metrics_url="",
                       stream=api == "completions")
    log(f"peak: searching the highest rate meeting {cfg.slo} ({secs:g} s per point)")
    res = bench(bcfg, log=lambda s: log(f"  {s}"))
    from infertune.validate.analysis import confirmed_rates

    steps = res.slo.steps if res.slo else []
    runs = confirmed_rates(res.points)
    info = {"source": "slo-search", "slo": cfg.slo, "steps": steps, "confirmed": bool(res.slo and res.slo.met),
            "bracket": res.slo.bracket if res.slo else None, "runs_by_rate": runs["runs"],
            "bench_json": str(out / "peak" / "bench.json") if out else None}
    if res.slo and res.slo.met and res.slo.max_load:
        return {"rps": res.slo.max_load, **info, "basis": "confirmed: the search's answer passed every repeat"}
    # the search's answer did not repeat (a noisy, shared box): a peak that passed once is not soaked as such. The
    # highest rate that passed every time it ran (at least twice) is, and validate says so. With none, the confirm
    # step's long points decide from the rate that passed once: a short point's P99 is nearly its slowest request
    # (150 requests at 30 req/s for 5 s), a 30 s point's is not, and the soak runs only at a rate a long point held
    # with margin. Without that step (--soak-confirm 0): refused.
    once = runs["passed_once"]
    if runs["confirmed"] is None and once and cfg.soak_s > 0 and cfg.confirm_s > 0:
        note = (f"{once:.4g} req/s passed once but not its repeat in the short points; the confirm step's "
                f"{cfg.confirm_s:g} s points decide the soak's rate from it")
        log(f"peak: {note}")
        return {"rps": once, **info, "confirmed": False, "basis": "passed once; confirmed by the long points",
                "unconfirmed_rps": once, "note": note}
    if runs["confirmed"] is None:
        what = (f"{once:.4g} req/s passed once but not its repeat" if once else "no rate passed")
        raise InfertuneError(f"the SLO search confirmed no peak for {cfg.slo} ({what}); a peak that passed once is "
                             "not soaked. Pass --peak REQ_PER_S to soak at a rate you choose, lengthen "
                             "--search-duration, or relax --slo")
    rps = runs["confirmed"]
    note = (f"the search's answer did not pass its repeats; soaking at the highest confirmed rate {rps:.4g} req/s "
            f"(passed every run, at least 2)" + (f", not {once:.4g} req/s, which passed only once" if once != rps
                                                 else ""))
    log(f"peak: {note}")
    return {"rps": rps, **info, "confirmed": True, "basis": "highest confirmed rate (search answer not repeated)",
            "unconfirmed_rps": once if once != rps else None, "note": note}


def confirm_soak(target: Target, api: str, req, peak: float, cfg: ValidateConfig, result: ValidateResult,
                 log: Log) -> tuple[float | None, dict[str, Any] | None]:
    """The soak's rate confirmed by a long point (validate.confirm) -> (rate, its figures); (None, None)
    when off (--soak-confirm 0, or --peak without --soak-confirm). Recorded in result.peak beside the
    short-point peak: `sustainable_rps` and `confirm`."""
    if cfg.soak_s <= 0 or cfg.confirm_s <= 0:
        return None, None
    from infertune.validate.confirm import confirm_evidence, confirm_soak_rate, with_margin

    c, spreads = confirm_soak_rate(target, api, req, cfg.soak_fraction * peak, cfg, log)
    slo = with_margin(cfg.slo, cfg.soak_margin, streaming=api == "completions")
    ev = confirm_evidence(c, spreads, {"margin": cfg.soak_margin, "slo_with_margin": slo.text})
    assert c.load is not None and ev is not None
    result.peak["sustainable_rps"] = round(c.load, 3)
    result.peak["soak_margin"], result.peak["slo_with_margin"] = cfg.soak_margin, ev["slo_with_margin"]
    result.peak["confirm"] = c.model_dump(mode="json")
    short = f"{cfg.search_duration_s:g} s points" if result.peak.get("source") == "slo-search" else "--peak"
    log(f"peak: {peak:.4g} req/s ({short}); sustainable {c.load:.4g} req/s: a {c.duration_s:g} s point met "
        f"{ev['slo_with_margin']} there ({cfg.slo} with margin {cfg.soak_margin:g}; P50 {ev['p50_ms']:.1f} ms, P99 "
        f"{ev['p99_ms']:.1f} ms); the soak runs at it")
    return c.load, ev


def _requests(cfg: ValidateConfig, api: str, model: str | None, default: Path | None = None):
    """The drills' requests: --workload, else the target's own (an LLM artifact's load.jsonl, the prompts tune
    measured), else bench's default; completions are streamed (TTFT and TPOT per request)."""
    from infertune.workloads.bodies import build

    return build(api, model, api == "completions", cfg.workload or default, None, cfg.seed)


def screen(target: Target, api: str, req, log: Log):
    """Drop the workload's requests the server refuses by design (input over its limit: 4xx), so the drills
    judge the server on traffic it accepts; the long-tail drill sends over-limit input on purpose. Only the
    requests longer than the limit in bytes are asked, once each."""
    import httpx

    from infertune.workloads.bodies import Requests

    max_tok = target.limits.get("max_input_tokens")
    if api != "embeddings" or not max_tok or target.limits.get("truncate"):
        return req, {"screened": 0, "dropped": 0}
    # every token but the special ones covers at least one character: a body no longer than the limit in
    # bytes cannot be over it in tokens; only the others are asked
    ask = [i for i, b in enumerate(req.bodies) if len(b) > max_tok - 2]
    from concurrent.futures import ThreadPoolExecutor

    # one client for all of them: httpx.post builds a client (and its TLS context) per call, which cost more
    # CPU than the server's answers
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=4)) as client:
        def status(i: int) -> int:
            r = client.post(target.url + "/v1/embeddings", content=req.bodies[i],
                            headers={"Content-Type": "application/json"})
            return r.status_code

        with ThreadPoolExecutor(4) as pool:
            codes = dict(zip(ask, pool.map(status, ask), strict=True))
    drop = {i for i, c in codes.items() if 400 <= c < 500 and c != 429}
    keep = [i for i in range(len(req.bodies)) if i not in drop]
    if not keep:
        raise InfertuneError(f"the server refused every request of the workload with 4xx (limit {max_tok} tokens)")
    if drop:
        log(f"workload: {len(drop)} of {len(req.bodies)} requests are over the server's {max_tok}-token limit "
            "(answered 4xx); the drills send the other ones (the long-tail drill tests over-limit input)")
    out = Requests([req.bodies[i] for i in keep], [req.input_tokens[i] for i in keep],
                   [req.max_tokens[i] for i in keep], req.source)
    return out, {"screened": len(ask), "dropped": len(drop), "kept": len(keep),
                 "rule": f"requests over {max_tok - 2} bytes were sent once; those answered 4xx dropped"}


def final_verdict(result: ValidateResult) -> tuple[int, str]:
    """The exit code and its one line. 0: every drill that ran passed. 4: the server held up (no errors,
    leaks, hangs or crashes) but the soak's latency broke the SLO. 1: a drill failed for any other
    reason. (2 stays "bad input"; 3 is tune's "no winner".)"""
    ran = [d for d in result.drills if d.passed is not None]
    if not ran:
        return 1, "FAILED: no drill ran"
    failed = [d for d in ran if not d.passed]
    if not failed:
        return 0, f"PASSED: {len(ran)} drill(s) passed" + (f", {len(result.drills) - len(ran)} skipped"
                                                         if len(ran) < len(result.drills) else "")
    only_slo = all(d.name == "soak" and d.evidence.get("slo_only_failure") for d in failed)
    soak_d = next((d for d in failed if d.name == "soak"), None)
    deg = (soak_d.evidence.get("degradation") or {}) if soak_d else {}
    # the soak missed what its confirm point met at the same rate: a trend beyond the confirm point's spread says it
    # degrades; without one, the measured cause (trend.degradation), with both sets of figures
    also = f"; {deg['verdict']}" if deg.get("verdict") else ""
    if only_slo:
        d = failed[0]
        slo = d.evidence["slo"]
        return SLO_MISSED_EXIT, (f"SLO NOT MET: the soak held up but {'; '.join(slo['missed'])} "
                                 f"(SLO {slo['slo']}) at {d.evidence.get('rate_rps')} req/s{also}")
    return 1, "FAILED: " + ", ".join(d.name for d in failed) + also


SLO_MISSED_EXIT = 4


def _plan(target: Target, api: str, req, peak: float, cfg: ValidateConfig, log: Log, soak_rate: float | None,
          confirmed: dict[str, Any] | None) -> list[tuple[str, Callable[[], Drill]]]:
    """The drills to run, in order: soak, long tail, then the faults, the kill last (it replaces the worker)."""
    from infertune.validate.faults import burst, kill_worker, oom_guard
    from infertune.validate.health import finite_output
    from infertune.validate.longtail import long_tail
    from infertune.validate.soak import soak
    from infertune.validate.stall import stall

    plan: list[tuple[str, Callable[[], Drill]]] = []
    if cfg.soak_s > 0:
        plan.append(("soak", lambda: soak(target, api, req, peak, cfg, log, rate=soak_rate, confirmed=confirmed)))
    if cfg.long_tail:
        plan.append(("long-tail", lambda: long_tail(target, api, req, peak, cfg, log)))
    fns = {"finite-output": finite_output, "oom-guard": oom_guard, "burst": burst, "stall": stall,
           "kill-worker": kill_worker}
    for name in ("finite-output", "oom-guard", "burst", "stall", "kill-worker"):
        if name in cfg.faults:
            plan.append((name, lambda f=fns[name]: f(target, api, req, peak, cfg, log)))
    return plan


def validate(cfg: ValidateConfig, log: Log | None = None) -> ValidateResult:
    from infertune.hardware.fingerprint import fingerprint

    log = log or (lambda s: None)
    wall0 = time.monotonic()
    out = Path(cfg.out) if cfg.out else None
    result = ValidateResult(config=cfg.model_dump(mode="json"), environment=fingerprint(),
                            started=dt.datetime.now().isoformat(timespec="seconds"),
                            load_average={"start": _loadavg()})
    if cfg.is_url:
        target = Target(cfg.target)
        log(f"target: {cfg.target} (a running server: drills that need its processes are skipped)")
    else:
        flags = list(cfg.serve_args) + (["--max-queue", str(cfg.max_queue)] if cfg.max_queue else [])
        target = Target.start(cfg.target, flags, out or Path(".infertune-validate"))
        log(f"target: infertune serve {cfg.target} {' '.join(flags)} at {target.url} (log {target.log_path})")
    try:
        target.wait_ready(cfg.ready_timeout_s)
        api = cfg.api or target.api
        model = cfg.model or target.default_model()
        result.target = {"url": target.url, "started_by_validate": target.owned, "api": api, "model": model,
                         "limits": target.limits, "worker": target.info.get("worker"),
                         "settings": target.info.get("settings"), "server_log": str(target.log_path or "")}
        if target.info.get("greedy_check"):  # serve's check of tune's recorded continuations, before any load
            result.target["greedy_check"] = target.info["greedy_check"]
            log(f"serve: {target.info['greedy_check']}")
        req, screened = screen(target, api, _requests(cfg, api, model, target.workload), log)
        result.target["workload"] = {**req.summary(), "screening": screened}
        if cfg.peak:
            result.peak = {"rps": cfg.peak, "source": "flag", "slo": cfg.slo, "confirmed": None,
                           "basis": "given with --peak (not searched)"}
        else:
            result.peak = find_peak(target, api, model, req, cfg, out, log)
        peak = float(result.peak["rps"])
        log(f"peak: {peak:.4g} req/s ({result.peak['source']})")
        soak_rate, confirmed = confirm_soak(target, api, req, peak, cfg, result, log)
        for name, run in _plan(target, api, req, peak, cfg, log, soak_rate, confirmed):
            if not target.alive():
                result.drills.append(Drill(name=name, passed=False, reason="the server is no longer running "
                                           f"(exit code {target.proc.returncode}); see {target.log_path}"))
                continue
            try:
                d = run()
            except InfertuneError:
                raise
            except Exception as e:  # noqa: BLE001 - a drill that crashes fails, the others still run
                d = Drill(name=name, passed=False, reason=f"the drill itself failed: {type(e).__name__}: {e}")
            verdict = "skipped" if d.passed is None else "PASS" if d.passed else "FAIL"
            log(f"{name}: {verdict} - {d.reason}")
            result.drills.append(d)
    finally:
        code = target.stop()
        if target.owned:
            result.notes.append(f"server stopped (exit code {code}); its log: {target.log_path}")
    ran = [d for d in result.drills if d.passed is not None]
    result.passed = bool(ran) and all(d.passed for d in ran)
    soak_d = next((d for d in result.drills if d.name == "soak"), None)
    result.slo_met = soak_d.evidence.get("slo", {}).get("met") if soak_d is not None else None
    result.exit_code, result.verdict = final_verdict(result)
    result.load_average["end"] = _loadavg()
    result.wall_s = round(time.monotonic() - wall0, 1)
    if out is not None:
        from infertune.validate.report import write_outputs

        result.out_dir = str(out)
        write_outputs(result, out)
    return result
