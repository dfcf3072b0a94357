"""Mixed precision search on the real MiniLM (small calibration set: seconds)."""

import pytest

from infertune.models.embedding import embedding_spec
from infertune.workloads.texts import load_workload


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
    # (bisection ends with k-1 measured and failing, for 0 < k < all layers)
    k = len(strict["keep_high"])
    assert 0 < k < strict["n_layers"]
    fewer = [s for s in strict["steps"] if s["kept_high"] == k - 1]
    assert fewer and not fewer[0]["meets_budget"]
    assert strict["keep_high"] == [s["layer"] for s in sens[: len(strict["keep_high"])]]
    assert len(strict["keep_high"]) > 0  # plain int8 of MiniLM misses a 0.999 budget
    assert next(s for s in strict["steps"] if s["kept_high"] == 0)["meets_budget"] is False


@pytest.mark.slow
def test_torchao_quantizer_per_layer_and_the_kept_set(texts):
    """The GPU path's quantizer (torchao), run on this CPU: one layer at a time, then all but the kept ones."""
    import torch

    from infertune.quantize.mixed import Quantizer, search

    spec = embedding_spec("minilm")
    qz = Quantizer(spec, "torchao-int8-dyn", "cpu")
    names = qz.names

    def plain(model):  # torchao swaps a quantized Linear's weight for its own tensor type
        return {n for n, m in model.named_modules() if n in names and type(m.weight) is torch.nn.Parameter}

    assert plain(qz.quantized([names[3]])) == set(names) - {names[3]}  # exactly that layer is quantized
    assert plain(qz.base) == set(names)  # and the base model is untouched
    got = search(spec.to_dict(), texts[:4], min_cosine_mean=0.9999, min_cosine_min=0.9995,
                 method="torchao-int8-dyn", device="cpu")
    assert (got["method"], got["kept_dtype"], got["n_layers"]) == ("torchao-int8-dyn", "fp32", 36)
    assert len(got["sensitivity"]) == 36 and all(0 <= s["drop"] < 0.05 for s in got["sensitivity"])
    assert got["keep_high"] == [s["layer"] for s in got["sensitivity"][: len(got["keep_high"])]]
    assert len(got["keep_high"]) > 0  # int8 of every layer misses a 0.9999 budget


def test_unknown_quantizer_is_refused():
    from infertune.quantize.mixed import Quantizer

    with pytest.raises(ValueError, match="no mixed-precision quantizer"):
        Quantizer(embedding_spec("minilm"), "torchao-fp8", "cpu")
