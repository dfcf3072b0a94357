"""Greedy continuations alone against the same sent at once (tune's batch check for LLMs served by vLLM): the
agreement and the prompts that moved are recorded; a candidate is rejected under the bound, the reference never."""

from __future__ import annotations

from infertune.results import Accuracy
from infertune.tasks.causal_lm.verify import judge_batch

PROMPTS = [[1] * 5, [2] * 9, [3] * 30]
ALONE = [[7, 8, 9, 10], [7, 8, 9, 10], [7, 8, 9, 10]]


def test_the_same_answers_pass_and_a_moved_one_is_named():
    acc = Accuracy()
    assert judge_batch(acc, ALONE, ALONE, PROMPTS, 0.97) == "" and acc.greedy_batch_agreement == 1.0
    assert acc.greedy_batch_moved == []
    moved = [[7, 8, 9, 10], [7, 8, 0, 0], [7, 8, 9, 10]]
    acc = Accuracy()
    why = judge_batch(acc, ALONE, moved, PROMPTS, 0.97)
    assert acc.greedy_batch_agreement == 0.8333 and acc.greedy_batch_moved == [
        {"prompt_tokens": 9, "after_tokens": 2, "of": 4}]
    assert why.startswith("greedy continuations move when batched: agreement 0.833") and "9-token prompt" in why


def test_the_reference_is_recorded_not_judged():
    acc = Accuracy()
    assert judge_batch(acc, ALONE, [[0, 0, 0, 0]] * 3, PROMPTS, None) == ""
    assert acc.greedy_batch_agreement == 0.0 and len(acc.greedy_batch_moved) == 3
