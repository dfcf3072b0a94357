"""Measurement for causal LMs: the roofline at a measured memory bandwidth (infertune.hardware.bandwidth), and the
statistics of TTFT (prefill + first token at given prompt lengths) and TPOT (one decode step at a batch
size) over interleaved rounds.

Memory roofline for batch-1 decode: every weight byte is read once per step, so no step can be faster
than decode_weight_bytes / bandwidth. `roofline_fraction` = that floor / the measured median step time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infertune.results import Latency, latency_stats


def roofline_ms(weight_bytes: int, gb_per_s: float) -> float:
    return weight_bytes / (gb_per_s * 1e9) * 1000


def summarize_lm(rounds: Sequence[dict[str, Any]]) -> tuple[dict[str, Latency], dict[str, Latency]]:
    """Merge the `measure` answers of the timed rounds into Latency per prompt length / batch size."""
    ttft: dict[str, list[float]] = {}
    tpot: dict[str, list[float]] = {}
    for r in rounds:
        for k, v in r["ttft"].items():
            ttft.setdefault(k, []).extend(v)
        for k, v in r["tpot"].items():
            tpot.setdefault(k, []).extend(v)
    return ({k: latency_stats(v) for k, v in ttft.items()}, {k: latency_stats(v) for k, v in tpot.items()})
