"""Does an exported model give the original's vectors on the user's inputs, at every length?

Each checked input's reference is the original model run on that input alone (no padding at all), and the exported
model runs padded batches of inputs from the same length bucket, so the check covers the dynamic axes and the
padding path: a graph traced with a fixed sequence length, or pooling that reads pad positions, fails in the
buckets where it goes wrong. The bound is 0.9999 per input (an fp32 export is lossless up to reordered sums).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from infertune.models.embedding import row_cosines
from infertune.workloads.buckets import bucket_label, bucket_of

MIN_COSINE = 0.9999
PER_BUCKET = 48  # inputs checked per length bucket (the first ones of the workload in each)
BATCH = 16  # inputs per padded batch of the exported model


class BucketCheck(BaseModel):
    bucket: str  # token lengths, e.g. "17-32"
    items: int
    batches: int
    min_cosine: float
    mean_cosine: float
    longest: int  # tokens (after truncation to the model's limit)


def pick(ids: Sequence[Sequence[int]], per_bucket: int = PER_BUCKET) -> dict[int, list[int]]:
    """bucket -> indices of the inputs checked there (first `per_bucket` distinct inputs, in workload order)."""
    seen: set[tuple[int, ...]] = set()
    out: dict[int, list[int]] = {}
    for i, x in enumerate(ids):
        key = tuple(x)
        b = bucket_of(len(x))
        if key in seen or len(out.get(b, [])) >= per_bucket:
            continue
        seen.add(key)
        out.setdefault(b, []).append(i)
    return dict(sorted(out.items()))


def check_buckets(ids: Sequence[Sequence[int]], reference: Callable[[Sequence[int]], np.ndarray],
                  exported: Callable[[list[Sequence[int]]], np.ndarray], per_bucket: int = PER_BUCKET,
                  batch: int = BATCH) -> list[BucketCheck]:
    """Per-bucket cosine of `exported` (padded batches) against `reference` (one input at a time)."""
    out = []
    for b, idx in pick(ids, per_bucket).items():
        ref = np.stack([np.asarray(reference(ids[i]), dtype=np.float32).reshape(-1) for i in idx])
        got = []
        for s in range(0, len(idx), batch):
            got.append(np.asarray(exported([ids[i] for i in idx[s:s + batch]]), dtype=np.float32))
        cos = row_cosines(np.concatenate(got), ref)
        out.append(BucketCheck(bucket=bucket_label(b), items=len(idx), batches=len(got),
                               min_cosine=float(cos.min()), mean_cosine=float(cos.mean()),
                               longest=max(len(ids[i]) for i in idx)))
    return out


def torch_reference(model: Any, pooling: str, names: Sequence[str], token_types: bool,
                    call: str = "hf") -> Callable[[Sequence[int]], np.ndarray]:
    """One input alone through the original: a Hugging Face body (`call="hf"`, keyword inputs, last_hidden_state)
    or a TorchScript module (`call="script"`, positional inputs in `names` order, first output)."""
    import torch

    from infertune.models.embedding import pool

    def run(x: Sequence[int]) -> np.ndarray:
        ids = torch.tensor([list(x)], dtype=torch.long)
        feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if token_types:
            feeds["token_type_ids"] = torch.zeros_like(ids)
        with torch.inference_mode():
            if call == "hf":
                h = model(**feeds).last_hidden_state
            else:
                h = model(*[feeds[n] for n in names])
                h = h[0] if isinstance(h, tuple | list) else h
            v = pool(h, feeds["attention_mask"], pooling) if h.dim() == 3 else h.float()
        return v.numpy()[0]

    return run
