import numpy as np
import pytest

from infertune.tasks.embedding.measure import summarize


def _pass(items, wall, lat):
    return {"items": items, "wall_s": wall, "latency_ms": lat, "tokens": items * 10, "padded_tokens": items * 12,
            "batches": len(lat)}


def test_items_per_s_is_the_best_pass_and_the_median_is_kept():
    # four undisturbed passes near 250 items/s and two slowed by a neighbour
    walls = [1.0, 1.02, 0.98, 1.01, 2.0, 1.9]
    m = summarize([_pass(250, w, [10.0, 20.0, 30.0]) for w in walls])
    ips = [250 / w for w in walls]
    assert m.items_per_s == pytest.approx(max(ips))
    assert m.items_per_s_median == pytest.approx(np.median(ips))
    assert m.items_per_s_median < m.items_per_s
    assert m.passes == 6 and m.items_per_s_runs == [round(x, 2) for x in ips]
    assert m.items_per_s_estimator == "best pass"


def test_slo_p99_votes_out_disturbed_passes_batch_by_batch():
    # three batches per pass; the third is the long one (80 ms undisturbed); one pass of three is slowed 3x
    quiet = [10.0, 20.0, 80.0]
    m = summarize([_pass(10, 1.0, quiet), _pass(10, 3.0, [3 * x for x in quiet]), _pass(10, 1.0, quiet)])
    assert m.slo_p99_ms == pytest.approx(np.percentile(quiet, 99))
    # the long batch's real tail stays in: it is not averaged away with the short batches
    assert m.slo_p99_ms > 75
    # a majority of disturbed passes is not voted out
    m2 = summarize([_pass(10, 3.0, [3 * x for x in quiet]), _pass(10, 3.0, [3 * x for x in quiet]),
                    _pass(10, 1.0, quiet)])
    assert m2.slo_p99_ms > 200


def test_slo_p99_falls_back_to_the_median_of_per_pass_p99_when_plans_differ():
    m = summarize([_pass(10, 1.0, [10.0, 50.0]), _pass(10, 1.0, [10.0, 20.0, 30.0]), _pass(10, 1.0, [90.0])])
    per = [np.percentile(x, 99) for x in ([10.0, 50.0], [10.0, 20.0, 30.0], [90.0])]
    assert m.slo_p99_ms == pytest.approx(np.median(per))


def test_best_pass_real_tokens_per_s_comes_from_the_pass_items_per_s_is_read_from():
    # the slowed pass ran more tokens per item (its batches ran longer texts): only the best pass counts
    fast = {**_pass(250, 1.0, [10.0]), "tokens": 3000}
    slow = {**_pass(250, 2.0, [20.0]), "tokens": 9000}
    m = summarize([slow, fast])
    assert m.items_per_s == pytest.approx(250 / 1.0)
    assert m.tokens_per_s_best == pytest.approx(3000 / 1.0)  # real tokens of the fast pass over its wall
    assert m.tokens_per_s == pytest.approx((3000 + 9000) / 3.0)  # all passes together, as before
