"""The token budget of each surviving engine, searched against the SLO instead of taken from a list.

Batch latency grows about linearly with the batch's padded tokens: latency = a + b * padded. Every
probe pass adds (padded tokens, latency) pairs; a robust line through all of them (Theil-Sen: the
median of pairwise slopes, so a batch slowed by a neighbour's burst moves nothing) predicts the
largest batch's latency at any budget: a + b * max(budget, longest item). The search steps to the
budget whose prediction meets the target, measures there (its speed, and more pairs for the line),
and stops when the step is under 15%. It keeps the fastest measured point whose predicted P99 meets
the target. The target keeps 20% of the SLO as headroom: the full rounds check the P99 of the whole
eval split, and a shared box is noisy.

On a GPU (`trust_measured`) a point's own measured P99 counts too: no neighbour on the box's shared cores slows
a device pass, and the line misses what overlapped batches add (each waits behind the one in flight): trusting the
line alone once kept a budget whose P99 the full rounds then rejected
(docs/measurements/2026-12-02-h200-torchao-installed, run 3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infertune.batching import fit_line

HEADROOM = 0.8  # aim the predicted P99 at this fraction of the SLO
MAX_STEPS = 4
LIMITS = {"cpu": (64, 16384, 64), "cuda": (1024, 262144, 1024)}  # min, max, granularity (padded tokens)


@dataclass
class Point:
    tokens: int
    speed: float
    p99_ms: float  # measured on the probe pass (noisy; reported)

    def as_dict(self, slo_ms: float, predicted: float | None = None) -> dict:
        d = {"tokens": self.tokens, "items_per_s": round(self.speed, 2), "p99_ms": round(self.p99_ms, 2)}
        if predicted is not None:
            d["predicted_p99_ms"] = round(predicted, 2)
            d["meets_target"] = predicted <= HEADROOM * slo_ms
        return d


def fit(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(a, b) of latency_ms = a + b * padded_tokens, robust to outliers (Theil-Sen)."""
    a, b = fit_line(pairs)
    return a, max(b, 1e-6)


def predict(a: float, b: float, tokens: int, longest: int) -> float:
    return a + b * max(tokens, longest)


def _round(x: float, device: str) -> int:
    """Down to the granularity (a budget rounded up could cross the target), within the limits."""
    lo, hi, g = LIMITS[device]
    return int(min(hi, max(lo, (x // g) * g)))


def next_budget(points: list[Point], pairs: Sequence[tuple[float, float]], longest: int, slo_ms: float,
                device: str, trust_measured: bool = False) -> int | None:
    """The next budget to measure, or None when the search has converged."""
    a, b = fit(pairs)
    target = HEADROOM * slo_ms
    last = points[-1].tokens
    ideal = (target - a) / b
    if trust_measured and points[-1].p99_ms > target:  # measured over the target: scale down from it
        ideal = min(ideal, last * target / points[-1].p99_ms)
    cand = _round(min(max(ideal, last / 4), last * 4), device)
    if cand in {p.tokens for p in points} or abs(cand - last) <= 0.15 * last:
        return None
    if ideal < longest:  # even one-item batches of the longest input miss the target: go no lower
        lowest = min(p.tokens for p in points)
        return None if lowest <= _round(longest, device) else _round(longest, device)
    return cand


def choose(points: list[Point], pairs: Sequence[tuple[float, float]], longest: int,
           slo_ms: float, trust_measured: bool = False) -> tuple[Point, dict[int, float]]:
    """The fastest point whose predicted P99 meets the target (and, trusting measurements, whose measured P99
    meets the SLO); if none, the one lowest on both. Also returns the prediction at every point."""
    a, b = fit(pairs)
    pred = {p.tokens: predict(a, b, p.tokens, longest) for p in points}

    def ok(p: Point) -> bool:
        return pred[p.tokens] <= HEADROOM * slo_ms and (not trust_measured or p.p99_ms <= slo_ms)

    good = [p for p in points if ok(p)]
    worst = (lambda p: max(pred[p.tokens], p.p99_ms)) if trust_measured else (lambda p: pred[p.tokens])
    best = max(good, key=lambda p: p.speed) if good else min(points, key=worst)
    return best, pred
