"""Mixed precision by accuracy: measure each Linear layer's sensitivity to int8 (quantize that one
layer alone, compare with fp32 on the calibration split), then keep the most sensitive layers in fp32,
greedily, until the whole model meets the accuracy budget (the smallest such set is found by bisection over
how many of the most sensitive layers to keep: ~log2(layers) evaluations instead of one per layer). Runs on calibration data only; the final
candidate is verified on the separate eval split like every other."""

from __future__ import annotations

import time
from typing import Any

from infertune.verify import row_cosines


def search(spec: dict, texts: list[str], min_cosine_mean: float, min_cosine_min: float,
           max_keep: int | None = None, max_s: float | None = None) -> dict[str, Any]:
    """Return {"sensitivity": [...], "keep_high": [...], "steps": [...]} (all figures on `texts`).

    `max_s`: when the per-layer pass runs out of time, the layers not yet measured count as the most
    sensitive (kept high): the answer stays safe, only less aggressive."""
    from infertune.backends.torch_eager import TorchEmbedder
    from infertune.config import Batching, Candidate
    from infertune.models.embedding import EmbeddingSpec, load_encoder, load_tokenizer
    from infertune.quantize.torch_ao import linear_names, quantize_dynamic_int8

    t0 = time.perf_counter()
    es = EmbeddingSpec(**spec)
    tok = load_tokenizer(es)
    base = load_encoder(es, "fp32")
    batching = Batching(kind="tokens", size=4096)
    cand = Candidate(backend="torch-eager")

    def run(model):
        return TorchEmbedder(es, tok, model, cand, "cpu").embed(texts, batching, pooled=True)

    ref = run(base)
    names = linear_names(base)
    sens = []
    unmeasured = []
    for n in names:
        if max_s is not None and time.perf_counter() - t0 > 0.6 * max_s:
            unmeasured.append(n)
            continue
        cos = row_cosines(ref, run(quantize_dynamic_int8(base, [n])))
        sens.append({"layer": n, "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
                     "drop": float(1 - cos.mean())})
    sens.sort(key=lambda s: s["drop"], reverse=True)
    order = unmeasured + [x["layer"] for x in sens]
    limit = len(names) if max_keep is None else min(max_keep, len(names))
    steps: list[dict] = []
    memo: dict[int, bool] = {}

    def holds(k: int) -> bool:
        """Quantize all but the k most sensitive layers; does the model meet the budget?"""
        if k not in memo:
            keep_k = set(order[:k])
            q = [n for n in names if n not in keep_k]
            cos = row_cosines(ref, run(quantize_dynamic_int8(base, q))) if q else row_cosines(ref, ref)
            memo[k] = bool(cos.mean() >= min_cosine_mean and cos.min() >= min_cosine_min)
            steps.append({"kept_high": k, "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
                          "meets_budget": memo[k]})
        return memo[k]

    # accuracy grows (nearly) monotonically with k: bisect for the smallest k that holds
    if holds(0):
        k = 0
    elif not holds(limit):
        k = limit
    else:
        lo, hi = 0, limit  # holds(lo) is False, holds(hi) is True
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if holds(mid) else (mid, hi)
        k = hi
    keep = order[:k]
    steps.sort(key=lambda x: x["kept_high"])
    final = next(x for x in steps if x["kept_high"] == k)
    met = final["meets_budget"]
    return {"sensitivity": sens, "keep_high": keep, "steps": steps, "met_on_calibration": met,
            "n_layers": len(names), "n_calibration": len(texts), "unmeasured": len(unmeasured), "search_s": round(time.perf_counter() - t0, 1)}
