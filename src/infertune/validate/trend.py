"""Does the soak degrade? Only a measured trend says so: a rising series over the soak whose rise is beyond what the
confirm point (the same rate, measured just before) already showed as its spread.

Three series are tested: the soak's window P99, the queue depth and the resident memory (server + children), each
sampled over the soak. A trend is the Theil-Sen slope (the median of every pairwise slope: one slow window moves
nothing) and its one-sided permutation test: the share of random reorderings of the same values whose slope is at
least as steep (`p`). It counts when p < P_MAX *and* the fitted rise over the soak (slope x its length) is more
than the confirm point's spread of the same series (its window P99s' max - min, its queue depth's and memory's
range while it ran) and than the series' floor: two requests of queue (a sample is the count at one instant: a
healthy short soak on a busy host read 0 then 1 waiting; docs/measurements/2026-12-07-epyc-suite-lazy-bytecode),
and for memory the soak's own --min-rss-growth (10 MB: allocator granularity; a 4 s soak's RSS rises 0.07 MB with a
0.04 MB confirm spread).
Without a confirm point there is no spread to compare, and "degrades" is not said.

Without such a trend, a soak that missed its SLO (or drifted) gets a cause named with its figures: the host was
busy (other processes' CPU), the soak was over the SLO from its first third on (slower from the start), a slow
spell in its middle, or over the SLO at this rate without a trend. The arithmetic is free of I/O: the unit tests
feed it made-up series.
"""

from __future__ import annotations

from typing import Any

import numpy as np

P_MAX = 0.05  # one-sided permutation p-value under which a slope is believed
PERMUTATIONS = 2000
QUEUE_FLOOR = 2.0  # requests: the rise a queue-depth trend must pass whatever the confirm spread
MAX_POINTS = 60  # longer series are averaged into this many bins first (a 1 h soak samples 3,600 RSS values)


def theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    """The median of the slopes between every pair of points with different x."""
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    return float(np.median((y[j] - y[i])[keep] / dx[keep])) if keep.any() else 0.0


def _bins(x: np.ndarray, y: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= n:
        return x, y
    edges = np.array_split(np.arange(len(x)), n)
    return np.array([x[e].mean() for e in edges]), np.array([y[e].mean() for e in edges])


def rising(t_s: list[float], values: list[float | None], seed: int = 0) -> dict[str, Any]:
    """Theil-Sen slope (per minute) of `values` over `t_s` (seconds), the fitted rise over the series' span and the
    one-sided permutation p-value of a slope at least that steep. {"slope_per_min": None} with < 5 values."""
    pts = [(t, v) for t, v in zip(t_s, values, strict=True) if v is not None and np.isfinite(v)]
    if len(pts) < 5:
        return {"slope_per_min": None, "n": len(pts), "note": "fewer than 5 values"}
    x, y = _bins(np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float), MAX_POINTS)
    slope = theil_sen(x, y)
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    rng = np.random.default_rng(seed)
    perms = np.stack([rng.permutation(y) for _ in range(PERMUTATIONS)])
    slopes = np.median((perms[:, j] - perms[:, i])[:, keep] / dx[keep], axis=1)
    p = (1 + int((slopes >= slope).sum())) / (PERMUTATIONS + 1)
    span = float(x[-1] - x[0])
    return {"slope_per_min": round(slope * 60, 4), "rise": round(slope * span, 3), "span_s": round(span, 1),
            "p": round(p, 4), "n": len(pts), "points_tested": len(x), "first": round(float(y[0]), 3),
            "last": round(float(y[-1]), 3)}


def spread(values: list[float | None]) -> float | None:
    """max - min of a confirm point's series (None without two values)."""
    v = [x for x in values if x is not None and np.isfinite(x)]
    return round(float(max(v) - min(v)), 3) if len(v) >= 2 else None


# the series tested: (name in the evidence, unit, what the verdict calls it)
SERIES = (("p99_ms", "ms", "window P99"), ("queue_depth", "requests", "queue depth"), ("rss_mb", "MB", "memory"))


def trends(soak: dict[str, tuple[list[float], list[float | None]]], spreads: dict[str, float | None],
           seed: int = 0, floors: dict[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """Per series of the soak ({name: (t_s, values)}): its rising() figures, the confirm point's spread and whether
    it is a trend beyond that spread and the series' floor (`beyond`)."""
    out = {}
    floors = {"queue_depth": QUEUE_FLOOR, **(floors or {})}
    for name, _unit, _what in SERIES:
        if name not in soak:
            continue
        r = rising(*soak[name], seed=seed)
        sp = spreads.get(name)
        r["confirm_spread"], r["floor"] = sp, floors.get(name, 0.0)
        r["beyond"] = bool(r["slope_per_min"] is not None and r["p"] < P_MAX and sp is not None
                           and r["rise"] > max(sp, r["floor"]))
        out[name] = r
    return out


def _trend_words(name: str, r: dict[str, Any]) -> str:
    unit, what = next((u, w) for n, u, w in SERIES if n == name)
    if r.get("slope_per_min") is None:
        return f"{what}: not enough samples"
    sp, floor = r["confirm_spread"], r.get("floor") or 0.0
    vs = f"the confirm point's spread {sp:g} {unit}" if sp is not None else "no confirm spread to compare"
    vs += f" (at least {floor:g} {unit})" if floor and sp is not None and floor > sp else ""
    return (f"{what} {r['slope_per_min']:+.3g} {unit}/min (Theil-Sen, p={r['p']:.3g} by permutation), "
            f"{r['rise']:+.3g} {unit} over {r['span_s']:g} s vs {vs}")


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def thirds(p99s: list[float | None]) -> tuple[float, float, float] | None:
    """Median window P99 of the first, middle and last third of a soak (None: fewer than 3 windows)."""
    v = [x for x in p99s if x is not None]
    if len(v) < 3:
        return None
    k = max(1, len(v) // 3)
    return float(np.median(v[:k])), float(np.median(v[k:len(v) - k])), float(np.median(v[-k:]))


def degradation(confirm: dict[str, Any] | None, window_p99s: list[float | None], slo: dict[str, Any],
                drifted: bool, soak_p99: float | None, others_cpu: list[float | None] | None = None,
                spell: dict | None = None, tested: dict[str, dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The soak against its confirm point. None: no confirm point. `tested`: trends() of the soak's series against
    the confirm point's spreads. {"degraded": True, "kind": "degrades over time", ...} only when a series has a
    trend beyond its spread; a soak that missed its SLO (or drifted) without one gets {"degraded": False, "kind":
    its measured cause, "verdict": in words with figures}; one that held: {"degraded": False}."""
    from infertune.validate.host import HOST_BUSY_CORES

    if confirm is None:
        return None
    tested = tested or {}
    beyond = [n for n, r in tested.items() if r.get("beyond")]
    figures = "; ".join(_trend_words(n, r) for n, r in tested.items())
    base = {"confirm": confirm, "trends": tested}
    c = (f"the {confirm['duration_s']:g} s confirm point at {confirm['rate_rps']:.4g} req/s met the SLO (P50 "
         f"{_ms(confirm['p50_ms'])} ms, P99 {_ms(confirm['p99_ms'])} ms)")
    if beyond:
        words = "; ".join(_trend_words(n, tested[n]) for n in beyond)
        return {**base, "degraded": True, "kind": "degrades over time", "rising": beyond,
                "verdict": f"the server degrades over time: {words} (p < {P_MAX:g}; {c})"}
    if slo.get("met") and not drifted:
        return {**base, "degraded": False}
    th = thirds(window_p99s)
    whole = f"{_ms(soak_p99)} ms over the whole soak"
    trend = f"; no trend beyond the confirm point's spread ({figures})" if figures else ""
    if th is None:
        return {**base, "degraded": False, "kind": "over the SLO", "verdict": f"{c}; the soak at the same rate did "
                f"not ({whole}){trend}"}
    first, mid, last = th
    per = f"window P99 by third {first:.1f} / {mid:.1f} / {last:.1f} ms"
    busy = [x for x in (others_cpu or []) if x is not None]
    if busy:
        per += "; other processes on this host: " + " / ".join(_ms(x) for x in others_cpu or []) + " cores"
    bound = next((t["limit"] for t in slo.get("terms", []) if t.get("term") == "p99_e2e_ms"), None)
    if spell is not None or (busy and max(busy) >= HOST_BUSY_CORES):
        kind = "host busy"
        when = (f"other processes took {spell['mean_cores']:.1f} cores from {spell['from_s']:g} s to "
                f"{spell['to_s']:g} s, where its windows broke the SLO" if spell else
                "other processes took CPU on this host")
        words = (f"{c}; the soak at the same rate did not ({per}; {whole}) while {when}: the host's load, not "
                 f"necessarily the server's; repeat on a quiet host{trend}")
    elif bound is not None and first > bound:
        kind = "slower from the start"
        words = (f"{c}, but the soak at the same rate was over the SLO from its first third on ({per}; {whole}): "
                 f"the host or the server changed between them{trend}")
    elif mid > first and mid > last:
        kind = "slow spell"
        words = (f"{c}; the soak at the same rate had a slow spell in its middle ({per}; {whole}): a busy host or a "
                 f"stall in the server, not a trend{trend}")
    else:
        kind = "over the SLO"
        words = f"{c}; the soak at the same rate did not ({per}; {whole}){trend}"
    return {**base, "degraded": False, "kind": kind, "verdict": words,
            "thirds_p99_ms": [round(first, 1), round(mid, 1), round(last, 1)]}
