"""Mixed precision search on the real MiniLM (small calibration set: seconds)."""

import pytest

from infertune.models.embedding import embedding_spec
from infertune.workload import load_workload


@pytest.fixture(scope="module")
def texts():
    return load_workload(None).items[:6]


@pytest.mark.slow
def test_sensitivity_then_smallest_keep_set_meets_budget(texts):
    from infertune.quantize.mixed import search

    spec = embedding_spec("minilm").to_dict()
    strict = search(spec, texts, min_cosine_mean=0.999, min_cosine_min=0.998)
    sens = strict["sensitivity"]
    assert len(sens) == strict["n_layers"] == 36
    assert [s["drop"] for s in sens] == sorted((s["drop"] for s in sens), reverse=True)
    chosen = next(s for s in strict["steps"] if s["kept_high"] == len(strict["keep_high"]))
    assert chosen["meets_budget"] and chosen["cosine_mean"] >= 0.999
    # keeping one layer fewer (the least sensitive of the kept ones) must break the budget
    fewer = [s for s in strict["steps"] if s["kept_high"] == len(strict["keep_high"]) - 1]
    assert not fewer or not fewer[0]["meets_budget"]
    assert strict["keep_high"] == [s["layer"] for s in sens[: len(strict["keep_high"])]]
    assert len(strict["keep_high"]) > 0  # plain int8 of MiniLM misses a 0.999 budget
    assert next(s for s in strict["steps"] if s["kept_high"] == 0)["meets_budget"] is False
