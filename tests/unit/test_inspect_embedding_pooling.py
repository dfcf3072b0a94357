"""`inspect` on an embedding model counts what it runs. Qwen3-Embedding-0.6B is published as a
Qwen3ForCausalLM checkpoint in a sentence-transformers directory: inspect used to give it decode FLOPs and
"KV cache: 114688 bytes/token". An embedder runs its body once per input: prefill FLOPs at the workload's
lengths, no lm_head, no KV cache, and the pooling its 1_Pooling/config.json names (last token here)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

# Qwen3-Embedding-0.6B's published config.json (weights are not needed: inspect builds it on the meta device)
QWEN3_EMBEDDING = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 32768, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151669,
}
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
POOLING = {"word_embedding_dimension": 1024, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
           "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
           "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True, "include_prompt": True}
TEXTS = ["short", "a somewhat longer sentence about embeddings and pooling", "x " * 300]


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory):
    """The sentence-transformers layout of Qwen3-Embedding-0.6B, with MiniLM's tokenizer.json standing in for
    Qwen3's (not installed here): inspect must count lengths with whatever tokenizer the directory holds."""
    from infertune.models.resolve import resolve_model

    d = tmp_path_factory.mktemp("models") / "Qwen3-Embedding-0.6B"
    (d / "1_Pooling").mkdir(parents=True)
    (d / "2_Normalize").mkdir()
    (d / "config.json").write_text(json.dumps(QWEN3_EMBEDDING))
    (d / "modules.json").write_text(json.dumps(MODULES))
    (d / "1_Pooling" / "config.json").write_text(json.dumps(POOLING))
    (d / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "Query:", "document": ""}}))
    shutil.copy(resolve_model("minilm").path / "tokenizer.json", d / "tokenizer.json")
    wl = d.parent / "texts.jsonl"
    wl.write_text("".join(json.dumps({"input": t}) + "\n" for t in TEXTS))
    return d, wl


def _hand_count(n_tokens: list[int]) -> tuple[int, float, float]:
    """(parameters, FLOPs per token at 64 tokens, mean FLOPs per input) of the Qwen3 body from its config."""
    h, inter, layers, heads, kv, d, vocab = 1024, 3072, 28, 16, 8, 128, 151669
    linear = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * inter  # q, k, v, o; gate, up, down
    norms = 2 * h + 2 * d  # input/post-attention RMSNorm, q_norm and k_norm
    params = vocab * h + layers * (linear + norms) + h
    per_key = layers * 2 * heads * (d + d)  # QK^T and AV over every key: 2 FLOPs per multiply-add
    flops_64 = 2 * layers * linear + per_key * 64
    per_item = sum(2 * layers * linear * n + per_key * n * n for n in n_tokens) / len(n_tokens)
    return params, flops_64, per_item


def test_qwen3_embedding_has_no_kv_cache_and_shows_its_pooling(st_dir):
    from tokenizers import Tokenizer

    from infertune.cli.main import app

    d, wl = st_dir
    res = CliRunner().invoke(app, ["inspect", str(d), "--seq-len", "64", "--workload", str(wl), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    text = res.stderr
    assert "KV cache: none" in text and "bytes/token" not in text and "FLOPs per token, decode" not in text
    assert "pooling last, normalized (from 1_Pooling/config.json)" in text
    assert r["task"] == "embed" and r["kv_bytes_per_token"] == 0 and set(r["flops_per_token"]) == {"prefill"}
    assert r["pooling"]["pooling"] == "last" and r["pooling"]["normalize"] is True
    assert r["architecture"] == "Qwen3Model" and "lm_head" not in r["flops_per_token_by_layer"]

    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    lengths = [len(e.ids) for e in tok.encode_batch(TEXTS)]
    params, flops_64, per_item = _hand_count(lengths)
    assert r["params"] == params  # 595,776,512: the body alone, the tied lm_head is not part of an embedder
    # both count matmuls only (2 FLOPs per multiply-add): they agree up to float rounding
    assert r["flops_per_token"]["prefill"] == pytest.approx(flops_64, rel=1e-9)
    w = r["workload"]
    assert w["items"] == 3 and w["max_tokens"] == max(lengths) and "tokenizer" in w["lengths"]
    assert w["flops_per_item_mean"] == pytest.approx(per_item, rel=1e-9)


def test_a_config_alone_gets_the_decoder_embedders_default_pooling(tmp_path):
    """No sentence-transformers files: last-token pooling, normalised (what embedding_spec gives such a model)."""
    from infertune.inspect import InspectConfig, inspect_model

    d = tmp_path / "Qwen3-Embedding-0.6B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(QWEN3_EMBEDDING))
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    r = inspect_model(InspectConfig(model=str(d), seq_len=16, workload=texts))
    assert r.task == "embed" and r.kv_bytes_per_token == 0
    assert (r.pooling["pooling"], r.pooling["normalize"]) == ("last", True) and "default" in r.pooling["source"]
    assert "estimated at 4 characters per token" in r.workload["lengths"]  # no tokenizer.json beside it

