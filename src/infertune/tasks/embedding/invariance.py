"""Batch invariance (embeddings): a text's vector must not depend on what it was batched with. A sample of eval texts,
spread over their lengths, is embedded alone (batches of one) and inside mixed batches: other neighbours (short
and long), every position (first, middle, last) and padded behind a much longer text. Each text's worst cosine
deviation (1 - cos) between its alone vector and any batched one is what the candidate is judged on.

The worker runs it (`run`) with the candidate's own engine and batching path: `Embedder.embed` of each batch as
given (fixed batching: one forward of exactly those texts in that order), so the engine `serve` runs (CUDA graphs,
packed batches on a GPU) is the one checked."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from infertune.results import BatchInvariance

SAMPLE = 8  # texts checked per candidate: each alone, then in mixed batches (a third less work than 12)
GROUP = 3  # texts per mixed batch (the stride groups add the longest text)

# Default tolerance on 1 - cos(alone, batched), relative to the budget's room: a tenth of what the mean cosine may lose
# (0.995 -> 5e-4). A deterministic engine's batched and alone vectors differ only by summation order (another GEMM
# tiling, another padded width): ~1e-7 in fp32, ~1e-5..1e-4 in bf16/fp16 (relative error ~1e-3 per element, 1 - cos
# about half its square summed; MiniLM, torch eager bf16: 5e-5). So 16-bit engines pass with 10x to spare, while an
# answer that moves with its batch by a tenth of the accuracy budget is a bug the reference comparison (one
# batching) cannot see.
BUDGET_SHARE = 10
PER_BATCH_DRAWS = 4.0  # engines whose activation scales come from the batch: tolerance() says why


def tolerance(candidate: Any, budget: Any, drift: float | None = None) -> float:
    """The bound on a candidate's worst deviation: --batch-invariance-tol, default a tenth of the mean cosine's room.

    An engine that quantizes activations with scales computed over the whole batch (ORT dynamic int8, torch.ao
    dynamic: per-tensor ranges, padding rows included) answers differently beside other texts by design: on MiniLM
    (AVX2) a text moved up to 3.5e-2 (ORT) and 1.1e-1 (torch.ao) between alone and batched. Its alone and batched
    vectors are two roundings of the same kind as the one verified against the reference, so such an engine is held to
    PER_BATCH_DRAWS x its own worst `drift` (1 - min cosine vs the reference): two draws, each as far as the verified
    one (their distance up to the sum), and the worst over many batches against the worst in one batching. The
    accuracy budget still judges the drift itself; a batch effect beyond the engine's own rounding is rejected."""
    from infertune.catalog import QUANTS

    tol = budget.batch_invariance_tol or max(1e-6, (1 - budget.min_cosine_mean) / BUDGET_SHARE)
    q = QUANTS.get(getattr(candidate, "quant", None) or "")
    if q is None or not q.per_batch_scales or drift is None or not np.isfinite(drift):
        return tol
    return max(tol, PER_BATCH_DRAWS * drift)


def check(task: Any, worker: Any, candidate: Any, drift: float | None = None) -> tuple[BatchInvariance, bool, str]:
    """A sample of the verified texts, alone and batched, in the candidate's worker (tasks/embedding/task.py);
    `drift`: the candidate's 1 - min cosine vs the reference (tolerance says why)."""
    idx = task.acc_idx if task.acc_idx is not None else list(range(len(task.lengths)))
    pick = [idx[i] for i in sample([task.lengths[j] for j in idx], seed=task.cfg.seed)]
    lengths = [int(task.lengths[i]) for i in pick]
    got = worker.call("invariance", subset=pick, lengths=lengths)
    return judge(got, lengths, tolerance(candidate, task.cfg.accuracy, drift))


def sample(lengths: Sequence[int], n: int = SAMPLE, seed: int = 0) -> list[int]:
    """Positions of up to `n` texts spread over `lengths` (evenly through the length order; the shortest and the
    longest always), ties broken by a seeded shuffle."""
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: lengths[i])
    if len(order) <= n:
        return order
    picks = np.linspace(0, len(order) - 1, n).round().astype(int)
    return [order[p] for p in sorted(set(picks.tolist()))]


def batches(lengths: Sequence[int]) -> list[list[int]]:
    """The batches to embed, as positions in `lengths` (the sample): every text alone; texts of similar length in
    groups of GROUP, in each rotation, so each text sits first, in the middle and last (little padding: cheap);
    then the others dealt by stride through the length order (a short, a middling and a long text) with the
    longest text before or behind them: other neighbours, and every text padded to the longest. The CPU cost is
    the padded tokens: about 8x the sample's own."""
    n = len(lengths)
    order = sorted(range(n), key=lambda i: (lengths[i], i))
    out: list[list[int]] = [[i] for i in range(n)]
    if n < 2:
        return out
    near = [order[j:j + GROUP] for j in range(0, n, GROUP)]
    if len(near[-1]) < 2:  # a lone last text joins the group before it
        near[-2:] = [near[-2] + near[-1]]
    for g in near:
        out += [g[r:] + g[:r] for r in range(len(g))]
    rest, longest = order[:-1], order[-1]
    k = -(-len(rest) // GROUP)
    for j in range(k):
        g = rest[j::k]
        out.append([longest, *g] if j % 2 else [*g, longest])
    return out


def deviations(alone: np.ndarray, groups: Sequence[Sequence[int]], got: Sequence[np.ndarray]) -> np.ndarray:
    """Each text's worst 1 - cos between its alone vector (`alone[i]`) and every vector it got inside a batch."""
    a = alone / np.maximum(np.linalg.norm(alone, axis=1, keepdims=True), 1e-30)
    worst = np.zeros(len(alone))
    for g, vec in zip(groups, got, strict=True):
        if len(g) < 2:
            continue
        v = vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-30)
        dev = 1 - (a[list(g)] * v).sum(1)
        dev = np.where(np.isfinite(dev), dev, np.inf)
        np.maximum.at(worst, list(g), dev)
    return worst


def run(emb: Any, texts: Sequence[str], lengths: Sequence[int]) -> dict[str, Any]:
    """Worker side: embed `texts` (the sample) alone and in the mixed batches; each text's worst deviation."""
    import time

    from infertune.config import Batching

    t0 = time.perf_counter()
    groups = batches(lengths)
    got = [emb.embed([texts[i] for i in g], Batching(kind="fixed", size=len(g)), pooled=True) for g in groups]
    alone = np.concatenate([v for g, v in zip(groups, got, strict=True) if len(g) == 1])
    worst = deviations(alone, groups, got)
    return {"worst": worst.tolist(), "n_batches": len(groups) - len(texts), "seconds": time.perf_counter() - t0}


def judge(got: dict[str, Any], lengths: Sequence[int], tol: float) -> tuple[BatchInvariance, bool, str]:
    """The record, whether it is within `tol`, and the reason naming the deviation and the lengths that moved."""
    worst = np.asarray(got["worst"], dtype=float)
    i = int(np.argmax(worst))
    moved = sorted(int(lengths[j]) for j in np.flatnonzero(~(worst <= tol)))
    rec = BatchInvariance(worst_deviation=float(worst[i]), n_texts=len(worst), n_batches=int(got["n_batches"]),
                          worst_text_tokens=int(lengths[i]), tolerance=tol, moved=moved,
                          seconds=round(float(got.get("seconds", 0.0)), 3))
    if not moved:
        return rec, True, ""
    return rec, False, (f"answers depend on the batch: a text of {lengths[i]} tokens moved by 1 - cos "
                        f"{worst[i]:.2e} between alone and batched (> --batch-invariance-tol {tol:.1e}); "
                        f"{len(moved)} of {len(worst)} texts moved, of {_lengths(moved)} tokens")


def _lengths(moved: list[int]) -> str:
    return ", ".join(map(str, moved[:8])) + (f" (+{len(moved) - 8} more)" if len(moved) > 8 else "")
