"""inspect counts tied weights once. Qwen3-0.6B ties lm_head to embed_tokens; counting the shared
matrix twice reported 751M parameters instead of ~596M. The true count comes from transformers itself:
the model built from the config on the meta device, whose parameters() yields a tied weight once."""

from pathlib import Path

import pytest

from infertune.inspect import InspectConfig, inspect_model

QWEN3 = Path(__file__).parent / "configs" / "qwen3-0.6b.json"


def _true_count(cfg_path: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.from_pretrained(str(cfg_path))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    assert model.lm_head.weight is model.get_input_embeddings().weight  # the config says tied; the model is tied
    return sum(p.numel() for p in model.parameters())


def test_tied_output_layer_counted_once():
    true = _true_count(QWEN3)
    r = inspect_model(InspectConfig(model=str(QWEN3), seq_len=16))
    assert r.params == pytest.approx(true, rel=0.01)
    assert r.params < 700e6  # not the double count (751M): 151936 x 1024 = 155.6M once, not twice
    assert sum(r.params_by_dtype.values()) == r.params
    assert any("lm_head.weight" in n and "tied" in n for n in r.notes)
