from pathlib import Path

import pytest

from infertune.plan.arch import arch_from_config, load_config

CONFIGS = Path(__file__).parents[1] / "configs"


def arch(name):
    return arch_from_config(load_config(CONFIGS / f"{name}.json"))


@pytest.mark.parametrize("name,params,tol", [
    ("llama-3-8b", 8_030_261_248, 0.0),  # Meta's published count, exactly
    ("qwen3-0.6b", 596_049_920, 0.001),  # HF safetensors count (includes q/k norms, which we omit)
    ("deepseek-v2-lite", 15.706e9, 0.001),  # "15.7B total"
])
def test_parameter_counts(name, params, tol):
    assert arch(name).params() == pytest.approx(params, rel=tol)


def test_kv_bytes_per_token_gqa_head_dim_and_mla():
    # Llama-3-8B: 2 (K,V) x 32 layers x 8 KV heads x 128 x 2 bytes
    assert arch("llama-3-8b").kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131072
    # Qwen3-0.6B: head_dim 128 from the config, not hidden/heads = 64
    assert arch("qwen3-0.6b").kv_bytes_per_token() == 2 * 28 * 8 * 128 * 2
    # DeepSeek-V2-Lite MLA: one latent of kv_lora_rank 512 + rope 64 per layer, no 2x
    ds = arch("deepseek-v2-lite")
    assert ds.kv_bytes_per_token() == 27 * (512 + 64) * 2
    assert ds.kv_bytes_per_token(tp=4) == ds.kv_bytes_per_token()  # MLA latent is not split by TP
    llama = arch("llama-3-8b")
    assert llama.kv_bytes_per_token(tp=4) == 131072 // 4
    assert llama.kv_bytes_per_token(tp=16) == 131072 // 8  # 8 KV heads: replicated beyond TP 8
    assert llama.kv_bytes_per_token("fp8") == 65536


def test_moe_active_params():
    ds = arch("deepseek-v2-lite")
    assert 2.2e9 < ds.params(active=True) < 2.8e9  # "2.4B activated" (+ embeddings)


def test_encoder_count_includes_positions_token_types_biases_and_pooler():
    """MiniLM (BertModel): the decoder-shaped count missed 371k of 22.7M (position and token-type tables,
    biases, the pooler); the true count is transformers' own, built from the config on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModel

    from infertune.models.resolve import resolve_model

    path = resolve_model("minilm").path
    with torch.device("meta"):
        model = AutoModel.from_config(AutoConfig.from_pretrained(str(path)))
    true = sum(p.numel() for p in model.parameters())
    assert arch_from_config(load_config(path)).params() == pytest.approx(true, rel=0.001)
