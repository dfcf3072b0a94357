"""Verify a candidate against the fp32 reference in task terms (embeddings): per-item cosine,
nearest-neighbour agreement within the eval set, and drift of the vector norm."""

from __future__ import annotations

import numpy as np

from infertune.config import AccuracyBudget
from infertune.results import Accuracy


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of `a` with the same row of `b` (a zero row counts as cosine 0)."""
    return (_unit(a) * _unit(b)).sum(1)


def topk_overlap(ref: np.ndarray, got: np.ndarray, k: int = 10) -> float:
    """Mean |top-k(ref) ∩ top-k(got)| / k over items, neighbours searched within the set (self excluded)."""
    n = ref.shape[0]
    if n <= 1:
        return 1.0
    k = min(k, n - 1)
    r, g = _unit(ref), _unit(got)
    sr, sg = r @ r.T, g @ g.T
    np.fill_diagonal(sr, -np.inf)
    np.fill_diagonal(sg, -np.inf)
    tr = np.argpartition(-sr, k - 1, axis=1)[:, :k]
    tg = np.argpartition(-sg, k - 1, axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(tr, tg, strict=True)]))


def compare(ref: np.ndarray, got: np.ndarray, k: int = 10) -> Accuracy:
    """`ref` and `got` are pooled (un-normalised) vectors for the same items, same order."""
    if ref.shape != got.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape} vs candidate {got.shape}")
    if not np.isfinite(got).all():
        return Accuracy(cosine_mean=float("nan"), cosine_min=float("nan"), cosine_p1=float("nan"),
                        topk_overlap=0.0, norm_drift=float("nan"), n=len(ref))
    cos = row_cosines(ref, got)
    nr, ng = np.linalg.norm(ref, axis=1), np.linalg.norm(got, axis=1)
    return Accuracy(
        cosine_mean=float(cos.mean()), cosine_p1=float(np.percentile(cos, 1)), cosine_min=float(cos.min()),
        topk_overlap=topk_overlap(ref, got, k), norm_drift=float(np.mean(np.abs(ng - nr) / np.maximum(nr, 1e-12))),
        n=len(ref),
    )


def within_budget(acc: Accuracy, budget: AccuracyBudget) -> tuple[bool, str]:
    """(ok, reason). The reason names the first limit that was missed, with both numbers."""
    if acc.cosine_mean is None or not np.isfinite(acc.cosine_mean):
        return False, "outputs are not finite (NaN/inf)"
    if acc.cosine_mean < budget.min_cosine_mean:
        return False, f"mean cosine {acc.cosine_mean:.5f} < budget {budget.min_cosine_mean}"
    if acc.cosine_min is not None and acc.cosine_min < budget.min_cosine_min:
        return False, f"min cosine {acc.cosine_min:.5f} < budget {budget.min_cosine_min}"
    if budget.min_topk_overlap and (acc.topk_overlap or 0) < budget.min_topk_overlap:
        return False, f"top-10 overlap {acc.topk_overlap:.3f} < budget {budget.min_topk_overlap}"
    return True, ""
