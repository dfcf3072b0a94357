"""The artifact's speed figure for `infertune verify` (tasks/embedding/held.py) fits the time the budget left: always
SPEED_PASSES passes (verify measures the same n: a best pass of n is biased by n), over as many of the held texts as
fit (at least MIN_SPEED_TEXTS). The artifact step times one pass over the first held texts and scales it by the held
texts' tokens (they come from every length bucket, so they run longer than the workload's average)."""

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


def _record(tmp_path, items_per_s_now: float, allow_s: float) -> list[dict]:
    """held.record on a fake task and worker whose pass over the first held texts runs at `items_per_s_now`: the
    worker's calls."""
    import json

    import numpy as np

    lengths = [10, 20, 40, 80, 160, 320] * 20
    acc = SimpleNamespace(min_cosine_mean=0.995, min_cosine_min=0.98, min_bucket_items=20)
    task = SimpleNamespace(ref_vectors=np.ones((len(lengths), 4)), lengths=lengths, acc_idx=None,
                           evals=[f"text {i}" for i in range(len(lengths))], result=None,
                           cfg=SimpleNamespace(seed=0, accuracy=acc, threads=None))
    calls = []

    class Worker:
        def call(self, cmd, timeout, batching, texts, passes):
            calls.append({"cmd": cmd, "texts": len(texts), "passes": passes})
            return {"items_per_s": items_per_s_now, "items": len(texts), "n": passes}

    art = tmp_path / "artifact"
    art.mkdir(parents=True)
    (art / "manifest.json").write_text(json.dumps({"tune": {}}))
    held.record(task, Worker(), SimpleNamespace(batching=SimpleNamespace(model_dump=dict)), art, allow_s)
    assert json.loads((art / "manifest.json").read_text())["verify"]["speed"]["items"] == calls[-1]["texts"]
    return calls


def test_the_speed_passes_are_sized_from_a_pass_timed_at_artifact_time(tmp_path):
    # first a pass over the first MIN_SPEED_TEXTS held texts, timed now; then SPEED_PASSES over as many as fit
    slow = _record(tmp_path / "slow", items_per_s_now=2.0, allow_s=60.0)
    assert slow[0] == {"cmd": "speed", "texts": held.MIN_SPEED_TEXTS, "passes": 1}
    assert slow[-1]["passes"] == held.SPEED_PASSES and slow[-1]["texts"] == held.MIN_SPEED_TEXTS
    fast = _record(tmp_path / "fast", items_per_s_now=10_000.0, allow_s=60.0)
    assert fast[-1]["texts"] == held.HELD_TEXTS
    # in between: the tokens of the held texts scale the timed pass (the first ones hold every length in turn)
    mid = _record(tmp_path / "mid", items_per_s_now=10.0, allow_s=60.0)
    assert held.MIN_SPEED_TEXTS < mid[-1]["texts"] < held.HELD_TEXTS
    # no budget: every held text, and no pass timed first
    assert [c["texts"] for c in _record(tmp_path / "none", 2.0, None)] == [held.HELD_TEXTS]
