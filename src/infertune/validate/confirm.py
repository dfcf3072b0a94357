"""Before the soak: confirm its rate with a point long enough for the queue to settle, backing off until one
meets the SLO, and soak there. The rule is bench's (`bench.slo.confirm`, as `bench --slo-confirm`),
the load the soak's own (validate.load), so the confirm point and the soak are measured the same way and
can be compared: a soak that misses the SLO at the rate its confirm point met says the server degrades.

Why: the SLO search's 5 s points overstate what holds for minutes: a soak at 80% of their peak ran P99 far over
the SLO (docs/validate.md, the soak's rate).

Margin: the confirm point must meet the SLO's latency terms times --soak-margin (0.8: P99 <= 160 ms for
p99_e2e_ms<=200), so the soak starts with room under the SLO: a rate that barely met it over 30 s is one a busy
minute pushes over. The point's spread (its window P99s, queue depth and memory while it ran) is what a soak's trend
must exceed before validate says the server degrades (trend.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from infertune.bench.config import BenchConfig
from infertune.bench.results import ConfirmResult, Point
from infertune.errors import InfertuneError
from infertune.validate.config import ValidateConfig
from infertune.validate.load import Stream, point, run_streams
from infertune.validate.soak import Sampler
from infertune.validate.target import Target
from infertune.validate.trend import spread
from infertune.workloads.bodies import Requests

# judged as the SLO search judges its points, with bench's own defaults: errors within 1%, completions in the
# window at least 95% of the sends (a queue that grows is not a load the server holds)
ERROR_BUDGET = BenchConfig.model_fields["max_error_rate"].default
KEEPUP = BenchConfig.model_fields["slo_keepup"].default
SPREAD_WINDOWS = 5  # the confirm point's window P99s (their max - min is its P99 spread)
STEADY = 0.8  # rank correlation of P99 with the backed-off rates above which the tail is a queue the load builds


def with_margin(slo_text: str, margin: float, streaming: bool = False):
    """The SLO with every latency limit times `margin` (the error budget and keep-up rule unchanged); `streaming`:
    TTFT/TPOT terms are allowed (an LLM server's streamed completions)."""
    from infertune.bench.slo import Term, parse_slo

    slo = parse_slo(slo_text, ERROR_BUDGET, streaming=streaming, keepup=KEEPUP)
    terms = tuple(Term(t.stat, t.metric, round(t.limit * margin, 3)) for t in slo.terms)
    text = ",".join(f"{t.stat}_{t.metric}_ms<={t.limit:g}" for t in terms)
    return dataclasses.replace(slo, text=text, terms=terms)


def confirm_soak_rate(target: Target, api: str, req: Requests, start: float, cfg: ValidateConfig,
                      log: Callable[[str], None]) -> tuple[ConfirmResult, dict[str, Any]]:
    """The highest rate from `start` down (10% steps) whose `cfg.confirm_s` point met `cfg.slo` with
    `cfg.soak_margin`, and that point's spreads (window P99s, queue depth, memory). None met: a user-facing error
    with every step's figures (a rate that did not hold for a long point is not soaked)."""
    from infertune.bench.report import fmt
    from infertune.bench.slo import confirm

    slo = with_margin(cfg.slo, cfg.soak_margin, streaming=api == "completions")
    duration = cfg.confirm_s
    warmup = max(2.0, duration / 6)  # the window should see the queue the rate settles into, not its start
    last: dict[str, Any] = {}

    def run(rate: float) -> Point:
        stream = Stream("confirm", req.bodies, req.input_tokens, rate)
        sampler, started = Sampler(target, cfg.sample_interval_s), []

        def on_start(t0: float) -> None:
            started.append(t0)
            sampler.start(t0)

        try:
            r = run_streams(target.url, api, [stream], warmup, duration, cfg.timeout_s, cfg.seed, on_start=on_start)
        finally:
            if started:
                sampler.stop()
        last.update(run=r, rate=rate, sampler=sampler if started else None)
        return point(r, target.url, api, cfg.timeout_s, rate=rate, error_budget=ERROR_BUDGET)

    log(f"confirm: the soak's rate {start:.4g} req/s with {duration:g} s points (+{warmup:g} s warm-up), "
        f"backing off 10% a step until one meets {cfg.slo} with margin {cfg.soak_margin:g} ({slo.text})")
    c = confirm(run, slo, start=start, duration=duration, log=lambda s: log(f"  {s}"))
    if not c.met:
        behind = " (fell behind: a queue grew)"
        tried = "; ".join(f"{s.load:.4g} req/s: P99 {fmt(s.p99_ms)} ms"
                          + (behind if any(n.startswith("fell behind") for n in s.notes) else "")
                          for s in c.steps)
        raise InfertuneError(f"no rate from {start:.4g} down to {c.steps[-1].load:.4g} req/s met {slo.text} ({cfg.slo} "
                             f"with --soak-margin {cfg.soak_margin:g}) for {duration:g} s ({tried}); "
                             f"{rate_trend(c.steps)}. Pass --peak REQ_PER_S to soak at a rate you choose, relax "
                             "--slo or --soak-margin, or --soak-confirm 0 to soak unconfirmed")
    return c, _spreads(last, target, api, cfg, warmup, duration)


def rate_trend(steps: list[Any]) -> str:
    """What the backed-off steps' P99s say of the cause. A queue the load builds shrinks step by step as the rate
    falls: P99 ranks as the rate does (rank correlation near 1; STEADY). A P99 that goes up and down as the rate falls
    is set by something else: the slowest requests' own service time, or other work on the host."""
    pts = [(s.load, s.p99_ms) for s in steps if s.p99_ms is not None]
    if len(pts) < 3:
        return "the SLO search's short points do not hold here"
    rho = _rank_correlation([x for x, _ in pts], [y for _, y in pts])
    r0, r1 = pts[0][0], pts[-1][0]
    seen = (f"P99 {', '.join(f'{y:.1f}' for _, y in pts)} ms from {r0:.4g} down to {r1:.4g} req/s; rank correlation "
            f"with the rate {rho:.2f}")
    if rho < STEADY:
        return (f"P99 does not fall steadily with the rate ({seen}; the lowest {min(y for _, y in pts):.1f} ms): no "
                "queue the load builds sets the tail, but the slowest requests' own time or other work on this host, "
                "so a lower rate is unlikely to meet the SLO")
    return f"P99 falls with the rate ({seen}), yet not under the limit: a lower rate may hold"


def _rank_correlation(x: list[float], y: list[float]) -> float:
    """Spearman's rho (ranks without tie correction: measured latencies rarely tie)."""
    def ranks(v: list[float]) -> list[int]:
        order = sorted(range(len(v)), key=v.__getitem__)
        out = [0] * len(v)
        for r, i in enumerate(order):
            out[i] = r
        return out

    rx, ry, n = ranks(x), ranks(y), len(x)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True)) / (n * (n * n - 1))


def _spreads(last: dict[str, Any], target: Target, api: str, cfg: ValidateConfig, warmup: float,
             duration: float) -> dict[str, Any]:
    """The met point's spread of each series a soak's trend is judged against (trend.py): the max - min of its
    SPREAD_WINDOWS window P99s, of its queue depth and of its memory while it was measured (after its warm-up)."""
    w = duration / SPREAD_WINDOWS
    p99s = [point(last["run"], target.url, api, cfg.timeout_s, start=warmup + i * w, length=w,
                  rate=last["rate"]).latency_ms.p99 for i in range(SPREAD_WINDOWS)]
    out: dict[str, Any] = {"window_p99_ms": p99s, "p99_ms": spread(p99s)}
    s = last.get("sampler")
    keep = [i for i, t in enumerate(s.t) if t >= warmup] if s is not None else []
    out["queue_depth"] = spread([s.metrics["infertune_queue_depth"][i] for i in keep]) if s else None
    out["rss_mb"] = spread([s.rss[i] for i in keep]) if s else None
    return out


def confirm_evidence(c: ConfirmResult | None, spreads: dict[str, Any] | None = None,
                     margin: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The confirm point the soak ran at, for the soak's evidence and the verdict: its figures, its spreads, and
    the margin it met ({"margin": 0.8, "slo": "p99_e2e_ms<=160"})."""
    if c is None or not c.met:
        return None
    st = c.steps[-1]
    return {"rate_rps": round(st.load, 3), "duration_s": c.duration_s, "p50_ms": st.p50_ms,
            "p99_ms": st.p99_ms, "achieved_rps": st.achieved_rps, "sent_rps": st.sent_rps,
            "error_rate": st.error_rate,
            "start_rps": round(c.start, 3), "steps": len(c.steps), "spread": spreads, **(margin or {})}
