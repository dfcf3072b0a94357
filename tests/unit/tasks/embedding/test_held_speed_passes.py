"""The artifact's speed figure for `infertune verify` (tasks/embedding/held.py) fits the time the budget left: as many
timed passes over the held texts as fit, between MIN_SPEED_PASSES and SPEED_PASSES, each pass's seconds estimated from
the tuned items/s scaled by the held texts' tokens (they come from every length bucket, so they run longer)."""

from types import SimpleNamespace

import pytest

from infertune.tasks.embedding import held


def test_a_pass_over_longer_held_texts_takes_longer_than_the_workload_average():
    # 4 held texts of 200 tokens against a workload averaging 50: 800 tokens at 10 items/s x 50 tokens/item
    assert held.pass_s([200] * 4, [50, 50, 50, 50], 10.0) == pytest.approx(1.6)


def test_passes_fit_the_time_left_within_their_bounds():
    assert held.speed_passes(None, 100.0) == held.SPEED_PASSES  # no speed known: the default
    assert held.speed_passes(0.5, None) == held.SPEED_PASSES
    assert held.speed_passes(0.5, 100.0) == held.SPEED_PASSES  # plenty of time
    assert held.speed_passes(3.0, 18.0) == 5  # 6 passes of 3 s fit, one of them the warm-up
    assert held.speed_passes(8.0, 10.0) == held.MIN_SPEED_PASSES  # never fewer: verify judges n and spread


def test_the_tail_estimate_is_the_save_and_the_fewest_passes_with_their_warm_up():
    lengths = [10, 20, 40, 80, 160, 320] * 20
    task = SimpleNamespace(lengths=lengths, acc_idx=None, cfg=SimpleNamespace(seed=0))
    picked = [lengths[i] for i in held.pick_held(lengths, held.HELD_TEXTS, 0)]
    one = held.pass_s(picked, lengths, 20.0)
    assert held.tail_s(task, 20.0) == pytest.approx(held.SAVE_S + (held.MIN_SPEED_PASSES + 1) * one)
    assert held.tail_s(task, 5.0) > held.tail_s(task, 20.0)
