"""Calibration batches for static quantization: real texts, tokenized by the model's own tokenizer and
padded per batch, so activation ranges are observed on the lengths and padding the model will serve.

Length-sorted packing under a token budget (as `tune` and `serve` batch) keeps padding low: ranges
measured on batches padded to 256 tokens would see mostly masked positions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from infertune.errors import InfertuneError

BUDGET = 2048  # padded tokens per calibration batch
MAX_ITEMS = 16


def calibration_batches(emb: Any, texts: Sequence[str], input_names: Iterable[str],
                        budget: int = BUDGET) -> list[dict[str, np.ndarray]]:
    """Feeds (name -> int64 array [B, T]) for the model inputs in `input_names`, one dict per batch. `emb`
    tokenizes and collates as the engine will (an engines.base.Embedder of the model's spec and tokenizer:
    the engine hands it over, so quantization does not depend on the engines)."""
    import copy

    from infertune.batching import plan_batches
    from infertune.config import Batching

    texts = [t for t in texts if t and t.strip()]
    if not texts:
        raise InfertuneError("static int8 quantization needs calibration texts; none were given "
                             "(tune passes a calibration split of the workload)")
    names = set(input_names)
    emb = copy.copy(emb)
    emb.needs_token_types = "token_type_ids" in names
    ids = emb.token_ids(texts)
    batches = plan_batches([len(x) for x in ids], Batching(kind="tokens", size=budget, max_items=MAX_ITEMS))
    out = []
    for b in batches:
        feeds = emb.collate([ids[i] for i in b])
        out.append({k: v for k, v in feeds.items() if k in names})
    return out


def summary(batches: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """What the calibration saw: items, batches and real / padded tokens."""
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(int(b["attention_mask"].size) for b in batches)
    items = sum(int(b["attention_mask"].shape[0]) for b in batches)
    return {"items": items, "batches": len(batches), "tokens": real, "padded_tokens": padded}
