import json
from pathlib import Path

import pytest

from infertune.inspect import InspectConfig, inspect_model

TINY = {  # head_dim 32 != hidden/heads 16 on purpose
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "vocab_size": 1000, "max_position_embeddings": 256, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "hidden_act": "silu", "rms_norm_eps": 1e-5,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("tiny") / "config.json"
    p.write_text(json.dumps(TINY))
    return p


def test_flops_match_a_hand_count(tiny):
    n = 16
    r = inspect_model(InspectConfig(model=str(tiny), seq_len=n))
    # per layer: q 64x128, k 64x64, v 64x64, o 128x64, gate/up/down 3x64x128 -> 49,152 weights
    linear = 2 * 2 * 49152  # 2 FLOPs per weight, 2 layers
    lm_head = 2 * 64 * 1000  # computed for the last prompt token only
    attn = 2 * 2 * 2 * 4 * 32  # per key: 2 layers x (QK^T + AV) x 2 FLOPs x 4 query heads x head_dim 32
    prefill = (n * linear + n * attn * n + lm_head) / n
    decode = linear + attn * (n + 1) + lm_head
    assert r.flops_per_token["prefill"] == pytest.approx(prefill, rel=0.01)
    assert r.flops_per_token["decode"] == pytest.approx(decode, rel=0.01)
    assert r.flops_per_token_analytic["prefill"] == pytest.approx(prefill, rel=0.01)
    assert r.flops_per_token_analytic["decode"] == pytest.approx(decode, rel=0.01)
    assert r.attention_flops_share["prefill"] == pytest.approx(attn * n / prefill, rel=0.01)  # + rotary's tiny bmm
    assert set(r.flops_per_token_by_layer) >= {"layer00", "layer01", "lm_head"}
    assert r.params == 2 * 49152 + 2 * 64000 + 2 * 2 * 64 + 64  # + RMSNorm weights (2 per layer + final)
    assert r.kv_bytes_per_token == 2 * 2 * 2 * 32 * 2 and r.kv_layout == "GQA"
    assert r.params_by_dtype == {"BF16": r.params}


def test_sensitivity_from_tune_results(tiny, tmp_path):
    res = tmp_path / "results.json"
    sens = [{"layer": "encoder.layer.0.attention.self.query", "cosine_mean": 0.999, "cosine_min": 0.99, "drop": 0.001}]
    res.write_text(json.dumps({"sensitivity": sens}))
    r = inspect_model(InspectConfig(model=str(tiny), seq_len=8, sensitivity=True, results=res))
    assert r.sensitivity == sens and r.sensitivity_source == str(res)


def test_minilm_from_its_files():
    r = inspect_model(InspectConfig(model="minilm", seq_len=128))
    assert r.params == 22_713_216 and r.dtype_source == "safetensors headers"
    assert r.kv_bytes_per_token == 0 and "decode" not in r.flops_per_token
    assert r.flops_per_token["prefill"] == pytest.approx(r.flops_per_token_analytic["prefill"], rel=0.01)


def test_configs_for_real_models_inspect(tmp_path):
    cfgs = Path(__file__).parent / "configs"
    r = inspect_model(InspectConfig(model=str(cfgs / "qwen3-0.6b.json"), seq_len=64))
    assert r.head_dim == 128 and r.kv_bytes_per_token == 114688
    assert r.flops_per_token["decode"] == pytest.approx(r.flops_per_token_analytic["decode"], rel=0.01)
