"""Token-length buckets of a workload and the deterministic, length-stratified calibration/eval split that keeps
each bucket's share on both sides (every family's tune and checkpoint calibration use it)."""

from __future__ import annotations

import random
from collections.abc import Sequence

BUCKETS = (16, 32, 64, 128, 256, 512)  # upper bounds in tokens; the last bucket is open


def bucket_of(n_tokens: int) -> int:
    for i, hi in enumerate(BUCKETS):
        if n_tokens <= hi:
            return i
    return len(BUCKETS)


def bucket_label(i: int) -> str:
    lo = 1 if i == 0 else BUCKETS[i - 1] + 1
    return f"{lo}-{BUCKETS[i]}" if i < len(BUCKETS) else f">{BUCKETS[-1]}"


def histogram(lengths: Sequence[int]) -> list[dict]:
    counts = [0] * (len(BUCKETS) + 1)
    for n in lengths:
        counts[bucket_of(n)] += 1
    return [{"bucket": bucket_label(i), "count": c} for i, c in enumerate(counts)]


def stratified_split(lengths: Sequence[int], eval_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Split indices into (calibration, eval), keeping each token-length bucket's share in both.
    Deterministic for a given seed."""
    rng = random.Random(seed)
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(bucket_of(n), []).append(i)
    calib: list[int] = []
    evals: list[int] = []
    for b in sorted(groups):
        idx = groups[b][:]
        rng.shuffle(idx)
        k = round(len(idx) * eval_fraction)
        if len(idx) >= 2:
            k = min(max(k, 1), len(idx) - 1)
        evals += idx[:k]
        calib += idx[k:]
    return sorted(calib), sorted(evals)


def stratified_subsample(indices: Sequence[int], lengths: Sequence[int], k: int, seed: int = 0) -> list[int]:
    """Pick k of `indices`, keeping length-bucket proportions (for --quick and caps)."""
    if k >= len(indices):
        return list(indices)
    sub = [lengths[i] for i in indices]
    _, keep = stratified_split(sub, k / len(indices), seed)
    return sorted(indices[j] for j in keep)
