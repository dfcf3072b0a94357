"""Mixed precision by accuracy: measure each Linear layer's sensitivity to the quantizer (quantize that one
layer alone, compare with the fp32 reference on the calibration split), then keep the most sensitive layers
high until the whole model meets the accuracy budget. The smallest such set is found by bisection over how many
of the most sensitive layers to keep: ~log2(layers) evaluations instead of one per layer. Runs on calibration
data only; the final candidate is verified on the separate eval split like every other.

Two quantizers: torch.ao dynamic int8 on a CPU (layers kept in fp32), and torchao (fp8 or int8 dynamic) on a
GPU, where the model runs in bf16 and the kept layers stay bf16. The per-layer pass there runs the torchao
kernels eagerly: the candidate itself is compiled, which changes speed, not what each layer rounds to."""

from __future__ import annotations

import copy
import time
from typing import Any

from infertune.models.embedding import row_cosines


class Quantizer:
    """Builds models with a chosen set of Linear layers quantized, from one loaded base model."""

    def __init__(self, spec, method: str, device: str):
        from infertune.models.embedding import load_encoder
        from infertune.quantize.torch_ao import linear_names
        from infertune.registry import search_methods

        methods = search_methods(device)  # declared by each quantizer's mixed-precision rescue (infertune.catalog)
        if method not in methods:
            raise ValueError(f"no mixed-precision quantizer {method!r} on {device}; have {methods or None}")
        self.method, self.device = method, device
        self.high = "bf16" if device == "cuda" else "fp32"  # what the candidate loads before quantizing
        self.reference = load_encoder(spec, "fp32", device=device)
        self.base = self.reference if self.high == "fp32" else load_encoder(spec, self.high, device=device)
        self.names = linear_names(self.base)

    def quantized(self, layers: list[str]):
        """A copy of the base model with exactly `layers` quantized."""
        if self.method == "torch.ao-dynamic":
            from infertune.quantize.torch_ao import quantize_dynamic_int8

            return quantize_dynamic_int8(self.base, layers)
        from infertune.quantize.torchao import apply

        chosen = set(layers)
        return apply(copy.deepcopy(self.base), self.method, skip=[n for n in self.names if n not in chosen])


def search(spec: dict, texts: list[str], min_cosine_mean: float, min_cosine_min: float,
           max_keep: int | None = None, max_s: float | None = None, method: str = "torch.ao-dynamic",
           device: str = "cpu") -> dict[str, Any]:
    """Return {"sensitivity": [...], "keep_high": [...], "steps": [...], ...} (all figures on `texts`).

    `max_s`: when the per-layer pass runs out of time (60% of it), the layers not yet measured count as the most
    sensitive (kept high); when the bisection does (90%), the smallest set known to hold is the answer. Either way
    the answer stays safe, only less aggressive."""
    from infertune.config import Batching, Candidate
    from infertune.engines.torch_eager import TorchEmbedder
    from infertune.models.embedding import EmbeddingSpec, load_tokenizer

    t0 = time.perf_counter()
    es = EmbeddingSpec(**spec)
    tok = load_tokenizer(es)
    qz = Quantizer(es, method, device)
    batching = Batching(kind="tokens", size=4096)
    cand = Candidate(backend="torch-eager")

    def run(model):
        return TorchEmbedder(es, tok, model, cand, device).embed(texts, batching, pooled=True)

    ref = run(qz.reference)
    names = qz.names
    sens = []
    unmeasured = []
    for n in names:
        if max_s is not None and time.perf_counter() - t0 > 0.6 * max_s:
            unmeasured.append(n)
            continue
        cos = row_cosines(ref, run(qz.quantized([n])))
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
            cos = row_cosines(ref, run(qz.quantized(q) if q else qz.base))
            memo[k] = bool(cos.mean() >= min_cosine_mean and cos.min() >= min_cosine_min)
            steps.append({"kept_high": k, "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
                          "meets_budget": memo[k]})
        return memo[k]

    def late() -> bool:
        return max_s is not None and time.perf_counter() - t0 > 0.9 * max_s

    k = smallest_holding(holds, limit, late)
    keep = order[:k]
    steps.sort(key=lambda x: x["kept_high"])
    final = next(x for x in steps if x["kept_high"] == k)
    return {"sensitivity": sens, "keep_high": keep, "steps": steps, "met_on_calibration": final["meets_budget"],
            "method": method, "device": device, "kept_dtype": qz.high, "n_layers": len(names),
            "n_calibration": len(texts), "unmeasured": len(unmeasured), "cut_short": bool(unmeasured) or late(),
            "search_s": round(time.perf_counter() - t0, 1)}


def smallest_holding(holds, limit: int, late=lambda: False) -> int:
    """The smallest k in [0, limit] with holds(k), by bisection (accuracy grows nearly monotonically with the
    layers kept high); `limit` when even that does not hold. Once `late()`, the smallest k known to hold."""
    if holds(0):
        return 0
    if late() or not holds(limit):
        return limit
    lo, hi = 0, limit  # holds(lo) is False, holds(hi) is True
    while hi - lo > 1 and not late():
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return hi
