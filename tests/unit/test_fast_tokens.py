"""fast_tokens: the fast encoder gives transformers' ids, is checked while it runs, and falls back when it differs."""

from __future__ import annotations

import pytest

from infertune.fast_tokens import CHECK_EVERY, PROBES, TokenIds, fast_encoder, from_recipe, reference_ids


@pytest.fixture(scope="module")
def minilm():
    from infertune.engines.embedding_artifact import load_model

    return load_model("minilm", "cpu")


@pytest.fixture(scope="module")
def texts():
    from infertune.workloads.texts import load_workload

    return load_workload(None).items


def test_the_fast_encoder_gives_transformers_ids_on_the_workload_and_probes(minilm, texts):
    pytest.importorskip("tokie")
    enc = fast_encoder(minilm.tokenizer, minilm.spec.max_length)
    assert enc is not None and enc.name == "tokie" and enc.holds_gil
    want = reference_ids(minilm.tokenizer, texts + list(PROBES), minilm.spec.max_length)
    assert enc(texts + list(PROBES)) == want
    assert enc.fallback is None and enc.checked >= len(want) // CHECK_EVERY


def test_a_recipe_rebuilds_the_same_encoder(minilm, texts):
    enc = minilm.token_encoder()
    again = from_recipe(enc.recipe)
    assert again.name == enc.name and again(texts[:200]) == minilm.token_ids(texts[:200])


class _Wrong:
    """A tokenizer that drops the last id of texts longer than 40 characters (a reimplementation's bug)."""

    def __init__(self, rust):
        self.rust = rust

    def encode(self, text):
        ids = self.rust.encode(text).ids

        class E:
            pass

        e = E()
        e.ids = ids[:-1] if len(text) > 40 else ids
        return e


def test_a_difference_found_while_running_switches_to_the_rust_tokenizer(minilm, texts, caplog):
    """The run-time check catches what no probe covered: the call that found it already answers with the Rust
    tokenizer's ids, every later call too, and describe() says why."""
    rust_enc = fast_encoder(minilm.tokenizer, minilm.spec.max_length)
    enc = TokenIds(rust_enc.rust, minilm.spec.max_length, "right", tk=_Wrong(rust_enc.rust), check_every=10)
    long = [t for t in texts if len(t) > 40][:100]
    want = reference_ids(minilm.tokenizer, long, minilm.spec.max_length)
    assert enc(long[:5]) == want[:5]  # its first text is checked (one in 10), differs, and the call is redone
    assert enc.fallback and "differed" in enc.fallback
    assert [row for i in range(5, 100, 7) for row in enc(long[i:i + 7])] == want[5:]
    assert enc.name == "tokenizers" and not enc.holds_gil and enc.recipe[0] == "tokenizers"
    assert enc.describe()["fallback"] == enc.fallback


def test_one_text_in_check_every_is_checked_whatever_the_call_sizes(minilm, texts):
    pytest.importorskip("tokie")
    enc = fast_encoder(minilm.tokenizer, minilm.spec.max_length)
    enc.checked = 0
    sizes = [1] * 250 + [32] * 20 + [7] * 30  # 1,100 texts
    at = 0
    for n in sizes:
        enc([texts[(at + i) % len(texts)] for i in range(n)])
        at += n
    assert abs(enc.checked - at / CHECK_EVERY) <= 1


def test_the_choice_can_be_capped(minilm, monkeypatch):
    monkeypatch.setenv("INFERTUNE_TOKENIZER", "tokenizers")
    enc = fast_encoder(minilm.tokenizer, minilm.spec.max_length)
    assert enc.name == "tokenizers" and not enc.holds_gil
    assert enc(list(PROBES)) == reference_ids(minilm.tokenizer, PROBES, minilm.spec.max_length)
    monkeypatch.setenv("INFERTUNE_TOKENIZER", "transformers")
    assert fast_encoder(minilm.tokenizer, minilm.spec.max_length) is None
