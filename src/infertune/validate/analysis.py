"""The arithmetic behind the verdicts, free of I/O so it can be tested on made-up series.

- memory slope: least squares of RSS on time over the second half of the soak, with a 95% confidence
  interval; a climb is flagged when the slope is above the threshold AND its interval excludes zero AND
  the fitted rise over the window is more than a few MB (allocator granularity);
- P99 drift: median P99 of the last third of the windows over the median of the first third;
- knee: the lowest offered rate at which a bucket's P99 exceeds `factor` x its P99 at the lowest rate.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

# two-sided 95% Student t quantiles by degrees of freedom (1..30); 1.96 beyond
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


class RssSample(NamedTuple):
    t_s: float  # seconds since the soak started
    mb: float  # resident memory


def _ols(x: np.ndarray, y: np.ndarray) -> float | None:
    sxx = float(((x - x.mean()) ** 2).sum())
    return float(((x - x.mean()) * (y - y.mean())).sum() / sxx) if sxx > 0 else None


def rss_slope(t_s: list[float], rss_mb: list[float], settle_fraction: float = 0.5) -> dict[str, Any]:
    """Least-squares slope of RSS (MB) over time, in MB/hour, on samples after the first `settle_fraction`
    of the run (allocator arenas, per-shape kernel caches and connection pools fill early, then flatten).
    Also the slopes of the first and second half of the whole run: a steady leak keeps its slope, a
    warm-up decelerates."""
    pts = [RssSample(t, y) for t, y in zip(t_s, rss_mb, strict=True) if y is not None and math.isfinite(y)]
    if len(pts) < 4:
        return {"slope_mb_per_h": None, "n": len(pts), "note": "fewer than 4 RSS samples"}
    t_start, t_end = pts[0].t_s, pts[-1].t_s
    t_cut = t_start + settle_fraction * (t_end - t_start)
    fit = [p for p in pts if p.t_s >= t_cut]
    if len(fit) < 4:
        fit = pts
    x = np.array([p.t_s for p in fit]) / 3600.0
    y = np.array([p.mb for p in fit])
    n = len(x)
    sxx = float(((x - x.mean()) ** 2).sum())
    if sxx <= 0:
        return {"slope_mb_per_h": None, "n": n, "note": "samples at one instant"}
    b = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    a = float(y.mean() - b * x.mean())
    resid = y - (a + b * x)
    se = math.sqrt(float((resid**2).sum()) / max(1, n - 2) / sxx)
    half = t95(n - 2) * se
    ups = int((np.diff(y) > 0).sum())
    ax = np.array([p.t_s for p in pts]) / 3600.0
    ay = np.array([p.mb for p in pts])
    mid = len(ax) // 2
    halves = [_ols(ax[:mid], ay[:mid]), _ols(ax[mid:], ay[mid:])] if mid >= 3 else [None, None]
    return {"slope_mb_per_h": round(b, 2),
            "halves_slope_mb_per_h": [round(h, 1) if h is not None else None for h in halves],
            "ci95_mb_per_h": [round(b - half, 2), round(b + half, 2)], "n": n,
            "fit_from_s": round(fit[0].t_s, 1), "fit_to_s": round(fit[-1].t_s, 1),
            "rss_start_mb": round(float(pts[0].mb), 1), "rss_fit_start_mb": round(float(y[0]), 1),
            "rss_end_mb": round(float(y[-1]), 1), "rss_max_mb": round(float(max(p.mb for p in pts)), 1),
            "rising_steps": f"{ups}/{n - 1}"}


def leak_verdict(fit: dict[str, Any], threshold_mb_h: float, min_growth_mb: float = 10.0) -> tuple[bool, str]:
    """(leaking?, why). Leaking: the slope is above the threshold, significantly above zero, and the fitted
    line rises more than `min_growth_mb` over the fit window. The last rule keeps allocator granularity
    (arenas, page cache of a few MB) from reading as hundreds of MB/h when a short soak is extrapolated."""
    b = fit.get("slope_mb_per_h")
    if b is None:
        return False, f"no slope ({fit.get('note', 'not enough samples')})"
    lo, hi = fit["ci95_mb_per_h"]
    grew = b * (fit["fit_to_s"] - fit["fit_from_s"]) / 3600
    fit["fitted_growth_mb"] = round(grew, 2)
    what = f"RSS slope {b:.1f} MB/h (95% CI {lo:.1f}..{hi:.1f}), {grew:.1f} MB over the fit window"
    h1, h2 = fit.get("halves_slope_mb_per_h") or [None, None]
    if h1 is not None and h2 is not None:
        what += f" (whole run: {h1:.0f} MB/h in its first half, {h2:.0f} MB/h in its second)"
    if b > threshold_mb_h and lo > 0 and grew > min_growth_mb:
        return True, f"memory climbs: {what} > {threshold_mb_h:g} MB/h and > {min_growth_mb:g} MB"
    return False, f"{what}: within {threshold_mb_h:g} MB/h or under {min_growth_mb:g} MB"


def p99_drift(p99s: list[float | None]) -> dict[str, Any]:
    """Median P99 of the last third of the windows / of the first third, and a least-squares trend."""
    v = [x for x in p99s if x is not None]
    if len(v) < 3:
        return {"ratio": None, "n_windows": len(v)}
    k = max(1, len(v) // 3)
    first, last = float(np.median(v[:k])), float(np.median(v[-k:]))
    return {"ratio": round(last / first, 3) if first > 0 else None, "first_third_p99_ms": round(first, 1),
            "last_third_p99_ms": round(last, 1), "n_windows": len(v), "windows_per_third": k,
            "min_p99_ms": round(min(v), 1), "max_p99_ms": round(max(v), 1)}


def knee(rates: list[float], p99s: list[float | None], factor: float = 2.0) -> dict[str, Any]:
    """The lowest rate whose P99 exceeds `factor` x the P99 at the lowest rate (None: no knee in range)."""
    pts = sorted((r, p) for r, p in zip(rates, p99s, strict=True) if p is not None)
    if len(pts) < 2:
        return {"rate": None, "rule": "fewer than 2 measured rates"}
    (low_rate, base), top_rate = pts[0], pts[-1][0]
    for r, p in pts[1:]:
        if p > factor * base:
            return {"rate": round(r, 3), "p99_ms": round(p, 1), "base_p99_ms": round(base, 1),
                    "rule": f"lowest rate with P99 > {factor:g} x P99 at {low_rate:.3g} req/s"}
    return {"rate": None, "base_p99_ms": round(base, 1),
            "rule": f"P99 stayed within {factor:g} x its value at {low_rate:.3g} req/s up to {top_rate:.3g} req/s"}


def slo_terms_verdict(slo_text: str, point) -> dict[str, Any]:
    """The SLO's latency terms checked on one measured bench Point (the whole soak): {"met", "terms": [...],
    "missed": [...]}. Terms the point did not measure (TTFT without streaming) are listed, not judged;
    the error budget is the soak's own rule (--max-error-rate), so it is not repeated here."""
    from infertune.bench.slo import _value, parse_slo

    slo = parse_slo(slo_text, 1.0, streaming=True)
    terms, missed = [], []
    for t in slo.terms:
        v = _value(point, t)
        name = f"{t.stat}_{t.metric}_ms"
        ok = None if v is None else bool(v <= t.limit)
        terms.append({"term": name, "value": None if v is None else round(float(v), 2), "limit": t.limit, "met": ok})
        if ok is False:
            missed.append(f"{name} {v:.1f} > {t.limit:g}")
    return {"slo": slo_text, "met": not missed, "terms": terms, "missed": missed}


def confirmed_rates(points) -> dict[str, Any]:
    """From an SLO search's points: every rate's passes and failures, the highest rate that passed at least
    twice and never failed ("confirmed"), and the highest that passed at all."""
    by: dict[float, list[int]] = {}
    for p in points:
        r = p.offered.rate
        if not r or p.slo_pass is None:
            continue
        c = by.setdefault(float(r), [0, 0])
        c[0 if p.slo_pass else 1] += 1
    confirmed = [r for r, (ok, bad) in by.items() if ok >= 2 and bad == 0]
    passed = [r for r, (ok, _) in by.items() if ok >= 1]
    return {"confirmed": max(confirmed, default=None), "passed_once": max(passed, default=None),
            "runs": {f"{r:.6g}": {"pass": ok, "fail": bad} for r, (ok, bad) in sorted(by.items())}}
