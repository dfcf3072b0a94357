import numpy as np

from infertune.config import AccuracyBudget
from infertune.tasks.embedding.verify import compare, topk_overlap, within_budget


def test_identical_vectors_are_perfect():
    x = np.random.default_rng(0).normal(size=(50, 16)).astype(np.float32)
    a = compare(x, x.copy())
    assert a.cosine_min > 0.99999 and a.topk_overlap == 1.0 and a.norm_drift < 1e-6


def test_noise_lowers_cosine_and_neighbours_and_fails_budget():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 32))
    y = x + rng.normal(scale=0.5, size=x.shape)
    a = compare(x, y)
    assert a.cosine_mean < 0.95
    assert a.topk_overlap < 0.9
    ok, why = within_budget(a, AccuracyBudget())
    assert not ok and "mean cosine" in why


def test_scale_changes_norm_not_cosine():
    x = np.random.default_rng(1).normal(size=(20, 8))
    a = compare(x, 2 * x)
    assert a.cosine_min > 0.99999 and abs(a.norm_drift - 1.0) < 1e-6


def test_nan_output_is_rejected():
    x = np.ones((4, 3))
    y = x.copy()
    y[0, 0] = np.nan
    ok, why = within_budget(compare(x, y), AccuracyBudget())
    assert not ok and "finite" in why


def test_topk_overlap_detects_permuted_neighbours():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(100, 8))
    assert topk_overlap(x, x[rng.permutation(100)]) < 0.5
