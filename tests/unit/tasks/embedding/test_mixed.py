"""Mixed precision search on the real MiniLM (small calibration set: seconds)."""

import pytest

from infertune.models.embedding import embedding_spec
from infertune.workloads.texts import load_workload


@pytest.fixture(scope="module")
def texts():
    return load_workload(None).items[:6]


@pytest.mark.slow
def test_sensitivity_then_smallest_keep_set_meets_budget(texts):
    from infertune.tasks.embedding.mixed import search

    spec = embedding_spec("minilm").to_dict()
    strict = search(spec, texts, min_cosine_mean=0.999, min_cosine_min=0.998)
    sens = strict["sensitivity"]
    assert len(sens) == strict["n_layers"] == 36
    assert [s["drop"] for s in sens] == sorted((s["drop"] for s in sens), reverse=True)
    # the most sensitive layers are the ones kept, in that order
    k = len(strict["keep_high"])
    assert 0 < k < strict["n_layers"]  # plain int8 of MiniLM misses a 0.999 budget; all-int8-but-some meets it
    assert strict["keep_high"] == [s["layer"] for s in sens[:k]]
    # measured here, not read from the search's own steps: quantizing all but the kept layers meets the budget,
    # and keeping one fewer (the least sensitive of them) breaks it
    mean, low = _cosines_keeping(spec, texts, strict["keep_high"])
    assert mean >= 0.999 and low >= 0.998, (mean, low)
    mean, low = _cosines_keeping(spec, texts, strict["keep_high"][:-1])
    assert mean < 0.999 or low < 0.998, (mean, low)


def _cosines_keeping(spec: dict, texts: list[str], keep: list[str]) -> tuple[float, float]:
    """Mean and worst cosine against fp32 of MiniLM with every Linear int8 (torch.ao dynamic) except `keep`."""
    from infertune.config import Batching, Candidate
    from infertune.engines.torch_eager import TorchEmbedder
    from infertune.models.embedding import EmbeddingSpec, load_tokenizer, row_cosines
    from infertune.tasks.embedding.mixed import Quantizer

    es = EmbeddingSpec(**spec)
    tok = load_tokenizer(es)
    qz = Quantizer(es, "torch.ao-dynamic", "cpu")

    def run(model):
        return TorchEmbedder(es, tok, model, Candidate(backend="torch-eager"), "cpu").embed(
            texts, Batching(kind="tokens", size=4096), pooled=True)

    cos = row_cosines(run(qz.reference), run(qz.quantized([n for n in qz.names if n not in set(keep)])))
    return float(cos.mean()), float(cos.min())


@pytest.mark.slow
def test_torchao_quantizer_per_layer_and_the_kept_set(texts):
    """The GPU path's quantizer (torchao), run on this CPU: one layer at a time, then all but the kept ones."""
    import torch

    from infertune.tasks.embedding.mixed import Quantizer, search

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
    from infertune.tasks.embedding.mixed import Quantizer

    with pytest.raises(ValueError, match="no mixed-precision quantizer"):
        Quantizer(embedding_spec("minilm"), "torchao-fp8", "cpu")
