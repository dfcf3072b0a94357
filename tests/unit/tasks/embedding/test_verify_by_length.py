"""Accuracy per length bucket: a drift on long texts that the pooled figures hide is caught in its bucket, the
reason names the bucket and its n, and the flags the no-winner answer prints admit the candidate."""

import numpy as np
from accuracy_helpers import EngineWorker, fake, verifying_task, words

from infertune.config import AccuracyBudget, TuneConfig
from infertune.results import Accuracy, BucketAccuracy
from infertune.tasks.embedding.verify import admitting_flags, compare, within_budget

N_LONG = 41


def _texts():
    rng = np.random.default_rng(0)
    short = [words(rng, int(n)) for n in rng.integers(4, 60, 200)]
    return short + [words(rng, int(n)) for n in rng.integers(600, 900, N_LONG)]


def test_drift_on_long_texts_only_is_rejected_and_named():
    texts, cfg = _texts(), TuneConfig()
    task = verifying_task(cfg, texts)
    ref = fake()
    _, ok, why = task.verify(EngineWorker(ref, texts), ref)  # the reference first: its vectors are the yardstick
    assert ok, why
    drift = fake(perturb="0.12", perturb_over="512")
    acc, ok, why = task.verify(EngineWorker(drift, texts), drift)
    budget = cfg.accuracy
    # the pooled figures alone pass it: the mean of 200 untouched short texts hides the long ones
    assert acc.cosine_mean >= budget.min_cosine_mean and acc.cosine_min >= budget.min_cosine_min, acc
    by = {b.bucket: b for b in acc.by_bucket}
    assert by[">512"].n == N_LONG and by[">512"].cosine_mean < budget.min_cosine_mean
    assert all(b.cosine_mean > 0.99999 for k, b in by.items() if k != ">512")
    assert sum(b.n for b in acc.by_bucket) == len(texts)
    assert (not ok and why.startswith(f"mean cosine {by['>512'].cosine_mean:.5f}")
            and f"over 512 tokens (n={N_LONG})" in why)
    # the same engine without the perturbation passes
    clean = fake(perturb="0", perturb_over="512", tag="clean")
    acc, ok, why = task.verify(EngineWorker(clean, texts), clean)
    assert ok, why
    assert acc.by_bucket and min(b.cosine_mean for b in acc.by_bucket) > 0.99999


def test_a_bucket_with_few_texts_is_shown_not_gated():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(60, 16))
    got = ref.copy()
    got[:5] += rng.normal(scale=0.2, size=(5, 16))  # the 5 long ones drift
    lengths = [600] * 5 + [20] * 55
    acc = compare(ref, got, lengths=lengths)
    long = next(b for b in acc.by_bucket if b.bucket == ">512")
    assert long.n == 5 and long.cosine_mean < 0.995
    loose = AccuracyBudget(min_cosine_min=0.5, min_cosine_mean=0.99)
    assert acc.cosine_mean >= 0.99  # pooled: passes
    assert within_budget(acc, loose) == (True, "")  # 5 < min_bucket_items (20): shown, not gated
    ok, why = within_budget(acc, loose.model_copy(update={"min_bucket_items": 5}))
    assert not ok and "(n=5)" in why


def test_topk_per_bucket_is_gated_when_enforced():
    b = [BucketAccuracy(bucket="1-16", n=30, cosine_mean=0.9999, cosine_min=0.999, topk_overlap=0.95),
         BucketAccuracy(bucket="257-512", n=25, cosine_mean=0.999, cosine_min=0.998, topk_overlap=0.6)]
    acc = Accuracy(cosine_mean=0.9995, cosine_min=0.998, topk_overlap=0.8, n=55, by_bucket=b)
    assert within_budget(acc, AccuracyBudget())[0]  # top-10 not enforced by default
    ok, why = within_budget(acc, AccuracyBudget(min_topk_overlap=0.7))
    assert not ok and why == "top-10 overlap 0.600 < budget 0.7 on texts of 257-512 tokens (n=25)"


def test_the_admitting_flags_admit_a_bucket_miss():
    texts, cfg = _texts(), TuneConfig()
    task = verifying_task(cfg, texts)
    ref, drift = fake(), fake(perturb="0.12", perturb_over="512")
    task.verify(EngineWorker(ref, texts), ref)
    acc, ok, _ = task.verify(EngineWorker(drift, texts), drift)
    assert not ok
    flags = admitting_flags(acc, cfg.accuracy).split()
    given = dict(zip(flags[::2], map(float, flags[1::2]), strict=True))
    admitted = cfg.accuracy.model_copy(update={"min_cosine_mean": given["--min-cosine"],
                                               "min_cosine_min": given["--min-cosine-min"]})
    assert within_budget(acc, admitted) == (True, "")
    assert given["--min-cosine"] <= min(b.cosine_mean for b in acc.by_bucket)
