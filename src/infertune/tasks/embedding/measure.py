"""Turn timed passes into statistics: items/s over passes (the best pass, with the median and the range
beside it), per-batch latency percentiles over every batch of every pass, tokens/s and padding.

Why the best pass: on shared CPUs, interference from other tenants only ever slows a pass (a matmul
loop on an idle 2-core machine swings between 190 and 520 iterations/s over minutes; see
docs/measurement.md). The slow passes measure the neighbours, not the candidate, and no pass runs faster
than the undisturbed machine. The minimum time is the standard answer (timeit's documentation,
BenchmarkTools.jl's default estimator). Over three consecutive `make demo` runs the leaders' best pass
moved by at most 10% (the baseline 14%), their medians by up to 42% and their upper quartiles by up to 35%
(docs/measurement.md). The median and every pass are kept in the record, so nothing is hidden.
The SLO figure removes the same noise batch by batch: every pass runs the same batches in the same
order, so each batch has one latency per pass; its median over passes is that batch's latency with the
disturbed passes voted out (fewer than half of them may be disturbed), and the P99 over batches of those
medians is checked against the SLO. The tail that comes from long inputs stays in; the tail that comes
from a neighbour's load does not. On an undisturbed machine this is the plain P99.
The median and every pass are kept in the record, so nothing is hidden."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from infertune.results import Measurement, latency_stats

ESTIMATOR_PERCENTILE = 100  # items_per_s = this percentile of the per-pass throughputs: the best pass


def summarize(passes: Sequence[dict[str, Any]], peak_rss_mb: float | None = None,
              peak_gpu_mb: float | None = None) -> Measurement:
    """`passes` are dicts from Embedder.measure_pass (warm-up passes already excluded)."""
    if not passes:
        raise ValueError("no timed passes")
    ips = [p["items"] / p["wall_s"] for p in passes]
    robust = float(np.percentile(ips, ESTIMATOR_PERCENTILE))
    walls = sum(p["wall_s"] for p in passes)
    lat = [x for p in passes for x in p["latency_ms"]]
    tokens = sum(p["tokens"] for p in passes)
    padded = sum(p["padded_tokens"] for p in passes)
    # the pass items_per_s is read from (the best one): its real tokens/s is what a peak fraction is computed from
    best = min(passes, key=lambda p: abs(p["items"] / p["wall_s"] - robust))
    per_pass = [float(np.percentile(p["latency_ms"], 99)) for p in passes if p["latency_ms"]]
    slo = _batchwise_p99(passes) if per_pass else None
    return Measurement(
        items_per_s=robust, items_per_s_median=float(np.median(ips)),
        items_per_s_estimator=("best pass" if ESTIMATOR_PERCENTILE == 100 else f"p{ESTIMATOR_PERCENTILE} of passes"),
        items_per_s_runs=[round(x, 2) for x in ips],
        items_per_s_spread=(float(min(ips)), float(max(ips))), tokens_per_s=tokens / walls,
        padded_tokens_per_s=padded / walls, latency_ms=latency_stats(lat),
        batches_per_pass=int(passes[0]["batches"]), items_per_pass=int(passes[0]["items"]),
        padding_ratio=padded / max(tokens, 1), p99_per_pass_ms=[round(x, 2) for x in per_pass],
        slo_p99_ms=slo, peak_rss_mb=peak_rss_mb, peak_gpu_mb=peak_gpu_mb,
        passes=len(passes), wait_share=wait_share(passes), tokens_per_s_best=best["tokens"] / best["wall_s"],
    )


def wait_share(passes: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """What the main thread of overlapped GPU passes waited for, as shares of their wall time: token ids and the
    device (engines/overlap.py); None for other passes."""
    walls = sum(p["wall_s"] for p in passes)
    if walls <= 0 or not all("wait_tokens_s" in p for p in passes):
        return None
    return {"tokens": round(sum(p["wait_tokens_s"] for p in passes) / walls, 4),
            "device": round(sum(p["wait_device_s"] for p in passes) / walls, 4)}


def _batchwise_p99(passes: Sequence[dict[str, Any]]) -> float:
    """P99 over batches of each batch's median latency across passes (passes run identical batch plans);
    the median of per-pass P99s when the plans differ."""
    lats = [p["latency_ms"] for p in passes if p["latency_ms"]]
    if len({len(x) for x in lats}) != 1:
        return float(np.median([np.percentile(x, 99) for x in lats]))
    per_batch = np.median(np.asarray(lats, dtype=float), axis=0)
    return float(np.percentile(per_batch, 99))
