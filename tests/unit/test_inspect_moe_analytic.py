"""inspect's headline FLOPs for an MoE model. On meta tensors the router's picks mean nothing, so torch's
counter saw DeepSeek-V2-Lite at 1.93 (prefill) and 60.33 (decode) GFLOP/token where a token really multiplies
through ~2.4B active weights (15.7B total). The headline and the per-layer table must be the analytic count
then, and a config transformers has no code for must still be counted, analytically, saying so.

The figure checked here is computed from the config in this file, not with infertune's own functions:
2 FLOPs per active weight (MLA projections, the dense first layer, 6 routed + 2 shared experts and the
router in each MoE layer, lm_head once per prompt in prefill and once per token in decode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

# DeepSeek-V2-Lite's published config.json (deepseek-ai/DeepSeek-V2-Lite)
DSV2_LITE = Path(__file__).parent / "configs" / "deepseek-v2-lite.json"
N = 128  # prompt tokens: attention over 128 keys is 0.8% of a token's FLOPs, so 2 x active weights is the figure


def _active(c: dict) -> tuple[int, int, dict[str, int]]:
    """(active weights in the blocks, lm_head weights, per-block parts) of one token, from the config."""
    h, heads, r = c["hidden_size"], c["num_attention_heads"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    assert c["q_lora_rank"] is None  # V2-Lite projects q straight from the hidden state
    attn = h * heads * (nope + rope) + h * (r + rope) + r * heads * (nope + v) + heads * v * h  # q, kv_a, kv_b, o
    dense_mlp = 3 * h * c["intermediate_size"]
    expert = 3 * h * c["moe_intermediate_size"]
    moe_active = (c["num_experts_per_tok"] + c["n_shared_experts"]) * expert + h * c["n_routed_experts"]
    moe_all = (c["n_routed_experts"] + c["n_shared_experts"]) * expert + h * c["n_routed_experts"]
    dense, layers = c["first_k_dense_replace"], c["num_hidden_layers"]
    blocks = layers * attn + dense * dense_mlp + (layers - dense) * moe_active
    parts = {"attn": attn, "dense_mlp": dense_mlp, "moe_active": moe_active, "moe_all": moe_all, "norms": 2 * h}
    return blocks, c["vocab_size"] * h, parts


def _check_headline(r, c: dict) -> None:
    blocks, head, _ = _active(c)
    assert 2.3e9 < blocks + head < 2.5e9  # DeepSeek's "2.4B activated" (the input embedding is a gather)
    prefill, decode = 2 * blocks + 2 * head / N, 2 * (blocks + head)
    assert r.flops_per_token["prefill"] == pytest.approx(prefill, rel=0.10)
    assert r.flops_per_token["decode"] == pytest.approx(decode, rel=0.10)
    assert r.flops_source == {"prefill": "analytic", "decode": "analytic"}
    for ph in ("prefill", "decode"):  # the per-layer table is the same count as the headline
        assert sum(v[ph] for v in r.flops_per_token_by_layer.values()) == pytest.approx(r.flops_per_token[ph], rel=1e-9)
    assert r.params == pytest.approx(15.706e9, rel=0.001)  # "15.7B total"


def _check_intensity(r, c: dict) -> None:
    """Batch 1, 16-bit weights: a decode step does 2 FLOPs per 2-byte weight it reads (intensity 1; attention
    over 129 keys adds 0.8%, activations and the cache take 0.1%). A 128-token prefill reaches all 64 experts of
    an MoE layer (1 - (58/64)^128 > 0.99999), so it reads every weight of it for 128 x its active FLOPs."""
    _, _, p = _active(c)
    for k, ai in r.arithmetic_intensity_by_layer.items():
        if k.startswith("layer"):
            assert ai["decode"] == pytest.approx(1.0, rel=0.02), k
    moe_bytes = 2 * (p["attn"] + p["moe_all"] + p["norms"])
    # activations in and out (8 experts' matmuls per token) and the cache written add 1.5% of the bytes
    bound = N * r.flops_per_token_by_layer["layer01"]["prefill"] / moe_bytes
    assert r.arithmetic_intensity_by_layer["layer01"]["prefill"] == pytest.approx(bound, rel=0.03)
    assert r.arithmetic_intensity_by_layer["layer00"]["prefill"] > 5 * bound  # the dense layer reads 1/7 the bytes


def test_deepseek_v2_lite_headline_is_the_analytic_count():
    from infertune.inspect import InspectConfig, inspect_model

    c = json.loads(DSV2_LITE.read_text())
    r = inspect_model(InspectConfig(model=str(DSV2_LITE), seq_len=N))
    assert r.count_method == "meta"  # transformers builds DeepseekV2 here; its counter is what is overruled
    _check_headline(r, c)
    _check_intensity(r, c)
    assert any("analytic count (MoE" in n for n in r.notes)


def test_no_modelling_code_falls_back_to_the_analytic_count_and_says_so(tmp_path):
    """A model type this transformers does not know (what DeepSeek-V2 was before transformers shipped it, and
    any trust_remote_code model offline): the same analytic count, from config.json alone."""
    from infertune.cli.main import app

    c = json.loads(DSV2_LITE.read_text())
    d = tmp_path / "DeepSeek-V2-Lite"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**c, "model_type": "deepseek_v2_unreleased"}))
    res = CliRunner().invoke(app, ["inspect", str(d), "--seq-len", str(N), "--gpu", "H100", "--json"])
    assert res.exit_code == 0, res.output
    from infertune.inspect import InspectResult

    r = InspectResult.model_validate_json(res.stdout)
    assert r.count_method == "analytic" and r.flops_per_token_counter == {}
    _check_headline(r, c)
    _check_intensity(r, c)
    assert "analytic count from config.json (MoE: 6 of 64 routed + 2 shared experts per token; MLA" in res.stderr
    assert "counted in" in res.stderr and "analytic, from config.json" in res.stderr
    # H100: 989.5 TFLOP/s over 3350 GB/s = 295 FLOP/byte; a decode step at intensity 1 is memory-bound
    assert r.ridge_flop_per_byte == pytest.approx(989.5e12 / 3350e9)
    assert all(b["decode"] == "memory" for b in r.bound_by_layer.values())
