"""The artifact's speed figure for `infertune verify` (tasks/embedding/held.py) fits the time the budget left: always
SPEED_PASSES passes (verify measures the same n: a best pass of n is biased by n), over as many of the held texts as
fit (at least MIN_SPEED_TEXTS), each pass's seconds estimated from the tuned items/s scaled by the held texts' tokens
(they come from every length bucket, so they run longer than the workload's average)."""

from types import SimpleNamespace

import pytest

from infertune.tasks.embedding import held


def test_a_pass_over_longer_held_texts_takes_longer_than_the_workload_average():
    # 4 held texts of 200 tokens against a workload averaging 50: 800 tokens at 10 items/s x 50 tokens/item
    assert held.pass_s([200] * 4, [50, 50, 50, 50], 10.0) == pytest.approx(1.6)


def test_the_speed_texts_fit_the_time_left_within_their_bounds():
    n = held.HELD_TEXTS
    assert held.speed_texts(None, 100.0) == n  # no speed known: all of them
    assert held.speed_texts(0.5, None) == n
    assert held.speed_texts(0.5, 100.0) == n  # 11 passes of 0.5 s fit
    assert held.speed_texts(4.0, 22.0) == n // 2  # 11 passes over half of them: 22 s
    assert held.speed_texts(8.0, 10.0) == held.MIN_SPEED_TEXTS  # never fewer


def test_the_tail_estimate_is_the_save_and_the_passes_over_the_fewest_texts():
    lengths = [10, 20, 40, 80, 160, 320] * 20
    task = SimpleNamespace(lengths=lengths, acc_idx=None, cfg=SimpleNamespace(seed=0))
    picked = [lengths[i] for i in held.pick_held(lengths, held.HELD_TEXTS, 0)]
    one = held.pass_s(picked, lengths, 20.0) * held.MIN_SPEED_TEXTS / held.HELD_TEXTS
    assert held.tail_s(task, 20.0) == pytest.approx(held.SAVE_S + (held.SPEED_PASSES + 1) * one)
    assert held.tail_s(task, 5.0) > held.tail_s(task, 20.0)
