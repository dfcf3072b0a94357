"""Load profiles: seeded arrival schedules, how one point is split across worker processes, and the
sweep plan (one-at-a-time up to saturation)."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

PER_WORKER_RPS = 2500.0  # lean client ~55-105 us CPU a request, aiohttp ~170-255 us (docs/bench.md)
PER_WORKER_STREAMS = 256


def arrivals(rate: float, window_s: float, kind: str, seed: int) -> np.ndarray:
    """Send times (s from the point's start) over [0, window_s): evenly spaced or Poisson."""
    if kind == "poisson":
        rng = np.random.default_rng(seed)
        n_guess = int(rate * window_s * 1.2 + 10 * math.sqrt(rate * window_s) + 10)
        t = np.cumsum(rng.exponential(1.0 / rate, size=n_guess))
        while t[-1] < window_s:  # rare: extend
            t = np.concatenate([t, t[-1] + np.cumsum(rng.exponential(1.0 / rate, size=n_guess))])
        return t[t < window_s]
    return np.arange(0.0, window_s, 1.0 / rate)


def cap_measured(times: np.ndarray, warmup: float, max_requests: int | None) -> np.ndarray:
    if max_requests is None:
        return times
    warm = times[times < warmup]
    meas = times[times >= warmup][:max_requests]
    return np.concatenate([warm, meas])


def choose_workers(requested: int | str, rate: float | None, concurrency: int | None) -> int:
    if requested != "auto":
        return int(requested)
    cores = os.cpu_count() or 1
    need = 1
    if rate:
        need = math.ceil(rate / PER_WORKER_RPS)
    elif concurrency:
        need = math.ceil(concurrency / PER_WORKER_STREAMS)
    return max(1, min(need, cores))


def split_point(base: dict[str, Any], n_workers: int, rate: float | None, concurrency: int | None,
                arrivals_kind: str, seed: int, max_requests: int | None) -> list[dict[str, Any] | None]:
    """One spec per worker. Rate: a single seeded schedule dealt round-robin (so the union is exactly
    the requested process). Concurrency: streams divided as evenly as possible."""
    specs: list[dict[str, Any] | None] = []
    window = base["warmup"] + base["duration"]
    if rate is not None:
        times = cap_measured(arrivals(rate, window, arrivals_kind, seed), base["warmup"], max_requests)
        for w in range(n_workers):
            specs.append({**base, "mode": "rate", "offsets": times[w::n_workers].tolist(), "body_offset": w,
                          "stride": n_workers})
        return specs
    assert concurrency is not None
    share = [concurrency // n_workers + (1 if w < concurrency % n_workers else 0) for w in range(n_workers)]
    for w in range(n_workers):
        if share[w] == 0:
            specs.append(None)
            continue
        cap = None if max_requests is None else max(1, round(max_requests * share[w] / concurrency))
        specs.append({**base, "mode": "concurrency", "concurrency": share[w], "max_requests": cap,
                      "body_offset": sum(share[:w])})
    return specs


def sweep_rates(r_sync: float, r_max: float, n_points: int) -> list[float]:
    """Rates strictly between the one-at-a-time rate and the saturated throughput, evenly spaced."""
    k = max(1, n_points - 2)
    lo, hi = r_sync, max(r_max, r_sync * 1.05)
    return [lo + (hi - lo) * (i + 1) / (k + 1) for i in range(k)] + [hi]
