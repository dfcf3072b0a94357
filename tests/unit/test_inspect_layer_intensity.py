"""inspect's per-layer table gives each layer's bytes and arithmetic intensity (FLOPs / bytes of one step
at batch 1), checked by hand on a two-layer Llama small enough to count: what a layer reads is its weights, each
Linear's input and output, and its KV cache (written in prefill, read in decode)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

TINY = {  # bf16: 2 bytes per weight, activation and cached value
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "vocab_size": 1000, "max_position_embeddings": 256, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "hidden_act": "silu", "rms_norm_eps": 1e-5,
}
N = 16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("tiny-intensity") / "config.json"
    p.write_text(json.dumps(TINY))
    return p


def test_bytes_and_intensity_per_layer_by_hand(tiny):
    from infertune.inspect import InspectConfig, inspect_model

    r = inspect_model(InspectConfig(model=str(tiny), seq_len=N))
    weights = (64 * 128 + 2 * 64 * 64 + 128 * 64 + 3 * 64 * 128 + 2 * 64) * 2  # q k v o, gate up down, 2 RMSNorms
    # per token: q/k/v read 64 and write 128+64+64, o reads 128 and writes 64; gate/up read 64 and write 2x128,
    # down reads 128 and writes 64
    io = ((64 + 256) + (128 + 64) + (64 + 256) + (128 + 64)) * 2
    kv = 2 * 2 * 32 * 2  # K and V, 2 KV heads of 32, per token
    prefill_bytes = weights + N * io + N * kv  # the prompt's cache is written
    decode_bytes = weights + io + (N + 1) * kv  # 16 cached tokens read, the new one written
    linear = 2 * (weights // 2 - 2 * 64)  # 2 FLOPs per weight, norms aside
    attn = 2 * 4 * (32 + 32)  # per key: QK^T and AV, 4 query heads of 32
    for k in ("layer00", "layer01"):
        assert r.bytes_by_layer[k]["prefill"] == prefill_bytes
        assert r.bytes_by_layer[k]["decode"] == decode_bytes
        assert r.arithmetic_intensity_by_layer[k]["prefill"] == pytest.approx(N * (linear + attn * N) / prefill_bytes,
                                                                              rel=1e-9)
        assert r.arithmetic_intensity_by_layer[k]["decode"] == pytest.approx((linear + attn * (N + 1)) / decode_bytes,
                                                                             rel=1e-9)
    head_bytes = 1000 * 64 * 2 + (64 + 1000) * 2  # its weights; one token's hidden state in, its logits out
    assert r.bytes_by_layer["lm_head"] == {"prefill": head_bytes, "decode": head_bytes}
    assert r.arithmetic_intensity_by_layer["lm_head"]["decode"] == pytest.approx(2 * 1000 * 64 / head_bytes, rel=1e-9)


def test_the_table_merges_identical_layers_and_names_the_bound(tiny):
    from infertune.cli.main import app

    res = CliRunner().invoke(app, ["inspect", str(tiny), "--seq-len", str(N), "--gpu", "L4"])
    assert res.exit_code == 0, res.output
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.strip().startswith(("layer00", "lm_head"))]
    assert [r[0] for r in rows] == ["layer00-01", "lm_head"]
    assert "prefill FLOP/byte" in res.stdout and "decode bound on L4" in res.stdout
    assert rows[0][-2:] == ["memory", "memory"]  # intensity ~1 and ~12 against L4's ridge of 403 FLOP/byte
