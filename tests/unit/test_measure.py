import numpy as np
import pytest

from infertune.measure import summarize


def _pass(items, wall, lat):
    return {"items": items, "wall_s": wall, "latency_ms": lat, "tokens": items * 10, "padded_tokens": items * 12,
            "batches": len(lat)}


def test_items_per_s_is_the_upper_quartile_and_the_median_is_kept():
    # four undisturbed passes near 250 items/s and two slowed by a neighbour
    walls = [1.0, 1.02, 0.98, 1.01, 2.0, 1.9]
    m = summarize([_pass(250, w, [10.0, 20.0, 30.0]) for w in walls])
    ips = [250 / w for w in walls]
    assert m.items_per_s == pytest.approx(np.percentile(ips, 75))
    assert m.items_per_s_median == pytest.approx(np.median(ips))
    assert m.items_per_s_median < m.items_per_s <= max(ips)
    assert m.passes == 6 and m.items_per_s_runs == [round(x, 2) for x in ips]
    assert "p75" in m.items_per_s_estimator


def test_slo_p99_is_the_lower_quartile_of_per_pass_p99():
    m = summarize([_pass(10, 1.0, [10.0] * 99 + [x]) for x in (50.0, 60.0, 500.0)])
    per = [float(np.percentile([10.0] * 99 + [x], 99)) for x in (50.0, 60.0, 500.0)]
    assert m.slo_p99_ms == pytest.approx(np.percentile(per, 25))
    assert min(per) <= m.slo_p99_ms < np.median(per)
