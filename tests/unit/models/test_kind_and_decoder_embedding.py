"""What a model is for (models/kind.py), last-token pooling on either padding side, prompts and Matryoshka
dimensions in the request schema, and random weights from a config.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from infertune.errors import InfertuneError
from infertune.models.kind import model_kind
from infertune.models.resolve import resolve_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from tiny_models import tiny_model_dir  # noqa: E402


def _model_dir(root, name: str, config: dict, weights: bool = True, **files: str):
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    if weights:
        (d / "model.safetensors").write_bytes(b"")
    for f, text in files.items():
        (d / f.replace("__", ".")).write_text(text)
    return d


QWEN = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024}


@pytest.mark.parametrize("name, config, files, task, want", [
    ("bert", {"architectures": ["BertModel"], "model_type": "bert"}, {}, None, ("embed", "encoder")),
    ("qwen3-chat", QWEN, {}, None, ("generate", "decoder")),
    ("Qwen3-Embedding-0.6B", QWEN, {}, None, ("embed", "decoder")),  # a causal arch, but its name says embedding
    ("plain", QWEN, {"config_sentence_transformers__json": "{}"}, None, ("embed", "decoder")),
    ("qwen3-chat", QWEN, {}, "embed", ("embed", "decoder")),  # the user's word wins
    ("Qwen3-Embedding-0.6B", QWEN, {}, "generate", ("generate", "decoder")),
    ("st", QWEN, {"modules__json": "[]"}, None, ("embed", "decoder")),
    ("llama-notype", {"model_type": "llama"}, {}, None, ("generate", "decoder")),
])
def test_model_kind(tmp_path, name, config, files, task, want):
    d = _model_dir(tmp_path / "embeddings-tests", name, config, **files)  # "embed" above the model says nothing
    k = model_kind(resolve_model(d), task)
    assert (k.task, k.arch) == want, k
    assert k.why


def test_model_kind_refusals(tmp_path):
    d = _model_dir(tmp_path, "bert", {"architectures": ["BertModel"], "model_type": "bert"})
    with pytest.raises(InfertuneError, match="needs a causal LM"):
        model_kind(resolve_model(d), "generate")
    with pytest.raises(InfertuneError, match="unknown --task"):
        model_kind(resolve_model(d), "classify")
    cfg = tmp_path / "llama.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))  # a named .json file, not config.json
    assert model_kind(resolve_model(cfg)).task == "generate"


def test_last_token_pooling_reads_the_last_real_token_on_either_side():
    import torch

    from infertune.models.embedding import pool

    h = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])  # the second row is all padding (a bucket row)
    assert torch.equal(pool(h, right, "last"), torch.stack([h[0, 2], h[1, 4]]))
    assert torch.equal(pool(h, left, "last"), torch.stack([h[0, 4], h[1, 0]]))


def _parse(body: dict, **kw):
    from infertune.serve.schema import parse_request

    args = dict(served=["m"], dim=8, vocab_size=100, max_length=16, max_items=8, truncate=False)
    return parse_request(json.dumps({"model": "m", **body}).encode(), **{**args, **kw})


def test_schema_dimensions_and_prompts():
    from infertune.serve.schema import ApiError, shorten

    assert _parse({"input": "x", "dimensions": 3}).dimensions == 3
    assert _parse({"input": "x", "dimensions": 8}).dimensions is None  # the full size: nothing to cut
    for bad in (0, 9, "3", 2.5):
        with pytest.raises(ApiError, match="dimensions"):
            _parse({"input": "x", "dimensions": bad})
    prompts = {"query": "Q: ", "document": ""}
    assert _parse({"input": ["a", "b"], "prompt_name": "query"}, prompts=prompts).texts == ["Q: a", "Q: b"]
    assert _parse({"input": ["a"]}, prompts=prompts, default_prompt="query").texts == ["Q: a"]
    assert _parse({"input": ["a"], "prompt_name": "document"}, prompts=prompts, default_prompt="query").texts == ["a"]
    assert _parse({"input": [1, 2]}, prompts=prompts, default_prompt="query").ids == [[1, 2]]  # ids: untouched
    with pytest.raises(ApiError, match="prompt_name"):
        _parse({"input": "a", "prompt_name": "nope"}, prompts=prompts)
    v = np.array([[3.0, 4.0, 12.0]], dtype=np.float32)
    assert np.allclose(shorten(v, 2), [[0.6, 0.8]]) and shorten(v, None) is v


def test_spec_reads_prompts_and_random_weights_from_a_config(tmp_path, monkeypatch):
    """A config.json with a tokenizer beside it: random weights materialised once (cached), then an ordinary
    embedder; config_sentence_transformers.json prompts are read, and --prompt style overrides extend them."""
    from infertune.engines.embedding_artifact import load_model
    from infertune.models.embedding import embedding_spec

    monkeypatch.setenv("INFERTUNE_CACHE", str(tmp_path / "cache"))
    d = tiny_model_dir(tmp_path, "tiny-bert", {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 30522, "max_position_embeddings": 64},
        config_sentence_transformers__json={"prompts": {"query": "query: ", "document": ""},
                                            "default_prompt_name": "query"})
    spec = embedding_spec(d / "config.json", prompts={"passage": "passage: "})
    assert spec.random_weights and spec.dim == 32 and spec.pooling == "mean"
    assert spec.prompts == {"query": "query: ", "document": "", "passage": "passage: "}
    assert spec.default_prompt_name == "query" and spec.prompt(None) == "query: " and spec.prompt("document") == ""
    again = embedding_spec(d / "config.json")
    assert again.path == spec.path  # cached, not re-drawn
    v = load_model(d / "config.json").embed(["hello world", "a longer sentence than the first one"])
    assert v.shape == (2, 32) and np.isfinite(v).all()
    with pytest.raises(InfertuneError, match="default prompt"):
        embedding_spec(d / "config.json", default_prompt_name="missing")
    (d / "vocab.txt").unlink()
    (d / "tokenizer.json").unlink(missing_ok=True)
    monkeypatch.setenv("INFERTUNE_CACHE", str(tmp_path / "cache2"))
    with pytest.raises(InfertuneError, match="no tokenizer"):
        embedding_spec(d / "config.json")


@pytest.mark.parametrize("dims, want_ok", [(2, True), (None, False)])
def test_tune_verifies_on_the_dimensions_asked_for(dims, want_ok):
    """tune --dimensions N: a candidate is judged on the first N dimensions (what clients will request)."""
    from rich.console import Console

    from infertune.config import TuneConfig
    from infertune.tasks.embedding.task import EmbeddingTask

    task = EmbeddingTask(TuneConfig(dimensions=dims), Console(quiet=True), resolve_model("minilm"))
    task.ref_vectors = np.array([[1.0, 0.0, 5.0, 5.0], [0.0, 1.0, -5.0, 5.0]], dtype=np.float32)
    task.lengths = [7, 9]  # what load() sets: the eval items' token counts (verify buckets by them)
    got = np.array([[1.0, 0.0, -5.0, 1.0], [0.0, 1.0, 5.0, -2.0]], dtype=np.float32)  # same first 2, not the rest

    class Worker:
        def call(self, cmd, **k):
            return {"worst": [0.0, 0.0], "n_batches": 2} if cmd == "invariance" else got

    acc, ok, _ = task.verify(Worker(), SimpleNamespace(batching=SimpleNamespace(model_dump=dict)))
    assert ok is want_ok and (acc.cosine_min == pytest.approx(1.0) if dims else acc.cosine_min < 0.5)
