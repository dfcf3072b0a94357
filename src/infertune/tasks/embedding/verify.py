"""Verify a candidate against the fp32 reference in task terms (embeddings): per-item cosine,
nearest-neighbour agreement within the eval set and drift of the vector norm, pooled and per length bucket,
and the user's own task metrics (task_eval.py computes them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infertune.config import AccuracyBudget
from infertune.models.embedding import row_cosines, unit
from infertune.results import Accuracy, BucketAccuracy, TaskMetric


def topk_per_item(ref: np.ndarray, got: np.ndarray, k: int = 10) -> np.ndarray:
    """|top-k(ref) ∩ top-k(got)| / k of each item, neighbours searched within the set (self excluded)."""
    n = ref.shape[0]
    if n <= 1:
        return np.ones(n)
    k = min(k, n - 1)
    r, g = unit(ref), unit(got)
    sr, sg = r @ r.T, g @ g.T
    np.fill_diagonal(sr, -np.inf)
    np.fill_diagonal(sg, -np.inf)
    tr = np.argpartition(-sr, k - 1, axis=1)[:, :k]
    tg = np.argpartition(-sg, k - 1, axis=1)[:, :k]
    return np.array([len(set(a) & set(b)) / k for a, b in zip(tr, tg, strict=True)])


def topk_overlap(ref: np.ndarray, got: np.ndarray, k: int = 10) -> float:
    """Mean |top-k(ref) ∩ top-k(got)| / k over items, neighbours searched within the set (self excluded)."""
    return float(np.mean(topk_per_item(ref, got, k))) if ref.shape[0] > 1 else 1.0


def by_bucket(cos: np.ndarray, topk: np.ndarray | None, lengths: Sequence[int]) -> list[BucketAccuracy]:
    """The figures of each token-length bucket (workloads.buckets.BUCKETS) that holds verified texts, shortest first."""
    from infertune.workloads.buckets import bucket_label, bucket_of

    if len(lengths) != len(cos):
        raise ValueError(f"{len(lengths)} lengths for {len(cos)} verified texts")
    b = np.array([bucket_of(int(n)) for n in lengths])
    out = []
    for i in sorted(set(b.tolist())):
        m = b == i
        out.append(BucketAccuracy(bucket=bucket_label(i), n=int(m.sum()), cosine_mean=float(cos[m].mean()),
                                  cosine_min=float(cos[m].min()),
                                  topk_overlap=None if topk is None else float(topk[m].mean())))
    return out


def compare(ref: np.ndarray, got: np.ndarray, k: int = 10, lengths: Sequence[int] | None = None) -> Accuracy:
    """`ref` and `got` are pooled (un-normalised) vectors for the same items, same order; `lengths` (tokens,
    untruncated) adds the figures per length bucket."""
    if ref.shape != got.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape} vs candidate {got.shape}")
    if not np.isfinite(got).all():
        return Accuracy(cosine_mean=float("nan"), cosine_min=float("nan"), cosine_p1=float("nan"),
                        topk_overlap=0.0, norm_drift=float("nan"), n=len(ref))
    cos = row_cosines(ref, got)
    top = topk_per_item(ref, got, k)
    nr, ng = np.linalg.norm(ref, axis=1), np.linalg.norm(got, axis=1)
    return Accuracy(
        cosine_mean=float(cos.mean()), cosine_p1=float(np.percentile(cos, 1)), cosine_min=float(cos.min()),
        topk_overlap=float(top.mean()) if len(ref) > 1 else 1.0,
        norm_drift=float(np.mean(np.abs(ng - nr) / np.maximum(nr, 1e-12))), n=len(ref),
        by_bucket=by_bucket(cos, top, lengths) if lengths is not None else [],
    )


def within_budget(acc: Accuracy, budget: AccuracyBudget) -> tuple[bool, str]:
    """(ok, reason). The reason names the first limit that was missed, with both numbers: pooled first, then the
    length bucket furthest under the budget, then the user's task metrics."""
    if acc.cosine_mean is None or not np.isfinite(acc.cosine_mean):
        return False, "outputs are not finite (NaN/inf)"
    if acc.cosine_mean < budget.min_cosine_mean:
        return False, f"mean cosine {acc.cosine_mean:.5f} < budget {budget.min_cosine_mean}"
    if acc.cosine_min is not None and acc.cosine_min < budget.min_cosine_min:
        return False, f"min cosine {acc.cosine_min:.5f} < budget {budget.min_cosine_min}"
    if budget.min_topk_overlap and (acc.topk_overlap or 0) < budget.min_topk_overlap:
        return False, f"top-10 overlap {acc.topk_overlap:.3f} < budget {budget.min_topk_overlap}"
    if (why := bucket_miss(acc.by_bucket, budget)) is not None:
        return False, why
    for m in acc.task:
        if m.max_drop is not None and (m.drop is None or m.drop > m.max_drop):
            return False, task_miss(m)
    return True, ""


def bucket_miss(buckets: Sequence[BucketAccuracy], budget: AccuracyBudget) -> str | None:
    """The reason of the worst length bucket (with enough texts) under the budget, or None."""
    gated = [b for b in buckets if b.n >= budget.min_bucket_items]
    low = [b for b in gated if b.cosine_mean is not None and b.cosine_mean < budget.min_cosine_mean]
    if low:
        b = min(low, key=lambda x: x.cosine_mean)
        return (f"mean cosine {b.cosine_mean:.5f} < budget {budget.min_cosine_mean} on texts {_tokens(b.bucket)} "
                f"(n={b.n})" + _also(low, b))
    if budget.min_topk_overlap:
        low = [b for b in gated if b.topk_overlap is not None and b.topk_overlap < budget.min_topk_overlap]
        if low:
            b = min(low, key=lambda x: x.topk_overlap)
            return (f"top-10 overlap {b.topk_overlap:.3f} < budget {budget.min_topk_overlap} on texts "
                    f"{_tokens(b.bucket)} (n={b.n})" + _also(low, b))
    return None


def _tokens(bucket: str) -> str:
    return f"over {bucket[1:]} tokens" if bucket.startswith(">") else f"of {bucket} tokens"


def _also(low: Sequence[BucketAccuracy], worst: BucketAccuracy) -> str:
    rest = [b.bucket for b in low if b is not worst]
    return f"; also under it: {', '.join(rest)}" if rest else ""


def task_miss(m: TaskMetric) -> str:
    if m.value is None or m.reference is None:
        return f"{m.name} ({m.source}) gave no figure" + (f": {m.error}" if m.error else "")
    n = f", n={m.n} queries" if m.n else ""
    return (f"{m.name} {m.value:.4g} vs reference {m.reference:.4g} ({m.source}{n}): "
            f"{'drop' if m.higher_is_better else 'rise'} {m.drop:.4g} > budget {m.max_drop:g}")


def admitting_flags(acc: Accuracy, budget: AccuracyBudget) -> str:
    """The accuracy flags under which `acc` passes: the lowest gated mean cosine (pooled or a length bucket's),
    the minimum, and the task metrics' drops."""
    import math

    floor = lambda x: math.floor(x * 1e4) / 1e4  # noqa: E731
    ceil = lambda x: math.ceil(x * 1e4) / 1e4  # noqa: E731
    means = [acc.cosine_mean or 0] + [b.cosine_mean for b in acc.by_bucket
                                      if b.n >= budget.min_bucket_items and b.cosine_mean is not None]
    flags = f"--min-cosine {floor(min(means)):g} --min-cosine-min {floor(acc.cosine_min or 0):g}"
    if budget.min_topk_overlap:
        tops = [acc.topk_overlap or 0] + [b.topk_overlap for b in acc.by_bucket
                                          if b.n >= budget.min_bucket_items and b.topk_overlap is not None]
        flags += f" --min-topk-overlap {floor(min(tops)):g}"
    drops = {"recall": [], "eval": []}
    for m in acc.task:
        if m.max_drop is not None and m.drop is not None and m.drop > m.max_drop:
            drops["recall" if m.source == "eval-pairs" else "eval"].append(m.drop)
    for kind, flag in (("recall", "--max-recall-drop"), ("eval", "--max-eval-drop")):
        if drops[kind]:
            flags += f" {flag} {ceil(max(drops[kind])):g}"
    return flags


ACCURACY_ITEMS = 384  # texts verification embeds: enough for a 1e-4 cosine gate, bounded on a long workload


def accuracy_subset(lengths: list[int], seed: int = 0) -> list[int] | None:
    """Positions in the eval split that every candidate is verified on (None: all of it). The split is cut to
    ACCURACY_ITEMS by length bucket, with every text at or over the split's 95th-percentile length kept (up to a
    quarter of the subset): precision drifts on long texts first. Why a subset: on a GPU the eval split is up to
    5,000 texts, and the fp32 reference and the naive baseline embedding all of it took most of a 180 s budget
    on a long-text workload (Qwen3-Embedding-0.6B shape, p99 756 tokens)."""
    import numpy as np

    from infertune.workloads.buckets import stratified_subsample

    n = len(lengths)
    if n <= ACCURACY_ITEMS:
        return None
    p95 = float(np.percentile(lengths, 95))
    tail = sorted((i for i in range(n) if lengths[i] >= p95), key=lambda i: -lengths[i])[:ACCURACY_ITEMS // 4]
    kept = set(tail)
    rest = [i for i in range(n) if i not in kept]
    return sorted(tail + stratified_subsample(rest, lengths, ACCURACY_ITEMS - len(tail), seed))
