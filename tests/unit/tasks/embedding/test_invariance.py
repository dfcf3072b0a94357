"""Batch invariance: the batches each sampled text is embedded in (alone, every position, other neighbours, padded
behind a longer text), the worst deviation a fake engine's batch-dependent answers give, and the tolerance."""

from __future__ import annotations

import numpy as np
import pytest
from accuracy_helpers import EngineWorker, fake, verifying_task, words

from infertune.config import AccuracyBudget, Candidate, TuneConfig
from infertune.tasks.embedding import invariance as inv

LENGTHS = [4, 12, 20, 37, 44, 56, 69, 80, 104, 136, 200, 256]


def _batched(groups: list[list[int]]) -> list[list[int]]:
    return [g for g in groups if len(g) > 1]


def test_every_text_alone_once_then_at_every_position():
    groups = inv.batches(LENGTHS)
    assert groups[: len(LENGTHS)] == [[i] for i in range(len(LENGTHS))]
    assert all(len(g) == len(set(g)) for g in groups)
    for i in range(len(LENGTHS)):
        where = [g.index(i) for g in _batched(groups) if i in g]
        sizes = [len(g) for g in _batched(groups) if i in g]
        assert 0 in where, f"text {i} never first"
        assert any(w == s - 1 for w, s in zip(where, sizes, strict=True)), f"text {i} never last"
        assert any(0 < w < s - 1 for w, s in zip(where, sizes, strict=True)), f"text {i} never in the middle"


def test_neighbours_differ_and_every_text_is_padded_to_the_longest():
    groups = _batched(inv.batches(LENGTHS))
    longest = LENGTHS.index(max(LENGTHS))
    for i in range(len(LENGTHS)):
        neighbour_sets = {frozenset(g) - {i} for g in groups if i in g}
        assert len(neighbour_sets) >= 2, f"text {i} always beside the same texts"
        assert any(longest in g for g in groups if i in g), f"text {i} never padded to the longest"
    short = [g for g in groups if longest in g and min(LENGTHS[j] for j in g) <= 20]
    assert short  # the shortest texts are padded 10x and more


def test_batches_stay_cheap_and_degenerate_samples_work():
    padded = sum(len(g) * max(LENGTHS[j] for j in g) for g in inv.batches(LENGTHS))
    assert padded <= 10 * sum(LENGTHS)  # the CPU cost is the padded tokens
    assert inv.batches([5]) == [[0]]
    assert sorted(map(sorted, _batched(inv.batches([5, 9])))) == [[0, 1], [0, 1], [0, 1]]


def test_sample_spreads_over_lengths():
    lengths = list(range(1, 501))
    got = inv.sample(lengths, n=12)
    assert len(got) == 12 and min(got) == 0 and max(got) == 499
    assert inv.sample([3, 1, 2]) == [1, 2, 0]


def test_tolerance_is_a_tenth_of_the_budget_or_the_flag_and_own_drift_for_per_batch_scales():
    b = AccuracyBudget()
    assert inv.tolerance(Candidate(backend="onnxruntime"), b) == pytest.approx((1 - b.min_cosine_mean) / 10)
    assert inv.tolerance(Candidate(backend="onnxruntime"), b.model_copy(update={"batch_invariance_tol": 1e-6})) == 1e-6
    dyn = Candidate(backend="onnxruntime", precision="int8", quant="ort-dynamic")
    assert inv.tolerance(dyn, b, drift=0.01) == pytest.approx(0.04)  # 4x its own drift from the reference
    assert inv.tolerance(dyn, b, drift=1e-6) == pytest.approx(5e-4)  # never under the default
    static = Candidate(backend="onnxruntime", precision="int8", quant="ort-static")
    assert inv.tolerance(static, b, drift=0.01) == pytest.approx(5e-4)  # fixed scales: held like fp32


def _texts(n: int = 40) -> list[str]:
    rng = np.random.default_rng(0)
    return [words(rng, int(k)) for k in rng.integers(2, 120, n)]


@pytest.mark.parametrize("noise", ["0", "0.05"])
def test_verify_rejects_an_engine_whose_answers_depend_on_the_batch(noise):
    texts = _texts()
    task = verifying_task(TuneConfig(), texts)
    ref = EngineWorker(fake(), texts)
    task.verify(ref, fake())  # the reference vectors
    cand = fake(batch_noise=noise)
    acc, ok, why = task.verify(EngineWorker(cand, texts), cand)
    b = acc.batch_invariance
    assert b is not None and b.n_texts == inv.SAMPLE and b.n_batches > inv.SAMPLE
    if noise == "0":  # deterministic per text: alone and batched agree exactly
        assert ok and b.worst_deviation < 1e-6 and b.moved == [], why
    else:  # 5% of the norm per batch: 1 - cos ~ 2.5e-3 between two batches, inside the cosine budget vs reference
        assert acc.cosine_mean > 0.995
        assert not ok and "answers depend on the batch" in why and f"{b.worst_deviation:.2e}" in why
        assert b.worst_deviation > 1e-3 and len(b.moved) >= inv.SAMPLE // 2
        assert str(b.moved[0]) in why and b.worst_text_tokens in b.moved
