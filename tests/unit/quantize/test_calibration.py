"""Calibration batches: real lengths, padded per batch, only the inputs the model takes."""

import pytest

from infertune.engines.base import Embedder
from infertune.errors import InfertuneError
from infertune.models.embedding import EmbeddingSpec
from infertune.quantize.calibration import calibration_batches, summary


class WordTokenizer:
    """One token per word plus [CLS]/[SEP], like a BERT tokenizer would count them."""

    pad_token_id = 0

    def __call__(self, texts, truncation=True, max_length=None):
        ids = [[101] + [1000 + len(w) for w in t.split()] + [102] for t in texts]
        return {"input_ids": [x[:max_length] if truncation and max_length else x for x in ids]}


SPEC = EmbeddingSpec(name="words", path=".", max_length=16, dim=4)


def test_batches_are_length_sorted_and_padded_per_batch():
    texts = ["a"] * 6 + ["b " * 30] * 2 + ["", "   "]
    batches = calibration_batches(Embedder(SPEC, WordTokenizer()), texts, ["input_ids", "attention_mask"], budget=32)
    assert all(set(b) == {"input_ids", "attention_mask"} for b in batches)  # no token_type_ids asked for
    widths = [b["input_ids"].shape[1] for b in batches]
    assert widths[0] == 16 and widths[-1] == 3  # long ones truncated to max_length, short ones stay short
    s = summary(batches)
    assert s["items"] == 8  # blank texts dropped
    assert s["tokens"] == 6 * 3 + 2 * 16 and s["padded_tokens"] == s["tokens"]


def test_no_texts_is_a_user_error():
    with pytest.raises(InfertuneError, match="calibration texts"):
        calibration_batches(Embedder(SPEC, WordTokenizer()), ["", " "], ["input_ids", "attention_mask"])
