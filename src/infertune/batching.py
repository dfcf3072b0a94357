"""Group items into forward passes. Shared by `tune` (measurement) and `serve` (dynamic batching).

Two policies (see config.Batching):
- fixed:  `size` items per batch, in the given order (what a naive loop does);
- tokens: sort by length (longest first), then pack items while
          n_items x longest_len <= budget (padded tokens, the quantity compute scales with).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from infertune.config import Batching

if TYPE_CHECKING:
    import numpy as np

# batches launched and not yet collected (Embedder.launch / collect), in serve's engine, the ceiling and tune's GPU
# pass: one on the device, one queued behind it (double buffering); one thread doing collate -> forward -> wait ->
# answer left the GPU half idle (docs/measurements/2026-12-01-h200-engine-overlap)
ASYNC_DEPTH = 2
# the server pads lengths to a multiple of this (pad_length): a server that sees every length 1..N keeps
# kernels for every shape, and memory grows with them (serve/memory.py); eight times fewer shapes costs
# < 4 padded tokens per row on average
PAD_MULTIPLE = 8


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


def plan_packed(lengths: Sequence[int], budget: int, max_items: int) -> list[list[int]]:
    """Batches for an engine that runs them padding-free (a batch costs its real tokens): in arrival order, as
    few as the token budget and item cap allow, split evenly (no small remainder batch)."""
    n = len(lengths)
    if n == 0:
        return []
    total = sum(max(1, int(x)) for x in lengths)
    k = max(-(-total // max(budget, 1)), -(-n // max(max_items, 1)))
    target = total / k
    batches: list[list[int]] = []
    cur: list[int] = []
    tokens = 0
    for i, length in enumerate(lengths):
        length = max(1, int(length))
        over = tokens + length > budget or len(cur) >= max_items
        if cur and (over or (tokens >= target and len(batches) < k - 1)):
            batches.append(cur)
            cur, tokens = [], 0
        cur.append(i)
        tokens += length
    batches.append(cur)
    return batches


def fit_line(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(a, b) of y = a + b * x, robust to outliers (Theil-Sen): batch time against padded tokens."""
    import numpy as np

    x = np.asarray([p[0] for p in pairs], dtype=float)
    y = np.asarray([p[1] for p in pairs], dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return 0.0, float(np.median(y / np.maximum(x, 1)))
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    keep = dx != 0
    b = max(float(np.median((y[j] - y[i])[keep] / dx[keep])), 1e-12)
    return float(np.median(y - b * x)), b


def plan_by_cost(lengths: Sequence[int], policy: Batching, a: float, b: float,
                 rows: Callable[[int], int] | None = None) -> list[list[int]]:
    """Batches that minimise the predicted time, sum over batches of a + b * padded tokens: items of equal
    length form groups (longest first), and a dynamic program over the group boundaries (a few dozen
    groups with lengths rounded to 8) decides where one more batch (a) costs less than the padding the
    longer batch would add (b per token). Each batch is then cut to the token budget and item cap.
    `rows`: the rows a batch of n items really runs (an engine that rounds them up, e.g. CUDA graph buckets)."""
    n = len(lengths)
    order = sorted(range(n), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[groups[-1][0]] == lengths[i]:
            groups[-1].append(i)
        else:
            groups.append([i])
    k = len(groups)
    count = [0] * (k + 1)
    for g in range(k):
        count[g + 1] = count[g] + len(groups[g])
    best = [0.0] + [float("inf")] * k
    cut = [0] * (k + 1)
    for j in range(1, k + 1):
        for i in range(j):
            m = count[j] - count[i]
            c = best[i] + a + b * max(1, lengths[groups[i][0]]) * (rows(m) if rows else m)
            if c < best[j]:
                best[j], cut[j] = c, i
    segments: list[list[int]] = []
    j = k
    while j > 0:
        segments.append([x for g in groups[cut[j]:j] for x in g])
        j = cut[j]
    out: list[list[int]] = []
    for seg in reversed(segments):  # longest first, like plan_batches
        out += [[seg[x] for x in sub] for sub in plan_batches([lengths[i] for i in seg], policy)]
    return out


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


def bucket_rows(n: int) -> int:
    """Batch rows rounded up to one of few sizes (<= 12.5% filler above 64 rows, <= 8 rows below)."""
    if n <= 8:
        return n
    if n <= 64:
        return -(-n // 8) * 8
    step = 1 << max(3, (n - 1).bit_length() - 4)
    return -(-n // step) * step
