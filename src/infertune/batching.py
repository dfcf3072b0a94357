"""Group items into forward passes. Shared by `tune` (measurement) and `serve` (dynamic batching).

Two policies (see config.Batching):
- fixed:  `size` items per batch, in the given order (what a naive loop does);
- tokens: sort by length (longest first), then pack items while
          n_items x longest_len <= budget (padded tokens, the quantity compute scales with).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from infertune.config import Batching

if TYPE_CHECKING:
    import numpy as np


def plan_batches(lengths: Sequence[int], policy: Batching, max_padding: float | None = None) -> list[list[int]]:
    """Return batches as lists of indices into `lengths`. Every index appears exactly once.

    `max_padding` (tokens policy): a batch also closes when the next item would push its padded/real token
    ratio above this. Where compute scales with padded tokens (CPU), a batch that pads a 40-token item to
    256 costs more than running the two apart."""
    n = len(lengths)
    if policy.kind == "fixed":
        return [list(range(i, min(i + policy.size, n))) for i in range(0, n, policy.size)]
    order = sorted(range(n), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = real = 0
    for i in order:
        length = max(1, int(lengths[i]))
        new_longest = max(longest, length)
        full = (len(cur) + 1) * new_longest > policy.size or len(cur) >= policy.max_items
        padded = max_padding is not None and (len(cur) + 1) * new_longest > max_padding * (real + length)
        if cur and (full or padded):
            batches.append(cur)
            cur, new_longest, real = [], length, 0
        cur.append(i)
        longest = new_longest
        real += length
    if cur:
        batches.append(cur)
    return batches


def padded_tokens(lengths: Sequence[int], batches: list[list[int]]) -> int:
    return sum(len(b) * max(lengths[i] for i in b) for b in batches if b)


def round_up(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def pad_length(batch: dict[str, np.ndarray], multiple: int, pad_id: int) -> dict[str, np.ndarray]:
    """Pad a collated batch's sequence axis up to a multiple of `multiple` (input_ids with pad_id, every
    other array, the attention mask included, with 0: masked, so outputs do not change). Fewer distinct
    shapes: CUDA graphs get reused, CPU kernel caches stay small."""
    import numpy as np

    pad = (-batch["input_ids"].shape[1]) % multiple
    if not pad:
        return batch
    return {k: np.pad(v, ((0, 0), (0, pad)), constant_values=(pad_id if k == "input_ids" else 0))
            for k, v in batch.items()}
