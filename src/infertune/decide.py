"""The decision: the fastest candidate that meets both the SLO and the accuracy budget, the Pareto
front of speed vs accuracy, and plain sentences saying why the winner won."""

from __future__ import annotations

from infertune.config import TuneConfig
from infertune.results import CandidateResult, TuneResult


def _speed(r: CandidateResult) -> float:
    return r.items_per_s or 0.0


# how much machinery a candidate brings into production: at equal speed, fewer moving parts win
_ENGINE_RANK = {"torch-eager": 0, "onnxruntime": 1, "torch-compile": 2}


def _rank(r: CandidateResult) -> int:
    return _ENGINE_RANK.get(str(r.candidate.get("backend", "")), 1)


def pick(eligible: list[CandidateResult], tie_margin: float) -> tuple[CandidateResult, CandidateResult]:
    """(winner, fastest). Candidates within `tie_margin` of the fastest eligible one are tied: such a
    gap is inside the run-to-run noise. Among them the simplest engine wins (it builds faster and breaks
    less: no compile step, no export, no second runtime), then the lowest SLO P99 (at equal throughput,
    smaller batches answer sooner), then the higher throughput."""
    fastest = max(eligible, key=_speed)
    close = [r for r in eligible if _speed(r) >= (1 - tie_margin) * _speed(fastest)]
    return min(close, key=lambda r: (_rank(r), slo_p99(r) or 0.0, -_speed(r))), fastest


def slo_p99(r: CandidateResult) -> float | None:
    """The P99 checked against the SLO: each batch's latency, median over passes (every pass runs the same
    batches), then the P99 over batches (measure.py says why). Passes disturbed by the machine (another
    tenant, a GC pause) then cannot flip the decision; the pooled P99 is reported beside it."""
    m = r.measurement
    if m is not None and m.slo_p99_ms is not None:
        return m.slo_p99_ms
    return r.latency_ms.p99


def pareto_front(results: list[CandidateResult]) -> list[str]:
    """Candidates not beaten on both speed and mean cosine by any other measured candidate."""
    pts = [r for r in results if r.items_per_s and r.accuracy.cosine_mean is not None]
    front = []
    for r in pts:
        dominated = any(
            _speed(o) >= _speed(r) and o.accuracy.cosine_mean >= r.accuracy.cosine_mean
            and (_speed(o) > _speed(r) or o.accuracy.cosine_mean > r.accuracy.cosine_mean)
            for o in pts if o is not r
        )
        if not dominated:
            front.append(r)
    return [r.name for r in sorted(front, key=_speed, reverse=True)]


def decide(result: TuneResult, cfg: TuneConfig) -> None:
    """Set status / meets_* / speedup on each candidate, then winner, pareto and decision in place."""
    base = result.baseline
    base_speed = _speed(base) if base else 0.0
    slo = cfg.slo.p99_ms
    for r in result.candidates:
        if r.status in ("failed", "skipped"):
            continue
        if r.items_per_s is None:
            r.status, r.reason = "failed", r.reason or "no timed passes completed"
            continue
        if base_speed:
            r.speedup_vs_baseline = round(r.items_per_s / base_speed, 3)
        p99 = slo_p99(r)
        r.meets_slo = p99 is not None and p99 <= slo
        reasons = []
        if r.meets_accuracy is False:
            reasons.append(r.reason or "accuracy below budget")
        if not r.meets_slo:
            reasons.append(f"P99 batch latency {p99:.1f} ms (batch medians over passes) > SLO {slo:g} ms")
        if base is not None and r.name == base.name:
            r.status, r.reason = "ok", "; ".join(["naive baseline", *reasons])
            continue
        r.status = "rejected" if reasons else "ok"
        r.reason = "; ".join(reasons)
    eligible = [r for r in result.candidates if r.status == "ok" and r.meets_slo and r.meets_accuracy
                and (base is None or r.name != base.name)]
    result.pareto = pareto_front([r for r in result.candidates if r.status in ("ok", "rejected")])
    lines: list[str] = []
    if not eligible:
        result.winner = None
        lines.append(f"No candidate met both the SLO (P99 <= {slo:g} ms) and the accuracy budget "
                     f"(mean cosine >= {cfg.accuracy.min_cosine_mean}, min >= {cfg.accuracy.min_cosine_min}).")
        fastest = max((r for r in result.candidates if r.items_per_s), key=_speed, default=None)
        if fastest:
            lines.append(f"Fastest measured: {fastest.name} at {fastest.items_per_s:.1f} items/s ({fastest.reason}).")
        result.decision = lines
        return
    win, fastest = pick(eligible, cfg.tie_margin)
    result.winner = win.model_copy(deep=True)
    m = win.measurement
    spread = f" ({m.items_per_s_estimator}, median {m.items_per_s_median or 0:.1f}, n={m.passes} passes, range {m.items_per_s_spread[0]:.1f}-{m.items_per_s_spread[1]:.1f})" if m else ""
    lines.append(f"Winner: {win.name} at {win.items_per_s:.1f} items/s{spread}, P99 batch latency "
                 f"{slo_p99(win):.1f} ms (of batch medians over passes; pooled {win.latency_ms.p99:.1f}) vs SLO {slo:g} ms, mean cosine {win.accuracy.cosine_mean:.5f}, "
                 f"min {win.accuracy.cosine_min:.5f}.")
    if fastest is not win:
        why = (f"the simpler engine ({win.candidate.get('backend')})" if _rank(win) < _rank(fastest) else
               f"the lower P99 ({slo_p99(win):.1f} vs {slo_p99(fastest):.1f} ms)")
        lines.append(f"{fastest.name} measured {(_speed(fastest) / _speed(win) - 1) * 100:.1f}% faster, inside the "
                     f"{cfg.tie_margin:.0%} tie margin: {why} is chosen.")
    if base_speed:
        lines.append(f"That is {win.items_per_s / base_speed:.2f}x the naive baseline ({base.name}, "
                     f"{base_speed:.1f} items/s, measured in the same run).")
    faster = [r for r in result.candidates if _speed(r) > _speed(win) and r.name not in (win.name, fastest.name)]
    for r in sorted(faster, key=_speed, reverse=True)[:3]:
        why = r.reason or (f"tied with the winner within the {cfg.tie_margin:.0%} margin; the winner is the simpler "
                           "engine or answers sooner" if r.status == "ok" else r.status)
        lines.append(f"Faster but not chosen: {r.name} ({r.items_per_s:.1f} items/s): {why}.")
    others = sorted((r for r in eligible if r.name != win.name), key=_speed, reverse=True)
    if others:
        r = others[0]
        gap = (_speed(r) / _speed(win) - 1) * 100
        lines.append(f"Runner-up: {r.name} at {r.items_per_s:.1f} items/s ("
                     + (f"{gap:.1f}% faster, tied as above)." if gap > 0 else f"{-gap:.0f}% slower)."))
    result.decision = lines
