"""Before the soak: confirm its rate with a point long enough for the queue to settle, backing off until one
meets the SLO, and soak there. The rule is bench's (`bench.slo.confirm`, as `bench --slo-confirm`),
the load the soak's own (validate.load), so the confirm point and the soak are measured the same way and
can be compared: a soak that misses the SLO at the rate its confirm point met says the server degrades.

Why: the SLO search's 5 s points overstate what holds for minutes: a soak at 80% of their peak ran P99 far over
the SLO (docs/validate.md, the soak's rate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infertune.bench.config import BenchConfig
from infertune.bench.results import ConfirmResult, Point
from infertune.errors import InfertuneError
from infertune.validate.config import ValidateConfig
from infertune.validate.load import Stream, point, run_streams
from infertune.validate.target import Target
from infertune.workloads.bodies import Requests

# judged as the SLO search judges its points, with bench's own defaults: errors within 1%, completions in the
# window at least 95% of the sends (a queue that grows is not a load the server holds)
ERROR_BUDGET = BenchConfig.model_fields["max_error_rate"].default
KEEPUP = BenchConfig.model_fields["slo_keepup"].default


def confirm_soak_rate(target: Target, api: str, req: Requests, start: float, cfg: ValidateConfig,
                      log: Callable[[str], None]) -> ConfirmResult:
    """The highest rate from `start` down (10% steps) whose `cfg.confirm_s` point met `cfg.slo`. None met:
    a user-facing error with every step's figures (a rate that did not hold for a long point is not
    soaked)."""
    from infertune.bench.report import fmt
    from infertune.bench.slo import confirm, parse_slo

    slo = parse_slo(cfg.slo, ERROR_BUDGET, streaming=api == "completions", keepup=KEEPUP)
    duration = cfg.confirm_s
    warmup = max(2.0, duration / 6)  # the window should see the queue the rate settles into, not its start

    def run(rate: float) -> Point:
        stream = Stream("confirm", req.bodies, req.input_tokens, rate)
        r = run_streams(target.url, api, [stream], warmup, duration, cfg.timeout_s, cfg.seed)
        return point(r, target.url, api, cfg.timeout_s, rate=rate, error_budget=ERROR_BUDGET)

    log(f"confirm: the soak's rate {start:.4g} req/s with {duration:g} s points (+{warmup:g} s warm-up), "
        f"backing off 10% a step until one meets {cfg.slo}")
    c = confirm(run, slo, start=start, duration=duration, log=lambda s: log(f"  {s}"))
    if not c.met:
        behind = " (fell behind: a queue grew)"
        tried = "; ".join(f"{s.load:.4g} req/s: P99 {fmt(s.p99_ms)} ms"
                          + (behind if any(n.startswith("fell behind") for n in s.notes) else "")
                          for s in c.steps)
        raise InfertuneError(f"no rate from {start:.4g} down to {c.steps[-1].load:.4g} req/s met {cfg.slo} "
                             f"for {duration:g} s ({tried}); the SLO search's short points do not hold here. "
                             "Pass --peak REQ_PER_S to soak at a rate you choose, relax --slo, or "
                             "--soak-confirm 0 to soak unconfirmed")
    return c


def confirm_evidence(c: ConfirmResult | None) -> dict[str, Any] | None:
    """The confirm point the soak ran at, for the soak's evidence and the verdict."""
    if c is None or not c.met:
        return None
    st = c.steps[-1]
    return {"rate_rps": round(st.load, 3), "duration_s": c.duration_s, "p50_ms": st.p50_ms,
            "p99_ms": st.p99_ms, "achieved_rps": st.achieved_rps, "sent_rps": st.sent_rps,
            "error_rate": st.error_rate,
            "start_rps": round(c.start, 3), "steps": len(c.steps)}
