"""The causal-LM decision: the fastest batch-1 decoder (tokens/s) within the accuracy budget, the
Pareto front of decode speed vs perplexity drift, and sentences saying why the winner won."""

from __future__ import annotations

from infertune.config import TuneConfig
from infertune.results import CandidateResult, TuneResult


def _tps(r: CandidateResult) -> float:
    return r.tokens_per_s or 0.0


def _drift(r: CandidateResult) -> float:
    return max(r.accuracy.ppl_delta_rel or 0.0, 0.0)


def pareto_lm(results: list[CandidateResult]) -> list[str]:
    pts = [r for r in results if r.tokens_per_s and r.accuracy.ppl_delta_rel is not None]
    front = [r for r in pts if not any(
        _tps(o) >= _tps(r) and _drift(o) <= _drift(r) and (_tps(o) > _tps(r) or _drift(o) < _drift(r))
        for o in pts if o is not r)]
    return [r.name for r in sorted(front, key=_tps, reverse=True)]


def _lat(r: CandidateResult) -> str:
    t = r.tpot_ms
    return f"TPOT {t.p50:.1f} ms (p5-p95 {t.p5:.1f}-{t.p95:.1f}, n={t.n})" if t and t.p50 else "no TPOT"


def decide_lm(result: TuneResult, cfg: TuneConfig) -> None:
    """Set status / speedup on each candidate, then winner, pareto and decision, in place."""
    base = next((r for r in result.candidates if r.name == result.reference), None)
    result.baseline = base
    base_tps = _tps(base) if base else 0.0
    b = cfg.lm_accuracy
    for r in result.candidates:
        if r.status in ("failed", "skipped"):
            continue
        if r.tokens_per_s is None:
            r.status, r.reason = "failed", r.reason or "no timed decode steps completed"
            continue
        if base_tps:
            r.speedup_vs_baseline = round(r.tokens_per_s / base_tps, 3)
        if base is not None and r.name == base.name:
            r.status, r.reason = "ok", "naive baseline and accuracy reference (eager generate())"
            continue
        r.status = "ok" if r.meets_accuracy else "rejected"
    eligible = [r for r in result.candidates if r.status == "ok" and r.meets_accuracy is not False and r.tokens_per_s]
    result.pareto = pareto_lm([r for r in result.candidates if r.status in ("ok", "rejected")])
    lines: list[str] = []
    if not eligible:
        result.winner = None
        result.decision = [f"No candidate met the accuracy budget (perplexity <= +{b.max_ppl_delta_rel * 100:g}%, "
                           f"top-1 agreement >= {b.min_top1_agreement:g}) with a completed measurement."]
        return
    win = max(eligible, key=_tps)
    result.winner = win.model_copy(deep=True)
    a = win.accuracy
    roof = f", {win.roofline_fraction * 100:.0f}% of the memory roofline" if win.roofline_fraction else ""
    lines.append(f"Winner: {win.name} at {win.tokens_per_s:.1f} tokens/s batch-1 decode ({_lat(win)}{roof}); "
                 f"perplexity {a.ppl_delta_rel * 100:+.2f}%, top-1 agreement {a.top1_agreement:.4f}, "
                 f"KL {a.kl_mean:.2e} nats/token, greedy agreement {a.greedy_agreement:.2f}.")
    if base_tps and base is not None:
        lines.append(f"That is {win.tokens_per_s / base_tps:.2f}x the naive baseline ({base.name}: "
                     f"{base_tps:.1f} tokens/s, {_lat(base)}), measured in the same run, interleaved.")
    for r in sorted((r for r in result.candidates if _tps(r) > _tps(win)), key=_tps, reverse=True)[:3]:
        lines.append(f"Faster but not chosen: {r.name} ({r.tokens_per_s:.1f} tokens/s): {r.reason or r.status}.")
    others = sorted((r for r in eligible if r.name not in (win.name, base.name if base else None)),
                    key=_tps, reverse=True)
    if others:
        r = others[0]
        lines.append(f"Runner-up: {r.name} at {r.tokens_per_s:.1f} tokens/s (the winner is {_tps(win) / _tps(r):.2f}x it).")
    result.decision = lines
